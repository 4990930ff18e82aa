import { lstatSync, readlinkSync } from "node:fs";
import { isWithin, realPath } from "./host-path.js";
import type { ShellConfig } from "./shell-config.js";

/**
 * What a bwrap sandbox sees, and the limits inside it. Decided here, in one place:
 *
 * - Namespaces: `--unshare-all` plus a user namespace (no network but its own loopback,
 *   own PID/IPC/UTS/cgroup namespaces); `--disable-userns` so the command cannot nest
 *   another one (less kernel surface); `--new-session` (no TIOCSTI into our terminal);
 *   `--die-with-parent` so a dead node leaves no sandbox behind; `--as-pid-1`: the command is PID 1, and when it exits
 *   the kernel kills every process left in the namespace before bwrap sees the exit, so
 *   background jobs, `setsid`, `nohup` and double forks cannot outlive a call.
 * - Files: an allow-list, not `--ro-bind / /` with holes, so a node data dir, a WAL, a
 *   mounted secret or another tenant's directory is invisible wherever it lives. Visible:
 *   /usr (read-only; /bin, /lib, /sbin as on the host), the loader cache and Debian
 *   alternatives from /etc, /etc/localtime, `ro_binds`, a fresh /proc of the sandbox's
 *   own PID namespace, a minimal /dev (null, zero, full, random, urandom, tty, pts), and
 *   three writable places: /work, /tmp and /dev/shm, all size-capped tmpfs except a
 *   per-agent /work under `work_root`. Everything else, including the sandbox's root,
 *   /etc and /dev, is remounted read-only, so no write lands in unbounded memory.
 *   Not visible: /root, /home, /var, /run (no unix sockets: no PostgreSQL or Docker
 *   socket), /srv, /opt, /mnt, /media, /boot, /sys, the rest of /etc (passwd, shadow,
 *   hosts, ssl keys).
 * - Identity: when the node runs as root the sandbox runs as uid/gid 65534 (nobody), so
 *   even a file that is wrongly bound stays unreadable if it is root's and private; as
 *   another user, the sandbox has that user's uid and only the mounts above protect.
 * - Environment: exactly PATH, HOME=/work, TMPDIR=/tmp, LANG=C.UTF-8, USER=sandbox; no
 *   variable of the node (API keys) passes.
 * - Limits, set by bash inside the namespaces just before exec: RLIMIT_AS (`memory_mb`,
 *   per process), RLIMIT_NPROC (counted per user namespace since Linux 5.14, so it counts
 *   only this sandbox's processes and threads: measured, three sandboxes of uid 65534 with
 *   a limit of 8 each ran 8 tasks each), RLIMIT_FSIZE (`max_file_mb`), no core files. The
 *   same bash closes every inherited descriptor above 2, because a descriptor the node
 *   inherited from its own parent (not CLOEXEC) would otherwise reach the command.
 * - A call's total: with a cgroup (v2, shell-cgroup.ts; v1, shell-cgroup-v1.ts) the sandbox's PID 1 joins
 *   the call's cgroup while bwrap holds it before exec (`--info-fd 3 --block-fd 4`, see
 *   shell-process.ts), so memory.max and pids.max bound everything the command starts.
 *   Without one, RLIMIT_NPROC is lowered so that processes × memory_mb ≤ memory_total_mb
 *   (shell.ts decides the number).
 * - Not done: no seccomp filter (the kernel's user-namespace surface stays reachable).
 */
export const SANDBOX_WORK_DIR = "/work";

export const SANDBOX_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
  HOME: SANDBOX_WORK_DIR,
  TMPDIR: "/tmp",
  LANG: "C.UTF-8",
  USER: "sandbox",
});

/** The unprivileged identity a root node drops to before starting bwrap. */
export const NOBODY = 65534;

/** Top-level names that on merged-/usr systems are symlinks into /usr, and directories elsewhere. */
const SYSTEM_LINKS = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];
const ETC_FILES = ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime"];

/** Host paths every sandbox shows read-only at the same place (sandboxArgs binds them, or links them into /usr). */
const SYSTEM_PATHS = ["/usr", ...SYSTEM_LINKS.map((name) => `/${name}`), ...ETC_FILES];

/**
 * Whether host file `path` is found at the same path inside a sandbox that shows the system
 * paths plus `binds` (bound after the tmpfs mounts, as an MCP server's ro_binds and rw_binds
 * are). Both the path as written and where it really leads must lie within what is shown: a
 * symlink /usr/local/bin/node -> /opt/node/bin/node dangles inside. /tmp, /dev/shm and /work
 * are fresh tmpfs in the sandbox, so nothing the host keeps there is visible unless bound.
 */
export function visibleInSandbox(path: string, binds: readonly string[]): boolean {
  const shown = [...SYSTEM_PATHS, ...binds];
  if (!shown.some((dir) => isWithin(path, dir))) return false;
  const real = realPath(path);
  return shown.some((dir) => isWithin(real, realPath(dir)));
}

export type SandboxWork = { kind: "tmpfs"; bytes: number } | { kind: "bind"; hostDir: string };

/**
 * The bash prologue run as the command's parent inside the sandbox: set the limits, close
 * inherited descriptors, then exec the command (`"$@"`). Exit status 125 means the
 * limits could not be set.
 */
export function limitsPrologue(config: ShellConfig, nproc: number | undefined): string {
  const kib = (bytes: number) => Math.ceil(bytes / 1024);
  const limits = [`-v ${kib(config.memoryBytes)}`, `-f ${kib(config.maxFileBytes)}`, "-c 0"];
  if (nproc !== undefined) limits.push(`-u ${nproc}`);
  return execPrologue(`ulimit -HS ${limits.join(" ")} || exit 125`);
}

/** `first` (e.g. the limits), then close every inherited descriptor above 2, then exec `"$@"`. */
export function execPrologue(first: string): string {
  return [first, 'for fd in /proc/self/fd/*; do fd=${fd##*/}; case $fd in 0|1|2) ;; *) eval "exec $fd>&-" 2>/dev/null;; esac; done', 'exec "$@"'].join("; ");
}

/** Per call: the RLIMIT_NPROC to set, and whether bwrap waits on fd 4 after reporting its child on fd 3 (cgroup join). */
export interface SandboxRun {
  nproc: number;
  gated: boolean;
}

/**
 * The full bwrap command line for one call: sandbox options, then bash with the limits
 * prologue, then `argv`. `cwd` is absolute inside the sandbox (under /work).
 */
export function bwrapArgs(config: ShellConfig, work: SandboxWork, cwd: string, argv: readonly string[], run: SandboxRun): string[] {
  return [
    ...sandboxArgs({ roBinds: config.roBinds, tmpBytes: config.tmpBytes, work, cwd, gated: run.gated }),
    "--",
    "/bin/bash",
    "-c",
    limitsPrologue(config, run.nproc),
    "kova-sandbox",
    ...argv,
  ];
}

/** What one sandbox shows and where it starts (see the top of this file). */
export interface SandboxLayout {
  /** Host paths bound read-only at the same place, before /proc (shell_exec's `ro_binds`). */
  roBinds: readonly string[];
  /** Host paths bound at the same place after /work is set up, so they may lie below /work too. */
  lateBinds?: ReadonlyArray<{ path: string; writable: boolean }>;
  /** Size of each of the tmpfs /tmp and /dev/shm. */
  tmpBytes: number;
  work: SandboxWork;
  /** Absolute inside the sandbox. */
  cwd: string;
  /** bwrap reports its child on fd 3 and waits on fd 4 (the cgroup join of shell_exec). */
  gated?: boolean;
}

/** bwrap's options for a sandbox, up to (not including) the `--` before the command. */
export function sandboxArgs(layout: SandboxLayout): string[] {
  const { roBinds, tmpBytes, work, cwd } = layout;
  const args = [
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    // The command is the namespace's PID 1: when it exits, the kernel kills what is left
    // in the namespace before its parent (bwrap) learns of the exit, so the call ends
    // with nothing alive. With bwrap's own reaper as PID 1, bwrap reports the command's
    // exit at once and the reaper dies later (by --die-with-parent), which left a window
    // where a backgrounded process outlived the call.
    "--as-pid-1",
    "--new-session",
    "--hostname",
    "sandbox",
    "--ro-bind",
    "/usr",
    "/usr",
  ];
  for (const name of SYSTEM_LINKS) {
    const host = `/${name}`;
    const kind = pathKind(host);
    if (kind === "symlink") args.push("--symlink", readlinkSync(host), host);
    else if (kind === "dir") args.push("--ro-bind", host, host);
  }
  for (const file of ETC_FILES) args.push("--ro-bind-try", file, file);
  for (const path of roBinds) args.push("--ro-bind", path, path);
  args.push("--proc", "/proc", "--dev", "/dev");
  args.push("--size", String(tmpBytes), "--tmpfs", "/dev/shm");
  args.push("--size", String(tmpBytes), "--tmpfs", "/tmp");
  if (work.kind === "tmpfs") args.push("--size", String(work.bytes), "--tmpfs", SANDBOX_WORK_DIR);
  else args.push("--bind", work.hostDir, SANDBOX_WORK_DIR);
  for (const bind of layout.lateBinds ?? []) args.push(bind.writable ? "--bind" : "--ro-bind", bind.path, bind.path);
  args.push("--remount-ro", "/dev", "--remount-ro", "/", "--chdir", cwd);
  if (layout.gated) args.push("--info-fd", "3", "--block-fd", "4");
  return args;
}

function pathKind(path: string): "symlink" | "dir" | undefined {
  try {
    const st = lstatSync(path);
    if (st.isSymbolicLink()) return "symlink";
    return st.isDirectory() ? "dir" : undefined;
  } catch {
    return undefined;
  }
}
