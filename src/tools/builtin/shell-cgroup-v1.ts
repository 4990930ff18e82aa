import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { type CallCgroup, type CallLimits, type CgroupFs, counter, errnoText, ignoreMissing, killListed, nodeCgroupFs, removeCgroups } from "./shell-cgroup.js";

/**
 * The cgroup v1 backend of a call's total bound, for hosts whose memory and pids controllers
 * are on cgroup v1 hierarchies (Debian hosts with a hybrid layout, this project's test and
 * CI machines), where shell-cgroup.ts's v2 parent cannot exist. Per call: a child of the
 * node's own memory cgroup and one of its own pids cgroup (as /proc/self/cgroup names them),
 * both `kova-shell-<node pid>-<random>`, with memory.limit_in_bytes and, where swap is
 * accounted, memory.memsw.limit_in_bytes (so swap cannot take what memory may not), and
 * pids.max. The sandbox's PID 1 joins both before the command starts (the same gate as v2).
 *
 * cgroup v1 has no memory.oom.group: at the limit the kernel's OOM killer kills one
 * process and the rest of the call carries on. So the call cgroup sets
 * `memory.oom_control = 1` (OOM killer off): at the limit each process of the call that
 * needs another page waits in the kernel instead (seen for an allocation and for a write to
 * a tmpfs alike), `under_oom` turns 1, and a watcher kills every process of the call;
 * nothing of the command runs on past the limit. The kernel's
 * signal for this is an eventfd registered through cgroup.event_control, which Node cannot
 * create, so the watcher reads memory.oom_control every OOM_POLL_MS while the call runs.
 * memory.failcnt is not the signal: it also counts limit hits that page-cache reclaim
 * resolved (a call that reads more files than its limit), and on kernel 6.18 it stayed 0 for
 * a call held at its limit.
 */

/** Names of v1 call cgroups: `kova-shell-<node pid>-<random>`. */
export const CALL_CGROUP_V1_PREFIX = "kova-shell-";

/** The directories under which a node makes its v1 call cgroups: its own memory and pids cgroups. */
export interface CgroupV1Parents {
  memory: string;
  pids: string;
}

export type CgroupV1Found = ({ ok: true } & CgroupV1Parents) | { ok: false; reason: string };

/** How often a running call's memory.oom_control is read; a call held at its limit waits at most this long for its kill. */
const OOM_POLL_MS = 50;

const CONTROLLERS = ["memory", "pids"] as const;

/**
 * Where this process's memory and pids cgroups are, from the text of /proc/self/cgroup
 * (`<id>:<controllers>:<path>`) and /proc/self/mountinfo (each cgroup v1 hierarchy's mount
 * point and the part of the hierarchy it shows). Pure, for tests.
 */
export function ownCgroupV1Dirs(procSelfCgroup: string, mountinfo: string): CgroupV1Found {
  const mounts = cgroupV1Mounts(mountinfo);
  const dirs: Partial<CgroupV1Parents> = {};
  for (const controller of CONTROLLERS) {
    const line = procSelfCgroup.split("\n").find((l) => (l.split(":")[1] ?? "").split(",").includes(controller));
    if (line === undefined)
      return { ok: false, reason: `this process is in no cgroup v1 ${controller} hierarchy (/proc/self/cgroup has no ${controller} line)` };
    const path = line.split(":").slice(2).join(":");
    const mount = mounts.find((m) => m.controllers.includes(controller));
    if (mount === undefined) return { ok: false, reason: `no cgroup v1 hierarchy with the ${controller} controller is mounted (/proc/self/mountinfo)` };
    const rel = relativeTo(mount.root, path);
    if (rel === undefined) {
      return { ok: false, reason: `this process's ${controller} cgroup ${path} lies outside the part mounted at ${mount.point} (${mount.root})` };
    }
    dirs[controller] = rel === "" ? mount.point : join(mount.point, rel);
  }
  return { ok: true, memory: dirs.memory!, pids: dirs.pids! };
}

/**
 * Finds this process's memory and pids cgroups and checks that call cgroups can be made
 * under them: both must be writable, and the memory one must have memory.oom_control (the
 * kill at the limit depends on it). Never rejects: a failure is the reason.
 */
export async function findCgroupV1Parents(fs: CgroupFs = nodeCgroupFs): Promise<CgroupV1Found> {
  let found: CgroupV1Found;
  try {
    found = ownCgroupV1Dirs(await fs.readFile("/proc/self/cgroup"), await fs.readFile("/proc/self/mountinfo"));
  } catch (err) {
    return { ok: false, reason: `cannot read /proc/self/cgroup or /proc/self/mountinfo (${errnoText(err)})` };
  }
  if (!found.ok) return found;
  for (const dir of [found.memory, found.pids]) {
    const denied = await fs.access(dir, true).then(
      () => undefined,
      (err: unknown) => errnoText(err),
    );
    if (denied !== undefined) return { ok: false, reason: `cannot create cgroups in ${dir} (${denied}): the node must be root, or own that directory` };
  }
  const oomControl = await fs.access(join(found.memory, "memory.oom_control")).then(
    () => true,
    () => false,
  );
  if (!oomControl) return { ok: false, reason: `${found.memory} has no memory.oom_control: not a cgroup v1 memory cgroup` };
  return found;
}

/**
 * Creates the call's memory and pids cgroups with the limits given (a limit left out is not
 * written). While a process of the call runs, a watcher kills the whole call once it is held
 * at its memory limit. Disposing stops the watcher, kills what is left and removes both.
 * @throws the filesystem error when a directory or a limit cannot be written
 */
export async function createCallCgroupV1(parents: CgroupV1Parents, limits: CallLimits = {}, fs: CgroupFs = nodeCgroupFs): Promise<CallCgroup> {
  // The node's pid in the name: sweepDeadCallCgroups (and an operator) tells a dead node's leftovers from a live node's calls by it.
  const name = `${CALL_CGROUP_V1_PREFIX}${process.pid}-${randomBytes(6).toString("hex")}`;
  const memory = join(parents.memory, name);
  const pids = join(parents.pids, name);
  const dirs: string[] = [];
  let exceeded = false;
  let watching: { stop(): Promise<void> } | undefined;
  const oomState = async () => {
    const text = await fs.readFile(join(memory, "memory.oom_control"));
    return counter(text, "under_oom") > 0 || counter(text, "oom_kill") > 0;
  };
  const cgroup: CallCgroup = {
    dirs,
    join: async (pid) => {
      await fs.writeFile(join(memory, "cgroup.procs"), String(pid));
      await fs.writeFile(join(pids, "cgroup.procs"), String(pid));
      watching ??= watch(async () => {
        if (!(await oomState())) return;
        exceeded = true;
        await killListed(memory, fs);
      });
    },
    outcome: async () => {
      exceeded ||= await oomState().catch(() => false);
      return { memoryExceeded: exceeded };
    },
    [Symbol.asyncDispose]: async () => {
      await watching?.stop();
      await removeCgroups(dirs, fs);
    },
  };
  try {
    for (const dir of [memory, pids]) {
      await fs.mkdir(dir);
      dirs.push(dir);
    }
    if (limits.memoryBytes !== undefined) {
      // memsw (memory + swap) may not be below memory, so memory first; absent without swap accounting.
      await fs.writeFile(join(memory, "memory.limit_in_bytes"), String(limits.memoryBytes));
      await fs.writeFile(join(memory, "memory.memsw.limit_in_bytes"), String(limits.memoryBytes)).catch(ignoreMissing);
      await fs.writeFile(join(memory, "memory.oom_control"), "1");
    }
    if (limits.pids !== undefined) await fs.writeFile(join(pids, "pids.max"), String(limits.pids));
  } catch (err) {
    await removeCgroups(dirs, fs);
    throw err;
  }
  return cgroup;
}

/**
 * Runs `check` every OOM_POLL_MS, one at a time, until stopped or until it throws (the
 * cgroup is gone). Its timer does not keep the process alive.
 */
function watch(check: () => Promise<void>): { stop(): Promise<void> } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  const tick = () => {
    running = check().then(
      () => {
        if (!stopped) timer = setTimeout(tick, OOM_POLL_MS).unref();
      },
      () => {},
    );
  };
  timer = setTimeout(tick, OOM_POLL_MS).unref();
  return {
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}

interface CgroupV1Mount {
  point: string;
  root: string;
  controllers: string[];
}

/** The cgroup v1 hierarchies in /proc/self/mountinfo: `… <root> <mount point> … - cgroup <source> <super options>`. */
function cgroupV1Mounts(mountinfo: string): CgroupV1Mount[] {
  const mounts: CgroupV1Mount[] = [];
  for (const line of mountinfo.split("\n")) {
    const [before, after] = line.split(" - ");
    if (before === undefined || after === undefined) continue;
    const [fstype, , superOptions] = after.split(" ");
    const fields = before.split(" ");
    if (fstype !== "cgroup" || fields.length < 5 || superOptions === undefined) continue;
    mounts.push({ root: unescapeMountPath(fields[3]!), point: unescapeMountPath(fields[4]!), controllers: superOptions.split(",") });
  }
  return mounts;
}

/** mountinfo writes space, tab, newline and backslash in paths as octal escapes (`\040`). */
function unescapeMountPath(path: string): string {
  return path.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

/** `path` relative to `root` ("" when equal), or undefined when it is not under it. */
function relativeTo(root: string, path: string): string | undefined {
  if (root === "/") return path.replace(/^\/+/, "");
  if (path === root) return "";
  return path.startsWith(`${root}/`) ? path.slice(root.length + 1) : undefined;
}
