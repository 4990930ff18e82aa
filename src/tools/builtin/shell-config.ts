import { accessSync, constants } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { intAt, keyOf, pathAt, rejectUnknown, stringAt, type ConfigTable, ConfigError } from "../../core/index.js";
import { isWithin, realPath } from "./host-path.js";
import { CGROUP_ROOT, DEFAULT_CGROUP_PARENT } from "./shell-cgroup.js";

/**
 * `[tools.shell]`, parsed. Limits apply to every call; a call may ask for a shorter
 * timeout, never a longer one.
 *
 * ```toml
 * [tools.shell]
 * sandbox = "bwrap"          # or "none": runs commands unconfined; must be written on purpose
 * bwrap_path = "/usr/bin/bwrap"   # default: bwrap found on PATH
 * timeout_ms = 10000         # wall time; the whole sandbox is killed at the limit
 * max_output_bytes = 65536   # stdout + stderr together; past it the command is killed
 * memory_total_mb = 4096    # one call, all its processes together (cgroup memory.max, else see below)
 * memory_mb = 256            # RLIMIT_AS of each process (Node needs 1024: V8 reserves address space)
 * max_processes = 32         # processes and threads: pids.max and RLIMIT_NPROC (own user namespace)
 * cgroup = "auto"            # "auto": cgroup v2 /sys/fs/cgroup/kova-shell, else v1 under the node's own cgroups; "off"; or a delegated cgroup v2 dir
 * max_file_mb = 64           # RLIMIT_FSIZE: no single file grows past this
 * tmp_size_mb = 64           # size of the private /tmp and /dev/shm (tmpfs)
 * work_size_mb = 64          # size of the fresh /work of each call when work_root is not set
 * work_root = "/srv/kova/shell"   # optional: a persistent /work per agent at <work_root>/<agentId>
 * ro_binds = ["/opt/tools"]  # optional: more host paths visible read-only
 * ```
 *
 * `memory_total_mb` bounds a call either way: with a cgroup (a v2 parent, shell-cgroup.ts,
 * or the node's own v1 cgroups, shell-cgroup-v1.ts) as the call's memory limit; without one,
 * by lowering RLIMIT_NPROC to memory_total_mb / memory_mb, because processes × memory_mb is
 * then the only bound.
 */
export interface ShellConfig {
  sandbox: "bwrap" | "none";
  bwrapPath: string;
  timeoutMs: number;
  maxOutputBytes: number;
  /** RLIMIT_AS of each process. */
  memoryBytes: number;
  /** All processes of one call together. */
  memoryTotalBytes: number;
  maxProcesses: number;
  /** A cgroup v2 directory to create call cgroups under (DEFAULT_CGROUP_PARENT for "auto", which may also pick cgroup v1), or "off". */
  cgroup: string;
  maxFileBytes: number;
  tmpBytes: number;
  workBytes: number;
  /** Absolute; when set, each agent keeps `<workRoot>/<agentId>` as /work across calls. */
  workRoot?: string;
  /** Absolute host paths bound read-only at the same place inside the sandbox. */
  roBinds: string[];
}

const KEYS = [
  "sandbox",
  "bwrap_path",
  "timeout_ms",
  "max_output_bytes",
  "memory_mb",
  "memory_total_mb",
  "max_processes",
  "cgroup",
  "max_file_mb",
  "tmp_size_mb",
  "work_size_mb",
  "work_root",
  "ro_binds",
] as const;

const MIB = 1024 * 1024;

/** Host paths that hold secrets or other tenants' data: binding them would undo the sandbox. */
const FORBIDDEN_BINDS = ["/", "/root", "/home", "/etc", "/var", "/run", "/proc", "/sys", "/dev", "/tmp", "/boot"];

/**
 * Parses `[tools.shell]`. `keyPrefix` is how the table is written in the file
 * (`tools.shell`); `env.PATH` finds bwrap when `bwrap_path` is not given; relative paths
 * are taken from `baseDir` (the config file's directory).
 * @throws ConfigError naming the key as written in the file and the fix
 */
export function shellConfigFrom(
  table: ConfigTable | undefined,
  keyPrefix = "tools.shell",
  env: NodeJS.ProcessEnv = process.env,
  baseDir: string = process.cwd(),
): ShellConfig {
  const t = table ?? {};
  rejectUnknown(t, KEYS, `${keyPrefix}.`);
  const sandbox = t.sandbox ?? "bwrap";
  if (sandbox !== "bwrap" && sandbox !== "none") {
    throw new ConfigError(keyOf(keyPrefix, "sandbox"), `must be "bwrap" (bubblewrap sandbox) or "none" (no isolation at all), not ${JSON.stringify(sandbox)}`);
  }
  const config: ShellConfig = {
    sandbox,
    bwrapPath: pathAt(t, keyPrefix, "bwrap_path", baseDir) ?? findOnPath("bwrap", env.PATH) ?? "/usr/bin/bwrap",
    timeoutMs: intAt(t, keyPrefix, "timeout_ms", 100, 3_600_000) ?? 10_000,
    maxOutputBytes: intAt(t, keyPrefix, "max_output_bytes", 1024, 64 * MIB) ?? 64 * 1024,
    memoryBytes: (intAt(t, keyPrefix, "memory_mb", 16, 1024 * 1024) ?? 256) * MIB,
    memoryTotalBytes: (intAt(t, keyPrefix, "memory_total_mb", 16, 1024 * 1024) ?? 4096) * MIB,
    maxProcesses: intAt(t, keyPrefix, "max_processes", 1, 100_000) ?? 32,
    cgroup: cgroupAt(t, keyPrefix),
    maxFileBytes: (intAt(t, keyPrefix, "max_file_mb", 1, 1024 * 1024) ?? 64) * MIB,
    tmpBytes: (intAt(t, keyPrefix, "tmp_size_mb", 1, 1024 * 1024) ?? 64) * MIB,
    workBytes: (intAt(t, keyPrefix, "work_size_mb", 1, 1024 * 1024) ?? 64) * MIB,
    roBinds: bindList(t.ro_binds, keyOf(keyPrefix, "ro_binds")),
  };
  if (config.memoryTotalBytes < config.memoryBytes) {
    throw new ConfigError(
      keyOf(keyPrefix, "memory_total_mb"),
      `is ${config.memoryTotalBytes / MIB}, less than memory_mb (${config.memoryBytes / MIB}), the limit of a single process: raise it or lower memory_mb`,
    );
  }
  const workRoot = pathAt(t, keyPrefix, "work_root", baseDir);
  if (workRoot !== undefined) {
    const real = realPath(workRoot);
    if (FORBIDDEN_BINDS.includes(workRoot) || FORBIDDEN_BINDS.includes(real)) {
      throw new ConfigError(
        keyOf(keyPrefix, "work_root"),
        `${workRoot}${real === workRoot ? "" : ` (really ${real})`} is a system directory: name a directory of its own, e.g. /srv/kova/shell`,
      );
    }
    config.workRoot = workRoot;
  }
  const bwrapKey = stringAt(t, keyPrefix, "bwrap_path");
  if (bwrapKey !== undefined && sandbox === "none") {
    throw new ConfigError(keyOf(keyPrefix, "bwrap_path"), 'has no effect with sandbox = "none": remove it or set sandbox = "bwrap"');
  }
  return config;
}

/** `cgroup`: "auto" (the default parent), "off", or an absolute path below /sys/fs/cgroup. */
function cgroupAt(t: ConfigTable, keyPrefix: string): string {
  const raw = stringAt(t, keyPrefix, "cgroup") ?? "auto";
  if (raw === "auto") return DEFAULT_CGROUP_PARENT;
  if (raw === "off") return "off";
  const path = isAbsolute(raw) && !raw.includes("\0") ? resolve(raw) : undefined;
  if (path === undefined || !path.startsWith(`${CGROUP_ROOT}/`)) {
    throw new ConfigError(
      keyOf(keyPrefix, "cgroup"),
      `must be "auto", "off" or a cgroup v2 directory under ${CGROUP_ROOT} that the node may manage (e.g. ${DEFAULT_CGROUP_PARENT}), not ${JSON.stringify(raw)}`,
    );
  }
  return path;
}

/**
 * A list of host paths to bind into a bubblewrap sandbox (`ro_binds`, and MCP servers'
 * `rw_binds`): absolute, and none that may hold secrets or other users' data, judged both as
 * written and where the path really leads (realPath), so that a symlink such as
 * /opt/tools -> /root/.ssh is refused like /root/.ssh itself.
 * @throws ConfigError naming the entry (`key[i]`)
 */
export function bindList(raw: unknown, key: string): string[] {
  if (raw === undefined) return [];
  const name = key.slice(key.lastIndexOf(".") + 1);
  if (!Array.isArray(raw)) throw new ConfigError(key, `must be an array of absolute paths, e.g. ${name} = ["/opt/tools"]`);
  return raw.map((p, i) => {
    const k = `${key}[${i}]`;
    if (typeof p !== "string" || !isAbsolute(p) || p.includes("\0")) {
      throw new ConfigError(k, `must be an absolute path, not ${JSON.stringify(p)}`);
    }
    const path = resolve(p);
    if (mayHoldSecrets(path)) {
      throw new ConfigError(k, `${path} may hold secrets or other users' data and is never shown to the sandbox: bind a narrower directory`);
    }
    const real = realPath(path);
    if (mayHoldSecrets(real)) {
      throw new ConfigError(
        k,
        `${path} leads through a symlink to ${real}, which may hold secrets or other users' data and is never shown to the sandbox: bind a narrower directory, not a link to one`,
      );
    }
    return path;
  });
}

/** Whether binding this (real or written) path would show the sandbox a system directory, or anything of /root or /home. */
export function mayHoldSecrets(path: string): boolean {
  return FORBIDDEN_BINDS.includes(path) || isWithin(path, "/root") || isWithin(path, "/home");
}

/** The first executable `name` in the directories of a PATH value (that `accept` takes, when given). */
export function findOnPath(name: string, path: string | undefined, accept: (candidate: string) => boolean = () => true): string | undefined {
  for (const dir of (path ?? "").split(delimiter)) {
    if (dir === "" || !isAbsolute(dir)) continue;
    const candidate = join(dir, name);
    if (!accept(candidate)) continue;
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}
