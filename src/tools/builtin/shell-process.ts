import { spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { KovaError } from "../../core/index.js";
import { ShellAbortedError, ShellErrorCode, ShellSpawnFailedError } from "./shell-errors.js";

/** One child process to run with a wall-time limit and a cap on its output. */
export interface CapturedRun {
  file: string;
  args: readonly string[];
  env: Record<string, string>;
  cwd?: string;
  uid?: number;
  gid?: number;
  /** Written to the child's stdin, which is then closed; without it stdin is /dev/null. */
  stdin?: string;
  timeoutMs: number;
  /** Cap on stdout and stderr together; past it the child is killed and `truncated` set. */
  maxOutputBytes: number;
  signal?: AbortSignal;
  /**
   * For bwrap started with `--info-fd 3 --block-fd 4`: called with the sandbox's PID 1 (as
   * the host sees it) while that process waits before exec'ing the command, so it can be
   * moved into a cgroup before anything of the command runs; the command starts when the
   * gate resolves. A gate that throws kills the child and fails the run.
   */
  gate?: (sandboxPid: number) => Promise<void>;
}

export interface CapturedOutcome {
  /** Null when the child was ended by a signal. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

/**
 * After the child exits, how long its pipes may stay open. Something outside our reach
 * (only possible with sandbox = "none": a daemonised grandchild) can hold them forever;
 * past this the result is returned without the rest of its output.
 */
const DRAIN_AFTER_EXIT_MS = 500;

/**
 * Runs a child in its own process group and captures its output. At the time limit, at
 * the output cap and on abort the whole group gets SIGKILL (a bwrap sandbox takes its
 * PID namespace with it). Output is decoded as UTF-8: invalid bytes become U+FFFD, and a
 * character cut at the cap is dropped whole.
 * @throws ShellSpawnFailedError when the child cannot be started (with the errno in `cause`)
 * @throws ShellAbortedError when `signal` fires before the child ends
 */
export async function runCaptured(run: CapturedRun): Promise<CapturedOutcome> {
  if (run.signal?.aborted) throw new ShellAbortedError(0);
  const started = performance.now();
  const child = spawn(run.file, run.args, {
    env: run.env,
    cwd: run.cwd,
    uid: run.uid,
    gid: run.gid,
    detached: true,
    stdio: [run.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe", ...(run.gate ? (["pipe", "pipe"] as const) : [])],
  });
  const out = new Capture();
  const err = new Capture();
  let taken = 0;
  let truncated = false;
  let timedOut = false;
  let aborted = false;
  const killGroup = () => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      child.kill("SIGKILL");
    }
  };
  const take = (capture: Capture) => (chunk: Buffer) => {
    if (truncated) return;
    const room = run.maxOutputBytes - taken;
    if (chunk.length <= room) {
      capture.add(chunk, false);
      taken += chunk.length;
      return;
    }
    capture.add(chunk.subarray(0, room), true);
    taken = run.maxOutputBytes;
    truncated = true;
    killGroup();
  };
  child.stdout!.on("data", take(out));
  child.stderr!.on("data", take(err));
  if (child.stdin) {
    // A command that does not read its stdin closes the pipe: EPIPE is its choice, not our failure.
    child.stdin.on("error", () => {});
    child.stdin.end(run.stdin);
  }
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup();
  }, run.timeoutMs);
  const onAbort = () => {
    aborted = true;
    killGroup();
  };
  run.signal?.addEventListener("abort", onAbort, { once: true });
  let gateFailure: unknown;
  if (run.gate) {
    const gate = run.gate;
    openGate(child.stdio[3] as Readable, child.stdio[4] as Writable, gate).catch((err: unknown) => {
      gateFailure = err;
      killGroup();
    });
  }
  let drain: NodeJS.Timeout | undefined;
  try {
    const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once("error", (e: NodeJS.ErrnoException) => {
        reject(new ShellSpawnFailedError(`${run.file}: ${e.code ?? e.message}`, { cause: e }));
      });
      child.once("exit", () => {
        drain = setTimeout(() => {
          child.stdout!.destroy();
          child.stderr!.destroy();
        }, DRAIN_AFTER_EXIT_MS);
      });
      child.once("close", (code, sig) => resolve([code, sig]));
    });
    const durationMs = Math.round(performance.now() - started);
    if (aborted) throw new ShellAbortedError(durationMs);
    if (gateFailure !== undefined) {
      throw new ShellSpawnFailedError(`the sandbox could not be placed in its cgroup: ${errText(gateFailure)}`, { cause: gateFailure });
    }
    // Each invalid byte decodes to a three-byte U+FFFD: trim so the cap also holds for the text.
    const stdout = fitUtf8(out.text(), run.maxOutputBytes);
    const stderr = fitUtf8(err.text(), run.maxOutputBytes - Buffer.byteLength(stdout));
    truncated ||= stdout.length < out.text().length || stderr.length < err.text().length;
    return { exitCode, signal, stdout, stderr, durationMs, timedOut, truncated };
  } finally {
    clearTimeout(timer);
    clearTimeout(drain);
    run.signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * Reads bwrap's info (JSON with "child-pid", written once, then the fd is closed), runs the
 * gate with that pid, then writes to the block fd, which lets the sandbox exec the command.
 * @throws what the gate throws, or a SyntaxError for info that is not JSON
 */
async function openGate(info: Readable, block: Writable, gate: (pid: number) => Promise<void>): Promise<void> {
  // A sandbox that dies first closes the block pipe: EPIPE then is not a second failure.
  block.on("error", () => {});
  let text = "";
  for await (const chunk of info) text += String(chunk);
  // Nothing written: bwrap failed before it started the sandbox, and its exit status and
  // stderr say why; nothing of the command can run.
  if (text === "") return;
  const pid = (JSON.parse(text) as { "child-pid"?: unknown })["child-pid"];
  if (typeof pid !== "number")
    throw new KovaError(ShellErrorCode.SHELL_SANDBOX_UNAVAILABLE, `bwrap reported no child pid (${JSON.stringify(text.slice(0, 200))})`);
  await gate(pid);
  block.end("go");
}

function errText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e?.code ? `${e.code} ${e.message}` : err instanceof Error ? err.message : String(err);
}

class Capture {
  private readonly chunks: Buffer[] = [];
  private cut = false;
  private decoded: string | undefined;

  add(chunk: Buffer, cut: boolean): void {
    this.chunks.push(chunk);
    this.cut ||= cut;
  }

  text(): string {
    if (this.decoded === undefined) {
      const all = Buffer.concat(this.chunks);
      this.decoded = (this.cut ? all.subarray(0, completeUtf8Length(all)) : all).toString("utf8");
    }
    return this.decoded;
  }
}

/** `text` cut to at most `maxBytes` of UTF-8, at a character boundary. */
export function fitUtf8(text: string, maxBytes: number): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= maxBytes) return text;
  const head = buf.subarray(0, maxBytes);
  return head.subarray(0, completeUtf8Length(head)).toString("utf8");
}

/** The length of `buf` without a multi-byte UTF-8 character that the cap cut in two. */
export function completeUtf8Length(buf: Uint8Array): number {
  let i = buf.length - 1;
  while (i >= 0 && buf.length - i < 4 && (buf[i]! & 0xc0) === 0x80) i--;
  if (i < 0) return buf.length;
  const lead = buf[i]!;
  const needed = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return buf.length - i < needed ? i : buf.length;
}
