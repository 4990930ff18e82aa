import { mkdir, chown, realpath, stat } from "node:fs/promises";
import { dirname, join, posix, relative, sep } from "node:path";
import { ArgumentError, isValidId } from "../../core/index.js";
import { ShellWorkDirError } from "./shell-errors.js";
import { SANDBOX_WORK_DIR } from "./shell-sandbox.js";

/**
 * The sandbox path a call's `cwd` argument names: relative to /work (or absolute under
 * it), never outside. Inside the sandbox nothing outside /work is writable anyway; this
 * gives the model a clear error instead of a bwrap failure.
 * @throws ArgumentError when cwd leaves /work or holds a NUL byte
 */
export function sandboxCwd(cwd: string | undefined): { inside: string; rel: string } {
  if (cwd === undefined || cwd === "" || cwd === ".") return { inside: SANDBOX_WORK_DIR, rel: "" };
  if (cwd.includes("\0")) throw new ArgumentError("cwd", "must not contain a NUL byte");
  const inside = posix.normalize(posix.isAbsolute(cwd) ? cwd : posix.join(SANDBOX_WORK_DIR, cwd)).replace(/\/+$/, "");
  if (inside !== SANDBOX_WORK_DIR && !inside.startsWith(`${SANDBOX_WORK_DIR}/`)) {
    throw new ArgumentError("cwd", `${JSON.stringify(cwd)} is outside the work dir: give a path relative to ${SANDBOX_WORK_DIR}`);
  }
  return { inside, rel: posix.relative(SANDBOX_WORK_DIR, inside) };
}

/**
 * Makes (once) and returns `<workRoot>/<agentId>`, owned by the sandbox's user, and checks
 * that this user can reach it: bwrap binds it as that user, so a private parent (a 0700
 * temp dir) would fail every call with a bwrap error the model cannot act on.
 * @throws ShellWorkDirError when the directory cannot be made or reached
 * @throws ArgumentError when the agent id is not a safe path component
 */
export async function agentWorkDir(workRoot: string, agentId: string, owner: { uid: number; gid: number } | undefined): Promise<string> {
  if (!isValidId(agentId)) throw new ArgumentError("agentId", "must be 1-128 characters from [A-Za-z0-9_-] to name a work dir");
  const dir = join(workRoot, agentId);
  try {
    await mkdir(workRoot, { recursive: true, mode: 0o711 });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    if (owner) await chown(dir, owner.uid, owner.gid);
  } catch (err) {
    throw new ShellWorkDirError(dir, `cannot create it (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { cause: err });
  }
  if (owner) {
    for (let p = dirname(dir); ; p = dirname(p)) {
      const st = await stat(p);
      const searchable = st.uid === owner.uid ? st.mode & 0o100 : st.gid === owner.gid ? st.mode & 0o010 : st.mode & 0o001;
      if (!searchable) {
        throw new ShellWorkDirError(dir, `${p} is not searchable by uid ${owner.uid}, the sandbox's user: run chmod o+x ${p} or choose another work_root`);
      }
      if (p === dirname(p)) break;
    }
  }
  return dir;
}

/**
 * Checks on the host that `rel` is an existing directory inside the agent's work dir,
 * after resolving symlinks the sandbox may have planted there.
 * @throws ArgumentError when it does not exist, is not a directory or resolves outside
 */
export async function checkHostCwd(hostDir: string, rel: string): Promise<void> {
  if (rel === "") return;
  const root = await realpath(hostDir);
  let real: string;
  try {
    real = await realpath(join(hostDir, rel));
  } catch {
    throw new ArgumentError("cwd", `${JSON.stringify(rel)} does not exist in the work dir: create it first (mkdir -p ${rel})`);
  }
  const inner = relative(root, real);
  if (inner.startsWith(`..${sep}`) || inner === ".." || !(await stat(real)).isDirectory()) {
    throw new ArgumentError("cwd", `${JSON.stringify(rel)} is not a directory inside the work dir`);
  }
}
