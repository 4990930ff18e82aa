import { defineErrorCodes, KovaError, type KovaErrorOptions } from "../../core/index.js";

/**
 * shell_exec's failures. The tools layer's own codes live with their tool (prefix SHELL_),
 * so the engineers building the other built-ins can add theirs without touching this file.
 */
export const ShellErrorCode = defineErrorCodes("tools", {
  SHELL_SANDBOX_UNAVAILABLE: "SHELL_SANDBOX_UNAVAILABLE",
  SHELL_SPAWN_FAILED: "SHELL_SPAWN_FAILED",
  SHELL_ABORTED: "SHELL_ABORTED",
  SHELL_WORK_DIR: "SHELL_WORK_DIR",
});

/**
 * No usable sandbox: bwrap is missing or cannot create namespaces here. Not retryable: the
 * host has to change (install bubblewrap, allow user namespaces) or the operator has to
 * choose `sandbox = "none"` on purpose.
 */
export class ShellSandboxUnavailableError extends KovaError {
  constructor(reason: string, options: KovaErrorOptions = {}) {
    super(
      ShellErrorCode.SHELL_SANDBOX_UNAVAILABLE,
      `shell_exec refuses to run: no usable sandbox (${reason}). Install bubblewrap (apt-get install bubblewrap) on a kernel that allows user namespaces, or set [tools.shell] sandbox = "none" if you knowingly accept commands running unconfined on this host`,
      { ...options, data: { reason } },
    );
  }
}

/** The sandbox (or the command, with sandbox = "none") could not be started; usually a transient resource shortage. */
export class ShellSpawnFailedError extends KovaError {
  constructor(reason: string, options: KovaErrorOptions = {}) {
    super(ShellErrorCode.SHELL_SPAWN_FAILED, `shell_exec could not start the command: ${reason}`, {
      retryable: true,
      ...options,
      data: { reason },
    });
  }
}

/** The call's signal fired (interrupt, kill, lease loss): the command was killed and has no result. */
export class ShellAbortedError extends KovaError {
  constructor(durationMs: number) {
    super(ShellErrorCode.SHELL_ABORTED, `shell_exec was aborted after ${durationMs} ms; the command and all its processes were killed`, {
      data: { durationMs },
    });
  }
}

/** The per-agent work directory under work_root cannot be made or reached by the sandbox. */
export class ShellWorkDirError extends KovaError {
  constructor(dir: string, reason: string, options: KovaErrorOptions = {}) {
    super(ShellErrorCode.SHELL_WORK_DIR, `shell_exec work dir ${dir}: ${reason}`, { ...options, data: { dir, reason } });
  }
}
