import { constants, fstatSync, openSync, closeSync, statSync, type Stats } from "node:fs";
import { lstat, mkdir, open, readlink, type FileHandle } from "node:fs/promises";
import { isAbsolute, relative, resolve, sep } from "node:path";
import { ErrorCode, KovaError } from "../../core/index.js";
import { FileNotFoundError, FilePathRefusedError, FileTypeRefusedError } from "../errors.js";
import { shortenText } from "../result-cap.js";

/**
 * Confinement of file_read / file_write to one directory, without a window between a check
 * and a use. Node has no openat(2), but Linux resolves `/proc/self/fd/<n>/<name>` from the
 * directory that descriptor n holds open, wherever that directory is now, so
 * `at(dir, name)` names one entry of an open directory. A path is walked from the root's
 * descriptor one name at a time, each directory opened with O_DIRECTORY | O_NOFOLLOW
 * through the one before it; the kernel never follows a symlink on the way. A symlink met
 * on the way is read (readlink) and its target, which must lie inside the root, walked again
 * from the root. The file itself is opened, created, renamed, linked and removed through its
 * directory's descriptor, so a directory swapped for a symlink after it was checked is not
 * on the path: what was opened is what is used. Checks by descriptor (fstat dev/inode):
 * the root is the directory the config named; a file opened is the one lstat saw; a temp
 * file removed is the one created.
 */

/** Linux NAME_MAX and PATH_MAX; longer names fail in the kernel anyway, refused here with a clear message. */
const NAME_MAX = 255;
const PATH_MAX = 4096;
/** Symlinks followed in one walk before it is called a loop (Linux's own limit). */
const MAX_LINKS = 40;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** An entry of an open directory, as a path the kernel resolves from that directory's descriptor. */
export function at(dir: FileHandle, name: string): string {
  return `/proc/self/fd/${dir.fd}/${name}`;
}

/** Where a walk ended: the open directory that holds the last name, and that name. */
export interface Located {
  /** The directory holding `name`, open; the caller closes it. */
  dir: FileHandle;
  name: string;
  /** The entry's lstat, when it exists (never a symlink: those are followed). */
  stats?: Stats;
  /** The path as shown to the model: relative to the root, symlinks resolved. */
  display: string;
}

export interface WalkOptions {
  /** Create missing directories on the way (file_write's create_dirs). */
  createDirs: boolean;
  /** The error for a missing directory on the way, given the part of the path that exists. */
  missingDir(display: string): Error;
}

export class FileRoot {
  private constructor(
    /** The root's realpath. */
    readonly real: string,
    /** The root as configured (absolute), accepted as a prefix of absolute paths too. */
    readonly written: string,
    private readonly dev: number,
    private readonly ino: number,
  ) {}

  /**
   * The root from a realpath already checked (by the config parser). Records the directory's
   * identity, and proves that `/proc/self/fd` resolves names from a descriptor here.
   * @throws KovaError INTERNAL when /proc/self/fd does not work (no /proc mounted) or the root is no directory
   */
  static fromChecked(real: string, written: string): FileRoot {
    const fd = openSync(real, DIR_FLAGS);
    try {
      const st = fstatSync(fd);
      const viaProc = statSync(`/proc/self/fd/${fd}/.`);
      if (viaProc.ino !== st.ino || viaProc.dev !== st.dev)
        throw new KovaError(ErrorCode.INTERNAL, "/proc/self/fd/<n>/. is not the directory n holds open: mount /proc");
      return new FileRoot(real, resolve(written), st.dev, st.ino);
    } finally {
      closeSync(fd);
    }
  }

  /** Whether an absolute real path is the root or below it. */
  contains(real: string): boolean {
    return real === this.real || real.startsWith(this.real.endsWith(sep) ? this.real : this.real + sep);
  }

  /**
   * Walks `path` from the root, following symlinks only inside it, and returns the open
   * directory that holds its last name. The root itself is refused (it is a directory).
   * @throws FilePathRefusedError for a path outside the root, through a symlink out of it, a
   *   loop, a file where a directory should be; `missingDir`'s error; FileTypeRefusedError
   */
  async locate(path: string, opts: WalkOptions): Promise<Located> {
    checkShape(path);
    let names = this.#lexical(path);
    /** How many of `names`, from the start, came from the last symlink's target. */
    let fromLink = 0;
    for (let links = 0; ; links++) {
      if (links > MAX_LINKS) throw new FilePathRefusedError(path, "it goes through a symbolic link loop");
      if (names.length === 0) throw new FileTypeRefusedError(path, "directory");
      const walked = await this.#walk(path, names, fromLink, opts);
      if ("located" in walked) return walked.located;
      names = walked.names;
      fromLink = walked.fromLink;
    }
  }

  /**
   * One walk from the root; stops at the first symlink and hands back the names to walk
   * instead (its target, then what was left).
   */
  async #walk(path: string, names: string[], fromLink: number, opts: WalkOptions): Promise<{ located: Located } | { names: string[]; fromLink: number }> {
    let dir = await this.#openRoot(path);
    try {
      for (let i = 0; i < names.length; i++) {
        const name = names[i]!;
        const last = i === names.length - 1;
        const entry = await lstatAt(dir, name, path);
        if (entry?.isSymbolicLink()) {
          const target = await this.#linkTarget(dir, name, names.slice(0, i), path);
          await dir.close();
          return { names: [...target, ...names.slice(i + 1)], fromLink: target.length };
        }
        if (last) {
          if (!entry && i < fromLink) throw new FilePathRefusedError(path, "it goes through a symbolic link whose target does not exist");
          const located: Located = { dir, name, display: names.join("/") };
          if (entry) located.stats = entry;
          return { located };
        }
        if (!entry) {
          if (i < fromLink) throw new FilePathRefusedError(path, "it goes through a symbolic link whose target does not exist");
          if (!opts.createDirs) throw opts.missingDir(names.slice(0, i + 1).join("/"));
          // Created inside the directory held open: wherever the path's names point now.
          await mkdir(at(dir, name)).catch((err: NodeJS.ErrnoException) => {
            if (err.code !== "EEXIST") throw openError(err, path);
          });
        } else if (!entry.isDirectory()) {
          throw new FilePathRefusedError(path, "a part of it that should be a directory is not one");
        }
        const next = await open(at(dir, name), DIR_FLAGS).catch(async (err: NodeJS.ErrnoException) => {
          // Swapped for a symlink (ELOOP) or a file since the lstat: refuse rather than guess.
          if (err.code === "ELOOP" || err.code === "ENOTDIR" || err.code === "ENOENT") throw changed(path);
          throw openError(err, path);
        });
        await dir.close();
        dir = next;
      }
      throw new Error("unreachable: a walk ends at its last name");
    } catch (err) {
      await dir.close().catch(() => undefined);
      throw err;
    }
  }

  /** The root, opened and proven to be the directory the config named. */
  async #openRoot(path: string): Promise<FileHandle> {
    const dir = await open(this.real, DIR_FLAGS);
    const st = await dir.stat();
    if (st.dev !== this.dev || st.ino !== this.ino) {
      await dir.close();
      throw new FilePathRefusedError(path, `the file root ${this.written} was replaced since the node started; restart it`);
    }
    return dir;
  }

  /**
   * A symlink's target as names below the root, resolved against the directory it is in.
   * @throws FilePathRefusedError when the target leaves the root
   */
  async #linkTarget(dir: FileHandle, name: string, parent: string[], path: string): Promise<string[]> {
    const target = await readlink(at(dir, name)).catch((err: NodeJS.ErrnoException) => {
      // EINVAL: no longer a symlink since the lstat.
      throw err.code === "EINVAL" || err.code === "ENOENT" ? changed(path) : openError(err, path);
    });
    const out = isAbsolute(target) ? this.#insideNames(target) : [...parent];
    if (out === undefined) throw new FilePathRefusedError(path, "it leads outside the file root (through a symbolic link)");
    for (const part of isAbsolute(target) ? [] : target.split("/")) {
      if (part === "" || part === ".") continue;
      if (part !== "..") out.push(part);
      else if (out.pop() === undefined) throw new FilePathRefusedError(path, "it leads outside the file root (through a symbolic link)");
    }
    return out;
  }

  /** An absolute path's names below the root (its real or its written form), or undefined outside it. */
  #insideNames(abs: string): string[] | undefined {
    const normal = resolve(abs);
    for (const base of [this.real, this.written]) {
      if (normal === base || normal.startsWith(base + sep)) return relative(base, normal).split(sep).filter(Boolean);
    }
    return undefined;
  }

  /** The path's names below the root, with `..` resolved as written (never above the root). */
  #lexical(path: string): string[] {
    if (isAbsolute(path)) {
      const names = this.#insideNames(path);
      if (names === undefined) throw new FilePathRefusedError(path, "absolute paths must lie inside the file root; give a path relative to it");
      return names;
    }
    const abs = resolve(this.real, path);
    if (!this.contains(abs)) throw new FilePathRefusedError(path, "it leads outside the file root (through ..)");
    return relative(this.real, abs).split(sep).filter(Boolean);
  }

  /**
   * Checks through /proc/self/fd that a directory held open still lies inside the root: a
   * directory moved out of it (by someone who may write both places) after the walk would
   * otherwise take the write with it.
   * @throws FilePathRefusedError when it does not
   */
  async checkInside(dir: FileHandle, path: string): Promise<void> {
    const now = await readlink(`/proc/self/fd/${dir.fd}`);
    if (!this.contains(now)) throw new FilePathRefusedError(path, "a directory on the path was moved out of the file root; try again");
  }
}

function changed(path: string): FilePathRefusedError {
  return new FilePathRefusedError(path, "a directory on the path changed while it was walked; try again");
}

/** lstat of an entry of an open directory; undefined when it does not exist. */
async function lstatAt(dir: FileHandle, name: string, path: string): Promise<Stats | undefined> {
  try {
    return await lstat(at(dir, name));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw openError(err, path);
  }
}

function checkShape(path: string): void {
  if (path.length === 0) throw new FilePathRefusedError(path, "the path is empty");
  if (path.includes("\0")) throw new FilePathRefusedError(path, "it contains a NUL byte");
  if (Buffer.byteLength(path) > PATH_MAX) throw new FilePathRefusedError(shorten(path), `it is longer than ${PATH_MAX} bytes`);
  for (const part of path.split("/")) {
    if (Buffer.byteLength(part) > NAME_MAX) throw new FilePathRefusedError(shorten(path), `a name in it is longer than ${NAME_MAX} bytes`);
  }
}

function shorten(path: string): string {
  return shortenText(path, 80);
}

/** @throws FileTypeRefusedError unless the file is a regular file */
export function refuseNonRegular(stats: Stats, written: string): void {
  if (stats.isFile()) return;
  const kind = stats.isDirectory()
    ? "directory"
    : stats.isSymbolicLink()
      ? "symbolic link"
      : stats.isFIFO()
        ? "FIFO (named pipe)"
        : stats.isSocket()
          ? "socket"
          : stats.isCharacterDevice()
            ? "character device"
            : stats.isBlockDevice()
              ? "block device"
              : "special file";
  throw new FileTypeRefusedError(written, kind);
}

/** Maps an errno from open/lstat/readlink to the tools layer's errors. */
export function openError(err: unknown, written: string): Error {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "ENOENT") return new FileNotFoundError(written);
  if (code === "ELOOP") return new FilePathRefusedError(written, "it is a symbolic link (links are not followed at the last step)");
  if (code === "EISDIR") return new FileTypeRefusedError(written, "directory");
  if (code === "ENAMETOOLONG") return new FilePathRefusedError(written, "a name in it is too long");
  if (code === "ENOTDIR") return new FilePathRefusedError(written, "a part of it that should be a directory is a file");
  return err instanceof Error ? err : new Error(String(err));
}
