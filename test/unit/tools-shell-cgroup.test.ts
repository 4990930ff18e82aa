import { spawn } from "node:child_process";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { type CgroupFs, createCallCgroup, prepareCgroupParent, sweepDeadCallCgroups } from "../../src/tools/builtin/shell-cgroup.js";
import { createCallCgroupV1, findCgroupV1Parents, ownCgroupV1Dirs } from "../../src/tools/builtin/shell-cgroup-v1.js";

/**
 * cgroupfs as the backends meet it, in memory: a new cgroup directory comes with its
 * control files, a file that is not there cannot be written (ENOENT), and rmdir is refused
 * (EBUSY) while a process listed in its cgroup.procs is alive. Every write is recorded.
 */
class FakeCgroupFs implements CgroupFs {
  readonly files = new Map<string, string>();
  readonly dirs = new Set<string>();
  readonly writes: Array<[string, string]> = [];

  constructor(private readonly controlFiles: Record<string, string>) {}

  dir(path: string, files: Record<string, string> = this.controlFiles): this {
    this.dirs.add(path);
    for (const [name, text] of Object.entries(files)) this.files.set(join(path, name), text);
    return this;
  }

  async readFile(path: string): Promise<string> {
    const text = this.files.get(path);
    if (text === undefined) throw errno("ENOENT", path);
    return text;
  }

  async writeFile(path: string, data: string): Promise<void> {
    if (!this.files.has(path)) throw errno("ENOENT", path);
    this.writes.push([path, data]);
    this.files.set(path, data);
  }

  async mkdir(path: string): Promise<void> {
    if (this.dirs.has(path)) throw errno("EEXIST", path);
    if (!this.dirs.has(dirname(path))) throw errno("ENOENT", path);
    this.dir(path);
  }

  async rmdir(path: string): Promise<void> {
    if (!this.dirs.has(path)) throw errno("ENOENT", path);
    const procs = (this.files.get(join(path, "cgroup.procs")) ?? "").split("\n").filter(Boolean);
    if (procs.some((pid) => alive(Number(pid)))) throw errno("EBUSY", path);
    this.dirs.delete(path);
    for (const file of [...this.files.keys()]) if (dirname(file) === path) this.files.delete(file);
  }

  async access(path: string): Promise<void> {
    if (!this.dirs.has(path) && !this.files.has(path)) throw errno("ENOENT", path);
  }

  async readdir(path: string): Promise<string[]> {
    if (!this.dirs.has(path)) throw errno("ENOENT", path);
    return [...this.dirs, ...this.files.keys()].filter((p) => dirname(p) === path && p !== path).map((p) => p.slice(path.length + 1));
  }

  /** The writes under `dir`, as [file name, data]. */
  writesIn(dir: string): Array<[string, string]> {
    return this.writes.filter(([p]) => dirname(p) === dir).map(([p, d]) => [p.slice(dir.length + 1), d]);
  }
}

function errno(code: string, path: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: ${path}`), { code });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A process of our own to put in a fake cgroup.procs, so that the kills the backends send land on nothing else. */
function sleeper(): { pid: number; exited: Promise<unknown> } & AsyncDisposable {
  const child = spawn("sleep", ["3600"], { stdio: "ignore" });
  const exited = once(child, "exit");
  return { pid: child.pid!, exited, [Symbol.asyncDispose]: async () => void child.kill("SIGKILL") };
}

const V2_FILES = {
  "cgroup.controllers": "cpu io memory pids",
  "cgroup.subtree_control": "",
  "cgroup.procs": "",
  "cgroup.kill": "",
  "memory.max": "max",
  "memory.oom.group": "0",
  "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
  "pids.max": "max",
};

describe("shell_exec cgroup v2 backend (file writes)", () => {
  it("cgroup v2 - a call cgroup gets memory.max, memory.swap.max 0, memory.oom.group 1 and pids.max, then its procs", async () => {
    const fs = new FakeCgroupFs({ ...V2_FILES, "memory.swap.max": "max" }).dir("/cg", {}).dir("/cg/kova-shell");
    await using child = sleeper();
    const cgroup = await createCallCgroup("/cg/kova-shell", { memoryBytes: 512 * 2 ** 20, pids: 16 }, fs);
    expect(cgroup.dirs).toEqual([expect.stringMatching(new RegExp(`^/cg/kova-shell/call-${process.pid}-[0-9a-f]{12}$`))]);
    const dir = cgroup.dirs[0]!;
    await cgroup.join(child.pid);
    expect(fs.writesIn(dir)).toEqual([
      ["memory.max", String(512 * 2 ** 20)],
      ["memory.swap.max", "0"],
      ["memory.oom.group", "1"],
      ["pids.max", "16"],
      ["cgroup.procs", String(child.pid)],
    ]);
    expect(await cgroup.outcome()).toEqual({ memoryExceeded: false });
    fs.files.set(join(dir, "memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 1\n");
    expect(await cgroup.outcome()).toEqual({ memoryExceeded: true });
    // cgroup.kill is the kernel's to carry out; the fake only records it, so the listed process is still alive for rmdir.
    fs.files.set(join(dir, "cgroup.procs"), "");
    await cgroup[Symbol.asyncDispose]();
    expect(fs.writesIn(dir).at(-1)).toEqual(["cgroup.kill", "1"]);
    expect(fs.dirs.has(dir)).toBe(false);
  });

  it("cgroup - a sweep removes the call cgroups of dead node pids (killing what they still hold) and leaves this node's, live pids' and other directories", async () => {
    const fs = new FakeCgroupFs(V2_FILES).dir("/cg", {}).dir("/cg/kova-shell");
    await using child = sleeper();
    // Pids as the injected check sees them: `live` alive, any other dead. Both are derived from this
    // process's pid so neither can be it (a fixed number could be, on a fresh machine's low pids).
    const dead = process.pid + 1;
    const live = process.pid + 2;
    const isLive = (pid: number) => pid === live;
    for (const name of [
      `call-${dead}-aaaaaaaaaaaa`,
      `call-${dead}-bbbbbbbbbbbb`,
      `call-${process.pid}-cccccccccccc`,
      `call-${live}-dddddddddddd`,
      "call-eeeeeeeeeeee",
      "other",
    ])
      fs.dir(`/cg/kova-shell/${name}`);
    // A leftover that still lists a process: it is killed (cgroup.kill) before the rmdir.
    fs.files.set(`/cg/kova-shell/call-${dead}-bbbbbbbbbbbb/cgroup.procs`, "");
    const swept = await sweepDeadCallCgroups("/cg/kova-shell", "call-", fs, isLive);
    expect(swept).toEqual({ removed: [`/cg/kova-shell/call-${dead}-aaaaaaaaaaaa`, `/cg/kova-shell/call-${dead}-bbbbbbbbbbbb`], failed: [] });
    expect(fs.writesIn(`/cg/kova-shell/call-${dead}-bbbbbbbbbbbb`)).toEqual([["cgroup.kill", "1"]]);
    expect([...fs.dirs].filter((d) => dirname(d) === "/cg/kova-shell").sort()).toEqual(
      [
        `/cg/kova-shell/call-${process.pid}-cccccccccccc`,
        `/cg/kova-shell/call-${live}-dddddddddddd`,
        "/cg/kova-shell/call-eeeeeeeeeeee",
        "/cg/kova-shell/other",
      ].sort(),
    );
    // One that will not empty (a live process the kill cannot reach here) is reported, not thrown.
    fs.dir(`/cg/kova-shell/call-${dead}-ffffffffffff`);
    fs.files.set(`/cg/kova-shell/call-${dead}-ffffffffffff/cgroup.procs`, String(child.pid));
    const stuck = await sweepDeadCallCgroups("/cg/kova-shell", "call-", fs, isLive);
    expect(stuck).toEqual({ removed: [], failed: [{ dir: `/cg/kova-shell/call-${dead}-ffffffffffff`, reason: "EBUSY" }] });
    // A parent that is not there is nothing to sweep.
    expect(await sweepDeadCallCgroups("/cg/none", "call-", fs)).toEqual({ removed: [], failed: [] });
  });

  it("cgroup v2 - without swap accounting (no memory.swap.max) the call cgroup is still made", async () => {
    const fs = new FakeCgroupFs(V2_FILES).dir("/cg", {}).dir("/cg/kova-shell");
    const cgroup = await createCallCgroup("/cg/kova-shell", { memoryBytes: 2 ** 30 }, fs);
    expect(fs.writesIn(cgroup.dirs[0]!).map(([name]) => name)).toEqual(["memory.max", "memory.oom.group"]);
    await cgroup[Symbol.asyncDispose]();
  });

  it("cgroup v2 - a limit that cannot be written removes the half-made call cgroup and fails", async () => {
    const { "pids.max": _, ...noPids } = V2_FILES;
    const fs = new FakeCgroupFs(noPids).dir("/cg", {}).dir("/cg/kova-shell");
    await expect(createCallCgroup("/cg/kova-shell", { pids: 8 }, fs)).rejects.toMatchObject({ code: "ENOENT" });
    expect([...fs.dirs]).toEqual(["/cg", "/cg/kova-shell"]);
  });

  it("cgroup v2 - the parent enables memory and pids above itself and for its children", async () => {
    const fs = new FakeCgroupFs({ ...V2_FILES, "cgroup.controllers": "memory pids" }).dir("/cg", {
      "cgroup.controllers": "cpu memory pids",
      "cgroup.subtree_control": "",
    });
    expect(await prepareCgroupParent("/cg/kova-shell", fs)).toEqual({ ok: true, dir: "/cg/kova-shell" });
    expect(fs.writesIn("/cg/kova-shell")).toEqual([["cgroup.subtree_control", "+memory +pids"]]);
    fs.files.set("/cg/kova-shell/cgroup.controllers", "");
    fs.files.delete("/cg/kova-shell/cgroup.subtree_control");
    expect(await prepareCgroupParent("/cg/kova-shell", fs)).toMatchObject({ ok: false, reason: expect.stringContaining("cannot enable memory and pids") });
    expect(fs.writesIn("/cg").at(-1)).toEqual(["cgroup.subtree_control", "+memory +pids"]);
  });

  it("cgroup v2 - a directory that is not cgroup v2 is refused with the reason", async () => {
    const fs = new FakeCgroupFs({}).dir("/sys/fs/cgroup", {});
    expect(await prepareCgroupParent("/sys/fs/cgroup/kova-shell", fs)).toEqual({
      ok: false,
      reason: "/sys/fs/cgroup is not a cgroup v2 directory (a cgroup v1 or hybrid host, or no cgroup2 mount there)",
    });
    expect(fs.dirs.has("/sys/fs/cgroup/kova-shell")).toBe(false);
  });
});

const V1_MEMORY_FILES = {
  "cgroup.procs": "",
  "memory.limit_in_bytes": "9223372036854771712",
  "memory.memsw.limit_in_bytes": "9223372036854771712",
  "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
  "memory.failcnt": "0",
};
const V1_PIDS_FILES = { "cgroup.procs": "", "pids.max": "max" };

/** The layout of this project's test machines: memory and pids on their own v1 hierarchies, the node in a memory cgroup of its own. */
const PROC_SELF_CGROUP = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n4:memory:/process_api/644f73600bca\n1:cpu:/\n0::/\n";
const MOUNTINFO = [
  "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
  "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
  "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
  "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd",
  "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
  "",
].join("\n");

function v1Host(): FakeCgroupFs {
  const fs = new FakeCgroupFs({});
  fs.dir("/sys/fs/cgroup/memory/process_api/644f73600bca", { ...V1_MEMORY_FILES });
  fs.dir("/sys/fs/cgroup/pids", { ...V1_PIDS_FILES });
  fs.files.set("/proc/self/cgroup", PROC_SELF_CGROUP);
  fs.files.set("/proc/self/mountinfo", MOUNTINFO);
  return fs;
}

/** A fake whose new directories get the control files of the hierarchy they are made in. */
function withV1Children(fs: FakeCgroupFs, memsw = true): FakeCgroupFs {
  const mkdir = fs.mkdir.bind(fs);
  fs.mkdir = async (path) => {
    await mkdir(path);
    const { "memory.memsw.limit_in_bytes": _, ...noMemsw } = V1_MEMORY_FILES;
    fs.dir(path, path.startsWith("/sys/fs/cgroup/memory/") ? (memsw ? V1_MEMORY_FILES : noMemsw) : V1_PIDS_FILES);
  };
  return fs;
}

describe("shell_exec cgroup v1 backend", () => {
  it("cgroup v1 - finds the node's own memory and pids cgroups from /proc/self/cgroup and mountinfo", async () => {
    expect(ownCgroupV1Dirs(PROC_SELF_CGROUP, MOUNTINFO)).toEqual({
      ok: true,
      memory: "/sys/fs/cgroup/memory/process_api/644f73600bca",
      pids: "/sys/fs/cgroup/pids",
    });
    // A container that sees only its own part of the hierarchy (mount root /docker/abc), with controllers mounted together.
    const container = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory\\040and\\040pids rw - cgroup cgroup rw,memory,pids\n";
    expect(ownCgroupV1Dirs("5:memory,pids:/docker/abc/node\n", container)).toEqual({
      ok: true,
      memory: "/sys/fs/cgroup/memory and pids/node",
      pids: "/sys/fs/cgroup/memory and pids/node",
    });
    expect(ownCgroupV1Dirs("5:memory,pids:/elsewhere\n", container)).toMatchObject({ ok: false, reason: expect.stringContaining("outside the part mounted") });
    expect(ownCgroupV1Dirs("0::/user.slice\n", MOUNTINFO)).toEqual({
      ok: false,
      reason: "this process is in no cgroup v1 memory hierarchy (/proc/self/cgroup has no memory line)",
    });
    expect(ownCgroupV1Dirs(PROC_SELF_CGROUP, MOUNTINFO.replace("rw,pids", "rw,cpu"))).toEqual({
      ok: false,
      reason: "no cgroup v1 hierarchy with the pids controller is mounted (/proc/self/mountinfo)",
    });
    expect(await findCgroupV1Parents(v1Host())).toEqual({ ok: true, memory: "/sys/fs/cgroup/memory/process_api/644f73600bca", pids: "/sys/fs/cgroup/pids" });
    const noOomControl = v1Host();
    noOomControl.files.delete("/sys/fs/cgroup/memory/process_api/644f73600bca/memory.oom_control");
    expect(await findCgroupV1Parents(noOomControl)).toMatchObject({ ok: false, reason: expect.stringContaining("no memory.oom_control") });
  });

  it("cgroup v1 - a call gets memory and memsw limits, the OOM killer off and pids.max, and its PID 1 joins both hierarchies", async () => {
    const fs = withV1Children(v1Host());
    await using child = sleeper();
    const parents = { memory: "/sys/fs/cgroup/memory/process_api/644f73600bca", pids: "/sys/fs/cgroup/pids" };
    const cgroup = await createCallCgroupV1(parents, { memoryBytes: 4096 * 2 ** 20, pids: 32 }, fs);
    const name = `kova-shell-${process.pid}-`;
    expect(cgroup.dirs).toEqual([
      expect.stringMatching(new RegExp(`^${parents.memory}/${name}[0-9a-f]{12}$`)),
      expect.stringMatching(new RegExp(`^/sys/fs/cgroup/pids/${name}`)),
    ]);
    const [memory, pids] = cgroup.dirs as [string, string];
    await cgroup.join(child.pid);
    // memsw (memory + swap) may never be below memory: memory first.
    expect(fs.writesIn(memory)).toEqual([
      ["memory.limit_in_bytes", String(4096 * 2 ** 20)],
      ["memory.memsw.limit_in_bytes", String(4096 * 2 ** 20)],
      ["memory.oom_control", "1"],
      ["cgroup.procs", String(child.pid)],
    ]);
    expect(fs.writesIn(pids)).toEqual([
      ["pids.max", "32"],
      ["cgroup.procs", String(child.pid)],
    ]);
    expect(await cgroup.outcome()).toEqual({ memoryExceeded: false });
    // Disposing kills what is listed (there is no cgroup.kill on v1) and removes both directories.
    await cgroup[Symbol.asyncDispose]();
    await child.exited;
    expect(fs.dirs.has(memory) || fs.dirs.has(pids)).toBe(false);
  });

  it("cgroup v1 - without swap accounting (no memory.memsw.limit_in_bytes) the call cgroup is still made", async () => {
    const fs = withV1Children(v1Host(), false);
    const cgroup = await createCallCgroupV1(
      { memory: "/sys/fs/cgroup/memory/process_api/644f73600bca", pids: "/sys/fs/cgroup/pids" },
      { memoryBytes: 2 ** 30 },
      fs,
    );
    expect(fs.writesIn(cgroup.dirs[0]!).map(([file]) => file)).toEqual(["memory.limit_in_bytes", "memory.oom_control"]);
    await cgroup[Symbol.asyncDispose]();
  });

  it("cgroup v1 - a call held at its limit (under_oom) has every process killed and reports memoryExceeded", async () => {
    const fs = withV1Children(v1Host());
    await using child = sleeper();
    const cgroup = await createCallCgroupV1(
      { memory: "/sys/fs/cgroup/memory/process_api/644f73600bca", pids: "/sys/fs/cgroup/pids" },
      { memoryBytes: 2 ** 30 },
      fs,
    );
    await cgroup.join(child.pid);
    fs.files.set(join(cgroup.dirs[0]!, "memory.oom_control"), "oom_kill_disable 1\nunder_oom 1\noom_kill 0\n");
    // The watcher's kill, not the dispose's: the positive signal is the process's exit.
    expect(await child.exited).toEqual([null, "SIGKILL"]);
    // The kernel clears under_oom once the processes are gone; what the watcher saw stays.
    fs.files.set(join(cgroup.dirs[0]!, "memory.oom_control"), "oom_kill_disable 1\nunder_oom 0\noom_kill 0\n");
    expect(await cgroup.outcome()).toEqual({ memoryExceeded: true });
    await cgroup[Symbol.asyncDispose]();
  });

  it("cgroup v1 - a pids hierarchy that refuses the call cgroup leaves no memory cgroup behind", async () => {
    const fs = withV1Children(v1Host());
    const parents = { memory: "/sys/fs/cgroup/memory/process_api/644f73600bca", pids: "/sys/fs/cgroup/pids-gone" };
    await expect(createCallCgroupV1(parents, { memoryBytes: 2 ** 30 }, fs)).rejects.toMatchObject({ code: "ENOENT" });
    expect([...fs.dirs].filter((d) => d.includes("kova-shell-"))).toEqual([]);
  });
});
