/**
 * Freezing a process whole, as `docker pause`, a paused VM or a stuck host would: the
 * process and every process it starts stop at once and keep their sockets, and they all
 * go on when thawed. Three ways, best first:
 *
 * - `cgroup-v1`: the cgroup v1 freezer (`/sys/fs/cgroup/freezer`, `freezer.state`);
 * - `cgroup-v2`: `cgroup.freeze` of a cgroup v2 directory (a pure v2 host);
 * - `sigstop`: SIGSTOP / SIGCONT of the process group (start the process `detached`, so it
 *   leads a group of its own). Processes that leave the group escape it, and a group
 *   whose parent is in another session is an orphaned group, which the kernel sends SIGHUP
 *   when another member exits (Kova nodes ignore SIGHUP).
 *
 * Start the process through `freezer.command(cmd, args)` so that it is in the cgroup from
 * its first instruction, with everything it forks after. Outermost: `ip netns exec` mounts
 * a /sys of its own, without the cgroup file systems, so a namespace's command line goes
 * inside the freezer's, not around it.
 */
import { existsSync } from "node:fs";
import { access, constants, mkdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sleep } from "../core/index.js";
import { HarnessError } from "./errors.js";

export type FreezeMethod = "cgroup-v1" | "cgroup-v2" | "sigstop";

export interface Freezer {
  readonly method: FreezeMethod;
  /** The command line that starts `command` inside the freezer's cgroup (unchanged for `sigstop`). */
  command(command: string, args: string[]): { command: string; args: string[] };
  /** For `sigstop`: the group to stop (the pid of its leader). Ignored by the cgroup methods. */
  track(pid: number): void;
  /** Returns once every process is stopped. */
  freeze(): Promise<void>;
  thaw(): Promise<void>;
  /** Thaws and removes the cgroup (its processes must have exited or moved). */
  dispose(): Promise<void>;
}

const V1_ROOT = "/sys/fs/cgroup/freezer";
const V2_ROOT = "/sys/fs/cgroup";

/** The best method this machine offers (root is needed for the cgroup ones). */
export async function freezeMethod(): Promise<FreezeMethod> {
  if (await writable(V1_ROOT)) return "cgroup-v1";
  if (existsSync(join(V2_ROOT, "cgroup.controllers")) && (await writable(V2_ROOT))) return "cgroup-v2";
  return "sigstop";
}

async function writable(dir: string): Promise<boolean> {
  if (process.platform !== "linux") return false;
  try {
    await access(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** A freezer of its own cgroup (named after `name` and this process), or of a process group. */
export async function createFreezer(name: string, method?: FreezeMethod): Promise<Freezer> {
  const m = method ?? (await freezeMethod());
  if (m === "sigstop") return new GroupFreezer();
  const dir = join(m === "cgroup-v1" ? V1_ROOT : V2_ROOT, `kova-freeze-${process.pid}-${name}`);
  await mkdir(dir, { recursive: true });
  return new CgroupFreezer(m, dir);
}

class CgroupFreezer implements Freezer {
  constructor(
    readonly method: "cgroup-v1" | "cgroup-v2",
    private readonly dir: string,
  ) {}

  command(command: string, args: string[]): { command: string; args: string[] } {
    // The shell joins the cgroup, then becomes the command: nothing runs outside it.
    return { command: "/bin/sh", args: ["-c", `echo $$ > ${JSON.stringify(join(this.dir, "cgroup.procs"))} && exec "$0" "$@"`, command, ...args] };
  }

  track(): void {}

  async freeze(): Promise<void> {
    if (this.method === "cgroup-v1") {
      await writeFile(join(this.dir, "freezer.state"), "FROZEN");
      // FREEZING until every task has stopped.
      while ((await readFile(join(this.dir, "freezer.state"), "utf8")).trim() !== "FROZEN") await sleep(5);
    } else {
      await writeFile(join(this.dir, "cgroup.freeze"), "1");
      while (!/^frozen 1$/m.test(await readFile(join(this.dir, "cgroup.events"), "utf8"))) await sleep(5);
    }
  }

  async thaw(): Promise<void> {
    if (this.method === "cgroup-v1") await writeFile(join(this.dir, "freezer.state"), "THAWED");
    else await writeFile(join(this.dir, "cgroup.freeze"), "0");
  }

  async dispose(): Promise<void> {
    await this.thaw().catch(() => undefined);
    for (let i = 0; i < 50; i++) {
      try {
        await rmdir(this.dir);
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
        await sleep(100); // its processes are still exiting
      }
    }
  }
}

class GroupFreezer implements Freezer {
  readonly method = "sigstop" as const;
  private leader: number | undefined;

  command(command: string, args: string[]): { command: string; args: string[] } {
    return { command, args };
  }

  track(pid: number): void {
    this.leader = pid;
  }

  private signal(sig: NodeJS.Signals): void {
    if (this.leader === undefined) throw new HarnessError("the sigstop freezer has no process group: call track(pid) with a process started detached");
    process.kill(-this.leader, sig);
  }

  async freeze(): Promise<void> {
    this.signal("SIGSTOP");
  }

  async thaw(): Promise<void> {
    this.signal("SIGCONT");
  }

  async dispose(): Promise<void> {
    try {
      this.signal("SIGCONT");
    } catch {
      /* gone already */
    }
  }
}
