import { accessSync, constants } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ArgumentError } from "../../core/errors.js";
import type { Logger } from "../../core/logger.js";
import type { Tool, ToolContext } from "../types.js";
import type { ShellConfig } from "./shell-config.js";
import { ShellSandboxUnavailableError, ShellSpawnFailedError } from "./shell-errors.js";
import { runCaptured, type CapturedOutcome } from "./shell-process.js";
import { bwrapArgs, limitsPrologue, NOBODY, SANDBOX_ENV, SANDBOX_WORK_DIR, type SandboxWork } from "./shell-sandbox.js";
import { agentWorkDir, checkHostCwd, sandboxCwd } from "./shell-workdir.js";
import { componentLogger } from "../../core/logger.js";

export { shellConfigFrom, type ShellConfig } from "./shell-config.js";

/** shell_exec's arguments as the model writes them. */
export interface ShellArgs {
  /** A shell command line (run by /bin/sh -c) or an argv array (run directly, argv[0] looked up on PATH). */
  command: string | string[];
  stdin?: string;
  /** Relative to the work dir; must exist. */
  cwd?: string;
  /** Lower than the configured limit, or it is the configured limit. */
  timeout_ms?: number;
}

export interface ShellResult {
  /** Null when the command was ended by a signal (for example at the time or output limit). */
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  durationMs: number;
  /** The command reached its time limit and every process of the call was killed. */
  timedOut: boolean;
  /** stdout + stderr reached max_output_bytes; the rest was not read and the command was killed. */
  truncated: boolean;
  /** The time limit this call ran under. */
  timeoutMs: number;
}

export type SandboxStatus = { sandbox: "bwrap"; ok: true } | { sandbox: "bwrap"; ok: false; reason: string } | { sandbox: "none"; ok: true };

/** The shell_exec tool, plus the result of its start-up sandbox probe. */
export interface ShellTool extends Tool<ShellArgs, ShellResult> {
  run(args: ShellArgs, ctx: ToolContext): Promise<ShellResult>;
  /** Resolves once the sandbox probe made at creation has finished; never rejects. */
  ready(): Promise<SandboxStatus>;
}

const PROBE_TIMEOUT_MS = 10_000;
const MAX_STDIN_CHARS = 1024 * 1024;

/**
 * Creates `shell_exec`. With `sandbox = "bwrap"` it probes the sandbox once, now: when the
 * probe fails every call is refused with SHELL_SANDBOX_UNAVAILABLE (and the reason is
 * logged at warn), never run unconfined. With `sandbox = "none"` commands run as the
 * node's user with only the resource limits (no isolation at all). Not idempotent: a
 * command may change its work dir.
 */
export function createShellTool(config: ShellConfig, logger: Logger): ShellTool {
  const log = componentLogger(logger, "tools", { tool: "shell_exec" });
  const identity = process.getuid?.() === 0 && config.sandbox === "bwrap" ? { uid: NOBODY, gid: NOBODY } : undefined;
  const probe: Promise<SandboxStatus> = config.sandbox === "none" ? Promise.resolve({ sandbox: "none", ok: true }) : probeSandbox(config, identity);
  void probe.then((status) => {
    if (status.ok) log.info({ sandbox: config.sandbox, uid: identity?.uid ?? process.getuid?.() }, "shell_exec sandbox ready");
    else log.warn({ reason: status.reason }, "shell_exec has no usable sandbox: every call will be refused");
  });

  const run = async (args: ShellArgs, ctx: ToolContext): Promise<ShellResult> => {
    const status = await probe;
    if (!status.ok) throw new ShellSandboxUnavailableError(status.reason);
    const argv = commandArgv(args.command);
    const stdin = optionalString(args.stdin, "stdin", MAX_STDIN_CHARS);
    const timeoutMs = callTimeout(config.timeoutMs, args.timeout_ms, ctx.deadline);
    const cwd = sandboxCwd(optionalString(args.cwd, "cwd", 4096));
    const hostDir = config.workRoot === undefined ? undefined : await agentWorkDir(config.workRoot, ctx.agentId, identity);
    if (hostDir !== undefined) await checkHostCwd(hostDir, cwd.rel);
    else if (cwd.rel !== "") {
      throw new ArgumentError(
        "cwd",
        `each call gets a fresh, empty ${SANDBOX_WORK_DIR} (no work_root is configured), so ${JSON.stringify(args.cwd)} does not exist: create and enter it in the command (mkdir -p x && cd x && ...)`,
      );
    }
    const common = { stdin, timeoutMs, maxOutputBytes: config.maxOutputBytes, signal: ctx.signal };
    let outcome: CapturedOutcome;
    if (config.sandbox === "bwrap") {
      const work: SandboxWork = hostDir === undefined ? { kind: "tmpfs", bytes: config.workBytes } : { kind: "bind", hostDir };
      outcome = await runCaptured({
        file: config.bwrapPath,
        args: bwrapArgs(config, work, cwd.inside, argv),
        env: { ...SANDBOX_ENV },
        ...identity,
        ...common,
      });
    } else {
      outcome = await runUnconfined(config, hostDir, cwd.rel, argv, common);
    }
    const result: ShellResult = { ...outcome, timeoutMs };
    log.debug(
      {
        agentId: ctx.agentId,
        callId: ctx.callId,
        exitCode: result.exitCode,
        signal: result.signal,
        durationMs: result.durationMs,
        timedOut: result.timedOut,
        truncated: result.truncated,
      },
      "shell_exec done",
    );
    return result;
  };

  return {
    name: "shell_exec",
    description: describeTool(config),
    parameters: parameters(config),
    idempotent: false,
    run,
    ready: () => probe,
  };
}

/**
 * Starts a sandbox exactly as a call would (same mounts, limits and user) and runs `true`.
 * Never rejects: a failure is the reason in the status.
 */
export async function probeSandbox(config: ShellConfig, identity: { uid: number; gid: number } | undefined): Promise<SandboxStatus> {
  try {
    accessSync(config.bwrapPath, constants.X_OK);
  } catch {
    return { sandbox: "bwrap", ok: false, reason: `bwrap not found or not executable at ${config.bwrapPath}` };
  }
  try {
    accessSync("/bin/bash", constants.X_OK);
  } catch {
    return { sandbox: "bwrap", ok: false, reason: "/bin/bash not found: the sandbox sets its limits with bash" };
  }
  try {
    const probe = await runCaptured({
      file: config.bwrapPath,
      args: bwrapArgs(config, { kind: "tmpfs", bytes: config.workBytes }, SANDBOX_WORK_DIR, ["/bin/true"]),
      env: { ...SANDBOX_ENV },
      ...identity,
      timeoutMs: PROBE_TIMEOUT_MS,
      maxOutputBytes: 4096,
    });
    if (probe.exitCode === 0) return { sandbox: "bwrap", ok: true };
    const why = probe.timedOut ? `timed out after ${PROBE_TIMEOUT_MS} ms` : `exit ${probe.exitCode ?? probe.signal}: ${probe.stderr.trim() || "no message"}`;
    return { sandbox: "bwrap", ok: false, reason: `bwrap cannot create the sandbox here (${why})` };
  } catch (err) {
    return { sandbox: "bwrap", ok: false, reason: err instanceof ShellSpawnFailedError ? err.message : String(err) };
  }
}

async function runUnconfined(
  config: ShellConfig,
  hostDir: string | undefined,
  rel: string,
  argv: string[],
  common: { stdin: string | undefined; timeoutMs: number; maxOutputBytes: number; signal: AbortSignal },
): Promise<CapturedOutcome> {
  const dir = hostDir ?? (await mkdtemp(join(tmpdir(), "kova-shell-")));
  try {
    const cwd = join(dir, rel);
    return await runCaptured({
      file: "/bin/bash",
      // RLIMIT_NPROC is per user outside a user namespace: it would count the node's own threads.
      args: ["-c", limitsPrologue(config, false), "kova-shell", ...argv],
      env: { ...SANDBOX_ENV, HOME: dir, TMPDIR: dir },
      cwd,
      ...common,
    });
  } finally {
    if (hostDir === undefined) await rm(dir, { recursive: true, force: true });
  }
}

function commandArgv(command: unknown): string[] {
  if (typeof command === "string") {
    if (command.trim() === "") throw new ArgumentError("command", "must not be empty");
    if (command.includes("\0")) throw new ArgumentError("command", "must not contain a NUL byte");
    return ["/bin/sh", "-c", command];
  }
  if (Array.isArray(command) && command.length > 0 && command.every((a) => typeof a === "string")) {
    if (command[0] === "") throw new ArgumentError("command[0]", "must name the program to run");
    const nul = command.findIndex((a) => a.includes("\0"));
    if (nul >= 0) throw new ArgumentError(`command[${nul}]`, "must not contain a NUL byte");
    return [...command];
  }
  throw new ArgumentError("command", 'must be a command line ("ls -l") or a non-empty array of strings (["ls", "-l"])');
}

function optionalString(value: unknown, name: string, maxChars: number): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string") throw new ArgumentError(name, `must be a string, not ${typeof value}`);
  if (value.length > maxChars) throw new ArgumentError(name, `is ${value.length} characters; the limit is ${maxChars}`);
  return value;
}

function callTimeout(limit: number, asked: unknown, deadline: number | undefined): number {
  let ms = limit;
  if (asked !== undefined) {
    if (typeof asked !== "number" || !Number.isInteger(asked) || asked < 1) {
      throw new ArgumentError("timeout_ms", `must be a positive integer of milliseconds, not ${JSON.stringify(asked)}`);
    }
    ms = Math.min(ms, asked);
  }
  if (deadline !== undefined) ms = Math.min(ms, Math.max(1, deadline - Date.now()));
  return ms;
}

function describeTool(config: ShellConfig): string {
  const mib = (b: number) => `${Math.round(b / (1024 * 1024))} MiB`;
  const work =
    config.workRoot === undefined
      ? `a fresh, empty ${SANDBOX_WORK_DIR} for each call (${mib(config.workBytes)}; nothing persists)`
      : `${SANDBOX_WORK_DIR}, your own directory that persists between calls`;
  const where =
    config.sandbox === "bwrap"
      ? `Runs in an isolated Linux sandbox: no network, read-only system files (/usr), writable ${work} and /tmp (${mib(config.tmpBytes)}).`
      : `Runs on the host with working directory ${work}.`;
  return [
    `Runs a command and returns its exit code, stdout and stderr. ${where}`,
    `Limits: ${config.timeoutMs} ms wall time, ${config.maxOutputBytes} bytes of output (stdout + stderr), ${mib(config.memoryBytes)} of memory per process, ${config.maxProcesses} processes, ${mib(config.maxFileBytes)} per file; at a limit every process of the call is killed and timedOut or truncated says so.`,
    "Background processes do not survive the call.",
  ].join(" ");
}

function parameters(config: ShellConfig): Record<string, unknown> {
  return {
    type: "object",
    properties: {
      command: {
        description: 'A command line run by /bin/sh -c (e.g. "ls -l | wc -l"), or an argv array run without a shell (e.g. ["python3", "script.py"]).',
        anyOf: [
          { type: "string", minLength: 1 },
          { type: "array", items: { type: "string" }, minItems: 1 },
        ],
      },
      stdin: { type: "string", description: "Text written to the command's standard input.", maxLength: MAX_STDIN_CHARS },
      cwd: { type: "string", description: `Working directory relative to ${SANDBOX_WORK_DIR}; it must exist.` },
      timeout_ms: { type: "integer", minimum: 1, maximum: config.timeoutMs, description: `Wall-time limit, at most ${config.timeoutMs}.` },
    },
    required: ["command"],
    additionalProperties: false,
  };
}
