import { accessSync, constants } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ArgumentError, type Logger, componentLogger } from "../../core/index.js";
import type { Tool, ToolContext } from "../types.js";
import type { ShellConfig } from "./shell-config.js";
import {
  CALL_CGROUP_V2_PREFIX,
  type CallCgroup,
  type CallLimits,
  createCallCgroup,
  DEFAULT_CGROUP_PARENT,
  prepareCgroupParent,
  sweepDeadCallCgroups,
} from "./shell-cgroup.js";
import { CALL_CGROUP_V1_PREFIX, type CgroupV1Parents, createCallCgroupV1, findCgroupV1Parents } from "./shell-cgroup-v1.js";
import { ShellSandboxUnavailableError, ShellSpawnFailedError } from "./shell-errors.js";
import { runCaptured, type CapturedOutcome } from "./shell-process.js";
import { bwrapArgs, limitsPrologue, NOBODY, SANDBOX_ENV, SANDBOX_WORK_DIR, type SandboxWork } from "./shell-sandbox.js";
import { agentWorkDir, checkHostCwd, sandboxCwd } from "./shell-workdir.js";

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
  /**
   * The call's processes together reached memory_total_mb and the kernel killed all of them
   * (only with a cgroup; under the rlimit bound an allocation past the limit fails inside
   * the command, and a process past the limit cannot be started).
   */
  memoryExceeded: boolean;
  /** The time limit this call ran under. */
  timeoutMs: number;
}

/**
 * How one call's memory is bounded in total (docs/tools-shell-db.md): by its own cgroup
 * (memory_total_mb, pids max_processes) under a cgroup v2 `parent` (shell-cgroup.ts) or under
 * the node's own cgroup v1 `memory` and `pids` cgroups (shell-cgroup-v1.ts), or, where no
 * cgroup can be set up (`reason`), by RLIMIT_NPROC lowered to `processes` =
 * memory_total_mb / memory_mb; with sandbox = "none" only per process.
 */
export type MemoryBound = CgroupBound | { kind: "rlimit"; processes: number; reason: string } | { kind: "per-process" };

export type CgroupBound = { kind: "cgroup"; version: 2; parent: string } | ({ kind: "cgroup"; version: 1 } & CgroupV1Parents);

export type SandboxStatus =
  | { sandbox: "bwrap"; ok: true; memory: MemoryBound }
  | { sandbox: "bwrap"; ok: false; reason: string }
  | { sandbox: "none"; ok: true; memory: MemoryBound };

/** The shell_exec tool, plus the result of its start-up sandbox probe. */
export interface ShellTool extends Tool<ShellArgs, ShellResult> {
  run(args: ShellArgs, ctx: ToolContext): Promise<ShellResult>;
  /** Resolves once the sandbox probe made at creation has finished; never rejects. */
  ready(): Promise<SandboxStatus>;
}

const PROBE_TIMEOUT_MS = 10_000;
const MIB = 1024 * 1024;
const MAX_STDIN_CHARS = 1024 * 1024;

/**
 * Creates `shell_exec`. With `sandbox = "bwrap"` it probes the sandbox once, now: when the
 * probe fails every call is refused with SHELL_SANDBOX_UNAVAILABLE (and the reason is
 * logged at warn), never run unconfined. The same probe settles how a call's total memory
 * is bounded (a cgroup v2 or v1 per call, else RLIMIT_NPROC lowered; see MemoryBound). With `sandbox = "none"` commands run as the
 * node's user with only the resource limits (no isolation at all). Not idempotent: a
 * command may change its work dir.
 */
export function createShellTool(config: ShellConfig, logger: Logger): ShellTool {
  const log = componentLogger(logger, "tools", { tool: "shell_exec" });
  const identity = process.getuid?.() === 0 && config.sandbox === "bwrap" ? { uid: NOBODY, gid: NOBODY } : undefined;
  let memory: MemoryBound | undefined;
  const probe: Promise<SandboxStatus> =
    config.sandbox === "none" ? Promise.resolve({ sandbox: "none", ok: true, memory: { kind: "per-process" } }) : probeSandbox(config, identity, log);
  void probe.then((status) => {
    if (!status.ok) {
      log.warn({ reason: status.reason }, "shell_exec has no usable sandbox: every call will be refused");
      return;
    }
    memory = status.memory;
    log.info(
      {
        sandbox: config.sandbox,
        uid: identity?.uid ?? process.getuid?.(),
        memory,
        memoryBound: boundName(memory),
        memoryTotalMb: config.memoryTotalBytes / MIB,
      },
      "shell_exec sandbox ready",
    );
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
    let outcome: Sandboxed;
    if (status.sandbox === "bwrap") {
      const work: SandboxWork = hostDir === undefined ? { kind: "tmpfs", bytes: config.workBytes } : { kind: "bind", hostDir };
      outcome = await runSandboxed(config, status.memory, { work, cwd: cwd.inside, argv, identity, ...common }, log);
    } else {
      outcome = { ...(await runUnconfined(config, hostDir, cwd.rel, argv, common)), memoryExceeded: false };
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
        memoryExceeded: result.memoryExceeded,
      },
      "shell_exec done",
    );
    return result;
  };

  return {
    name: "shell_exec",
    // Read when the tool is listed to a model: once the probe has settled it states the process limit in force.
    get description() {
      return describeTool(config, memory);
    },
    parameters: parameters(config),
    idempotent: false,
    run,
    ready: () => probe,
  };
}

/**
 * Starts a sandbox exactly as a call would (same mounts, limits and user) and runs `true`;
 * then picks the cgroup backend (cgroupBound) and runs `true` again inside a call cgroup of
 * it. Never rejects: without a working sandbox the status says why; without a working
 * cgroup the status's memory bound is the rlimit fallback, with the reasons.
 */
export async function probeSandbox(config: ShellConfig, identity: Identity | undefined, log: Logger): Promise<SandboxStatus> {
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
  const fallback = (reason: string): MemoryBound => ({ kind: "rlimit", processes: rlimitProcesses(config), reason });
  const plain = await probeRun(config, identity, fallback("probe"), log);
  if (plain !== undefined) return { sandbox: "bwrap", ok: false, reason: `bwrap cannot create the sandbox here (${plain})` };
  if (config.cgroup === "off") return { sandbox: "bwrap", ok: true, memory: fallback('cgroup = "off"') };
  const picked = await cgroupBound(config, identity, log);
  return { sandbox: "bwrap", ok: true, memory: "reason" in picked ? fallback(picked.reason) : picked };
}

/**
 * The first cgroup backend that works here, in order: cgroup v2 under `config.cgroup` (its
 * parent must have the memory and pids controllers); then, with cgroup = "auto" only, cgroup
 * v1 under the node's own memory and pids cgroups. "Works" means a sandbox ran `true` in a
 * call cgroup of it. Otherwise the reason of each, for the rlimit fallback.
 */
async function cgroupBound(config: ShellConfig, identity: Identity | undefined, log: Logger): Promise<CgroupBound | { reason: string }> {
  const reasons: string[] = [];
  const tryBound = async (version: string, bound: CgroupBound | { ok: false; reason: string }) => {
    if ("ok" in bound) {
      reasons.push(`cgroup ${version}: ${bound.reason}`);
      return undefined;
    }
    const failed = await probeRun(config, identity, bound, log);
    if (failed === undefined) return bound;
    reasons.push(`cgroup ${version}: a sandbox in a call cgroup under ${boundName(bound)} failed: ${failed}`);
    return undefined;
  };
  const v2 = await prepareCgroupParent(config.cgroup);
  const picked = await tryBound("v2", v2.ok ? { kind: "cgroup", version: 2, parent: v2.dir } : v2);
  if (picked !== undefined) return sweptOf(picked, log);
  // A directory the operator named is a cgroup v2 delegation; only "auto" may use what the node finds itself in.
  if (config.cgroup === DEFAULT_CGROUP_PARENT) {
    const v1 = await findCgroupV1Parents();
    const found = await tryBound("v1", v1.ok ? { kind: "cgroup", version: 1, memory: v1.memory, pids: v1.pids } : v1);
    if (found !== undefined) return sweptOf(found, log);
  }
  return { reason: reasons.join("; ") };
}

/** `bound`, once the call cgroups that dead nodes left under it are removed (logged, never fatal). */
async function sweptOf(bound: CgroupBound, log: Logger): Promise<CgroupBound> {
  const under: Array<[string, string]> =
    bound.version === 2
      ? [[bound.parent, CALL_CGROUP_V2_PREFIX]]
      : [
          [bound.memory, CALL_CGROUP_V1_PREFIX],
          [bound.pids, CALL_CGROUP_V1_PREFIX],
        ];
  for (const [parent, prefix] of under) {
    const { removed, failed } = await sweepDeadCallCgroups(parent, prefix);
    if (removed.length > 0) log.info({ parent, removed: removed.length }, "removed call cgroups that stopped nodes left behind");
    for (const f of failed) log.warn({ dir: f.dir, reason: f.reason }, "could not remove a call cgroup a stopped node left behind: rmdir it");
  }
  return bound;
}

/** How a call's memory is bounded, in words, for the log and for reasons. */
export function boundName(memory: MemoryBound): string {
  switch (memory.kind) {
    case "cgroup":
      return memory.version === 2 ? `cgroup v2 under ${memory.parent}` : `cgroup v1 under ${memory.memory} and ${memory.pids}`;
    case "rlimit":
      return `RLIMIT_NPROC ${memory.processes} x memory_mb (no cgroup: ${memory.reason})`;
    default:
      return 'per-process rlimits only (sandbox = "none")';
  }
}

/**
 * The call cgroup of one call under `bound`, of the backend's version.
 * @throws the filesystem error when a directory or a limit cannot be written
 */
export function openCallCgroup(bound: CgroupBound, limits: CallLimits = {}): Promise<CallCgroup> {
  return bound.version === 2 ? createCallCgroup(bound.parent, limits) : createCallCgroupV1(bound, limits);
}

/** One `true` in a sandbox; the reason it failed, or undefined. */
async function probeRun(config: ShellConfig, identity: Identity | undefined, memory: MemoryBound, log: Logger): Promise<string | undefined> {
  try {
    const work: SandboxWork = { kind: "tmpfs", bytes: config.workBytes };
    const probe = await runSandboxed(
      config,
      memory,
      { work, cwd: SANDBOX_WORK_DIR, argv: ["/bin/true"], identity, stdin: undefined, timeoutMs: PROBE_TIMEOUT_MS, maxOutputBytes: 4096 },
      log,
    );
    if (probe.exitCode === 0) return undefined;
    return probe.timedOut ? `timed out after ${PROBE_TIMEOUT_MS} ms` : `exit ${probe.exitCode ?? probe.signal}: ${probe.stderr.trim() || "no message"}`;
  } catch (err) {
    return err instanceof ShellSpawnFailedError ? err.message : String(err);
  }
}

type Identity = { uid: number; gid: number };
type Sandboxed = CapturedOutcome & { memoryExceeded: boolean };

interface SandboxCall {
  work: SandboxWork;
  cwd: string;
  argv: string[];
  identity: Identity | undefined;
  stdin: string | undefined;
  timeoutMs: number;
  maxOutputBytes: number;
  signal?: AbortSignal;
}

/**
 * Runs one command in bwrap under the memory bound the probe settled on: in a cgroup of its
 * own (joined before the command starts, killed and removed after it ends), or with
 * RLIMIT_NPROC lowered to the rlimit fallback's process count.
 * @throws ShellSpawnFailedError when bwrap or the call's cgroup cannot be set up
 * @throws ShellAbortedError when the call's signal fires
 */
async function runSandboxed(config: ShellConfig, memory: MemoryBound, call: SandboxCall, log: Logger): Promise<Sandboxed> {
  const { work, cwd, argv, identity, ...common } = call;
  const spawnAs = { file: config.bwrapPath, env: { ...SANDBOX_ENV }, ...identity, ...common };
  if (memory.kind !== "cgroup") {
    const nproc = memory.kind === "rlimit" ? memory.processes : config.maxProcesses;
    const outcome = await runCaptured({ ...spawnAs, args: bwrapArgs(config, work, cwd, argv, { nproc, gated: false }) });
    return { ...outcome, memoryExceeded: false };
  }
  let cgroup: CallCgroup;
  try {
    cgroup = await openCallCgroup(memory, { memoryBytes: config.memoryTotalBytes, pids: config.maxProcesses });
  } catch (err) {
    throw new ShellSpawnFailedError(`cannot create the call's cgroup, ${boundName(memory)} (${(err as NodeJS.ErrnoException).code ?? String(err)})`, {
      cause: err,
    });
  }
  try {
    const outcome = await runCaptured({
      ...spawnAs,
      args: bwrapArgs(config, work, cwd, argv, { nproc: config.maxProcesses, gated: true }),
      gate: (pid) => cgroup.join(pid),
    });
    return { ...outcome, ...(await cgroup.outcome()) };
  } finally {
    await Promise.resolve(cgroup[Symbol.asyncDispose]()).catch((err: unknown) => {
      log.warn({ err: String(err), cgroup: cgroup.dirs }, "shell_exec: a call's cgroup could not be removed");
    });
  }
}

/** Without a cgroup, processes × memory_mb is the only bound on a call, so that product must stay within memory_total_mb. */
export function rlimitProcesses(config: ShellConfig): number {
  return Math.max(1, Math.min(config.maxProcesses, Math.floor(config.memoryTotalBytes / config.memoryBytes)));
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
      args: ["-c", limitsPrologue(config, undefined), "kova-shell", ...argv],
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

function describeTool(config: ShellConfig, memory: MemoryBound | undefined): string {
  const mib = (b: number) => `${Math.round(b / (1024 * 1024))} MiB`;
  const work =
    config.workRoot === undefined
      ? `a fresh, empty ${SANDBOX_WORK_DIR} for each call (${mib(config.workBytes)}; nothing persists)`
      : `${SANDBOX_WORK_DIR}, your own directory that persists between calls`;
  const where =
    config.sandbox === "bwrap"
      ? `Runs in an isolated Linux sandbox: no network, read-only system files (/usr), writable ${work} and /tmp (${mib(config.tmpBytes)}).`
      : `Runs on the host with working directory ${work}.`;
  // Before the probe has settled, the fallback's numbers: never more than what will hold.
  const bound = memory ?? (config.sandbox === "none" ? { kind: "per-process" } : { kind: "rlimit", processes: rlimitProcesses(config), reason: "" });
  const memoryLimits =
    bound.kind === "cgroup"
      ? `${mib(config.memoryTotalBytes)} of memory for all processes together (${mib(config.memoryBytes)} per process), ${config.maxProcesses} processes and threads`
      : bound.kind === "rlimit"
        ? `${mib(config.memoryBytes)} of memory per process, ${bound.processes} processes and threads`
        : `${mib(config.memoryBytes)} of memory per process`;
  return [
    `Runs a command and returns its exit code, stdout and stderr. ${where}`,
    `Limits: ${config.timeoutMs} ms wall time, ${config.maxOutputBytes} bytes of output (stdout + stderr), ${memoryLimits}, ${mib(config.maxFileBytes)} per file.`,
    "Past the time, output or total memory limit every process of the call is killed and timedOut, truncated or memoryExceeded says so; past a per-process limit the allocation or the new process fails inside the command.",
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
