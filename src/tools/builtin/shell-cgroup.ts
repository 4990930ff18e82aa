import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { access, mkdir, readdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";

/**
 * One cgroup v2 per shell_exec call, so that a call's processes together stay under
 * `memory_total_mb` and `max_processes` (rlimits bound each process alone: 64 processes of
 * 1 GiB each were 64 GiB for one call). Layout: a parent directory the node owns
 * (`/sys/fs/cgroup/kova-shell` by default) with the memory and pids controllers enabled for
 * its children, and one `call-<node pid>-<random>` child per call with `memory.max`,
 * `memory.swap.max = 0`, `pids.max` and `memory.oom.group = 1` (at the limit the kernel
 * kills the whole call, not one process picked from it).
 *
 * Where this cannot be set up (a cgroup v1 or hybrid host, a read-only /sys/fs/cgroup in a
 * container, a parent that holds processes itself, a non-root node without a delegated
 * subtree) the parent is reported unusable with the reason, and shell.ts tries the cgroup v1
 * backend (shell-cgroup-v1.ts), then falls back to the rlimit product
 * (docs/tools-shell-db.md). The file operations, the call cgroup's shape and its removal
 * are shared with the v1 backend.
 */

/** The cgroup v2 mount every distribution with a unified hierarchy uses. */
export const CGROUP_ROOT = "/sys/fs/cgroup";
export const DEFAULT_CGROUP_PARENT = join(CGROUP_ROOT, "kova-shell");

const CONTROLLERS = ["memory", "pids"];

/**
 * The file operations a cgroup backend makes, so that unit tests can check what is written
 * where without a writable cgroup hierarchy (test/unit/tools-shell-cgroup.test.ts).
 * `writeFile` opens write-only and never creates a file: cgroupfs refuses creation with
 * EACCES, which would hide that an optional control file (memory.swap.max,
 * memory.memsw.limit_in_bytes) is absent (opening without O_CREAT says ENOENT instead), and
 * refuses a read-write open of a write-only file such as cgroup.kill.
 */
export interface CgroupFs {
  readFile(path: string): Promise<string>;
  writeFile(path: string, data: string): Promise<void>;
  mkdir(path: string): Promise<void>;
  rmdir(path: string): Promise<void>;
  /** Resolves when `path` exists (and, with `writable`, may be written); rejects with the errno otherwise. */
  access(path: string, writable?: boolean): Promise<void>;
  /** The names in a directory. */
  readdir(path: string): Promise<string[]>;
}

export const nodeCgroupFs: CgroupFs = {
  readFile: (path) => readFile(path, "utf8"),
  writeFile: (path, data) => writeFile(path, data, { flag: constants.O_WRONLY }),
  mkdir: async (path) => {
    await mkdir(path);
  },
  rmdir: (path) => rmdir(path),
  access: (path, writable) => access(path, writable ? constants.W_OK : constants.F_OK),
  readdir: (path) => readdir(path),
};

export type CgroupParent = { ok: true; dir: string } | { ok: false; reason: string };

/**
 * Makes `dir` ready to hold call cgroups: creates it under a cgroup v2 directory, makes the
 * memory and pids controllers available to it (enabling them in its parent if needed) and
 * enables them for its children. Never rejects: a failure is the reason.
 */
export async function prepareCgroupParent(dir: string, fs: CgroupFs = nodeCgroupFs): Promise<CgroupParent> {
  const above = dirname(dir);
  if (!(await exists(fs, join(dir, "cgroup.controllers"))) && !(await exists(fs, join(above, "cgroup.controllers")))) {
    return { ok: false, reason: `${above} is not a cgroup v2 directory (a cgroup v1 or hybrid host, or no cgroup2 mount there)` };
  }
  let created = false;
  try {
    await fs.mkdir(dir);
    created = true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") return { ok: false, reason: `cannot create ${dir}: ${errnoText(err)}` };
  }
  const status = await enableControllers(fs, dir, above);
  // A directory made here for nothing would stay in the host's cgroup tree.
  if (!status.ok && created) await fs.rmdir(dir).catch(() => {});
  return status;
}

async function enableControllers(fs: CgroupFs, dir: string, above: string): Promise<CgroupParent> {
  try {
    if (!hasAll(await fs.readFile(join(dir, "cgroup.controllers")))) {
      await fs.writeFile(join(above, "cgroup.subtree_control"), CONTROLLERS.map((c) => `+${c}`).join(" "));
    }
  } catch (err) {
    return {
      ok: false,
      reason: `the memory and pids controllers are not available in ${dir} and cannot be enabled in ${above}/cgroup.subtree_control (${errnoText(err)})`,
    };
  }
  try {
    if (!hasAll(await fs.readFile(join(dir, "cgroup.subtree_control")))) {
      await fs.writeFile(join(dir, "cgroup.subtree_control"), CONTROLLERS.map((c) => `+${c}`).join(" "));
    }
  } catch (err) {
    // EBUSY: a cgroup with processes of its own cannot pass controllers to children.
    return { ok: false, reason: `cannot enable memory and pids for the children of ${dir} (${errnoText(err)}; it must hold no processes itself)` };
  }
  return { ok: true, dir };
}

/** What a call's cgroup saw, read after the call ended. */
export interface CgroupOutcome {
  /** The call reached its memory limit and all its processes were killed for it. */
  memoryExceeded: boolean;
}

/** What a call cgroup may be limited to; a limit left out is not written. */
export interface CallLimits {
  memoryBytes?: number;
  pids?: number;
}

/** One call's cgroup: processes join it, then it is read and removed. */
export interface CallCgroup extends AsyncDisposable {
  /** Every directory of the call: one with cgroup v2, one per hierarchy (memory, pids) with v1. */
  readonly dirs: readonly string[];
  /** Moves a process (and what it starts from then on) into the cgroup. */
  join(pid: number): Promise<void>;
  outcome(): Promise<CgroupOutcome>;
}

/** Names of v2 call cgroups: `call-<node pid>-<random>`. */
export const CALL_CGROUP_V2_PREFIX = "call-";

/**
 * Creates `<parent>/call-<node pid>-<random>` with the limits given (a limit left out is not written,
 * so the mechanism also works where a controller is missing, as in tests). Disposing kills
 * whatever is still inside and removes the directory.
 * @throws the filesystem error when the directory or a limit cannot be written
 */
export async function createCallCgroup(parent: string, limits: CallLimits = {}, fs: CgroupFs = nodeCgroupFs): Promise<CallCgroup> {
  // The node's pid in the name: sweepDeadCallCgroups tells a dead node's leftovers from a live node's calls by it.
  const dir = join(parent, `${CALL_CGROUP_V2_PREFIX}${process.pid}-${randomBytes(6).toString("hex")}`);
  await fs.mkdir(dir);
  const cgroup: CallCgroup = {
    dirs: [dir],
    join: (pid) => fs.writeFile(join(dir, "cgroup.procs"), String(pid)),
    outcome: async () => {
      const events = await fs.readFile(join(dir, "memory.events")).catch(() => "");
      return { memoryExceeded: counter(events, "oom_kill") > 0 || counter(events, "oom_group_kill") > 0 };
    },
    [Symbol.asyncDispose]: () => removeCgroups([dir], fs),
  };
  try {
    if (limits.memoryBytes !== undefined) {
      await fs.writeFile(join(dir, "memory.max"), String(limits.memoryBytes));
      // Without swap accounting the file is absent; with swap, memory.max alone lets a call push the rest out to swap.
      await fs.writeFile(join(dir, "memory.swap.max"), "0").catch(ignoreMissing);
      await fs.writeFile(join(dir, "memory.oom.group"), "1");
    }
    if (limits.pids !== undefined) await fs.writeFile(join(dir, "pids.max"), String(limits.pids));
  } catch (err) {
    await removeCgroups([dir], fs);
    throw err;
  }
  return cgroup;
}

/** How long a call cgroup's processes get to disappear after they were killed before rmdir gives up. */
const REMOVE_WITHIN_MS = 2000;

/**
 * Kills what is left in each cgroup (cgroup.kill on v2, Linux 5.14+; else each listed
 * process, again while rmdir says EBUSY, since a process may fork between the listing and
 * the kill) and removes the directories once the kernel has reaped them.
 * @throws the last rmdir error when a cgroup does not empty in time
 */
export async function removeCgroups(dirs: readonly string[], fs: CgroupFs = nodeCgroupFs): Promise<void> {
  const deadline = performance.now() + REMOVE_WITHIN_MS;
  for (const dir of dirs) {
    const killedAll = await fs.writeFile(join(dir, "cgroup.kill"), "1").then(
      () => true,
      () => false,
    );
    for (;;) {
      if (!killedAll) await killListed(dir, fs);
      try {
        await fs.rmdir(dir);
        break;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ENOENT") break;
        // EBUSY until the killed processes are reaped.
        if (code !== "EBUSY" || performance.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  }
}

/**
 * Removes the call cgroups under `parent` (named `<prefix><node pid>-<random>`) whose node
 * process is gone: a node killed mid-call leaves its call's directories behind (its
 * sandbox dies with it, `--die-with-parent`), and a cgroup directory is never removed by the
 * kernel. Directories of this process and of any live pid are left alone (a live pid may be
 * another node's on the same host, or a reused pid: then the leftover stays, which is safe).
 * What a leftover still holds is killed first (removeCgroups).
 * @returns the directories removed, and the ones that could not be, with the reason
 */
export async function sweepDeadCallCgroups(
  parent: string,
  prefix: string,
  fs: CgroupFs = nodeCgroupFs,
  alive: (pid: number) => boolean = processAlive,
): Promise<{ removed: string[]; failed: Array<{ dir: string; reason: string }> }> {
  const removed: string[] = [];
  const failed: Array<{ dir: string; reason: string }> = [];
  const names = await fs.readdir(parent).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const pid = /^(\d+)-[0-9a-f]+$/.exec(name.slice(prefix.length))?.[1];
    if (pid === undefined || Number(pid) === process.pid || alive(Number(pid))) continue;
    const dir = join(parent, name);
    try {
      await removeCgroups([dir], fs);
      removed.push(dir);
    } catch (err) {
      failed.push({ dir, reason: errnoText(err) });
    }
  }
  return { removed, failed };
}

/** Whether a process with this pid exists (EPERM: it does, owned by someone else). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** SIGKILL to every process listed in `<dir>/cgroup.procs`; resolves with how many were listed. */
export async function killListed(dir: string, fs: CgroupFs = nodeCgroupFs): Promise<number> {
  const procs = (await fs.readFile(join(dir, "cgroup.procs")).catch(() => "")).split("\n").filter(Boolean);
  for (const pid of procs) {
    try {
      process.kill(Number(pid), "SIGKILL");
    } catch {
      // already gone
    }
  }
  return procs.length;
}

function hasAll(list: string): boolean {
  const present = new Set(list.trim().split(/\s+/));
  return CONTROLLERS.every((c) => present.has(c));
}

/** The number after `name` in a cgroup key-value file (memory.events, memory.oom_control); 0 when absent. */
export function counter(events: string, name: string): number {
  const m = new RegExp(`^${name} (\\d+)$`, "m").exec(events);
  return m ? Number(m[1]) : 0;
}

async function exists(fs: CgroupFs, path: string): Promise<boolean> {
  return fs.access(path).then(
    () => true,
    () => false,
  );
}

/** For an optional control file: absent is fine, any other failure is not. */
export function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== "ENOENT") throw err;
}

export function errnoText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e?.code ?? String(err);
}
