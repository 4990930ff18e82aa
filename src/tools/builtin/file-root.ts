import { constants, type Stats } from "node:fs";
import { lstat, open, readlink, realpath, type FileHandle } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { FileNotFoundError, FilePathRefusedError, FileTypeRefusedError } from "../errors.js";
import { shortenText } from "../result-cap.js";

/**
 * Confinement of file_read / file_write to one directory. A path is accepted only when it
 * is inside the root both as written (after `..` is resolved) and as it really is on disk
 * (after every symlink in its existing part is resolved: the realpath of the deepest
 * existing ancestor, then a prefix check that ends at a path separator, so `/srv/root2` is
 * not inside `/srv/root`). Files are then opened with O_NOFOLLOW and checked again through
 * the open descriptor, which closes the window between the check and the open: a component
 * swapped for a symlink in between is caught by the second check.
 */

/** Linux NAME_MAX and PATH_MAX; longer names fail in the kernel anyway, refused here with a clear message. */
const NAME_MAX = 255;
const PATH_MAX = 4096;

export class FileRoot {
  /**
   * @param real the root's realpath (FileRoot.open makes it)
   * @param written the root as configured (absolute), accepted as a prefix of absolute paths too
   */
  private constructor(
    readonly real: string,
    readonly written: string,
  ) {}

  /**
   * @throws Error when the root does not exist or is not a directory (config checks this first)
   */
  static async open(root: string): Promise<FileRoot> {
    const real = await realpath(root);
    if (!(await lstat(real)).isDirectory()) throw new Error(`${root} is not a directory`);
    return new FileRoot(real, resolve(root));
  }

  /** The root from a realpath already checked (by the config parser). */
  static fromChecked(real: string, written: string): FileRoot {
    return new FileRoot(real, resolve(written));
  }

  /**
   * Where `path` really is, if it is inside the root. Does not require the file to exist.
   * @throws FilePathRefusedError when it is outside the root or not a usable path
   */
  async resolve(path: string): Promise<string> {
    checkShape(path);
    const lexical = this.#lexical(path);
    const real = await realOf(lexical, path);
    if (!this.contains(real)) throw new FilePathRefusedError(path, "it leads outside the file root (through a symbolic link)");
    return real;
  }

  /** Whether an absolute real path is the root or below it. */
  contains(real: string): boolean {
    return real === this.real || real.startsWith(this.real.endsWith(sep) ? this.real : this.real + sep);
  }

  /** The path as shown to the model: relative to the root. */
  display(real: string): string {
    return relative(this.real, real) || ".";
  }

  #lexical(path: string): string {
    if (isAbsolute(path)) {
      const abs = resolve(path);
      for (const base of [this.real, this.written]) {
        if (abs === base || abs.startsWith(base + sep)) return join(this.real, relative(base, abs));
      }
      throw new FilePathRefusedError(path, "absolute paths must lie inside the file root; give a path relative to it");
    }
    const abs = resolve(this.real, path);
    if (!this.contains(abs)) throw new FilePathRefusedError(path, "it leads outside the file root (through ..)");
    return abs;
  }

  /**
   * Opens a regular file inside the root without following a final symlink, and proves
   * through the descriptor that what was opened is the file that was checked.
   * @throws FileNotFoundError, FileTypeRefusedError, FilePathRefusedError
   */
  async openChecked(real: string, written: string, flags: number): Promise<{ handle: FileHandle; stats: Stats }> {
    const before = await lstatOrMissing(real);
    if (!before) throw new FileNotFoundError(written);
    refuseNonRegular(before, written);
    let handle: FileHandle;
    try {
      // O_NONBLOCK: if a FIFO is swapped in after the lstat, the open returns instead of
      // waiting forever for a writer; the fstat below then refuses it.
      handle = await open(real, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
    } catch (err) {
      throw openError(err, written);
    }
    try {
      const stats = await handle.stat();
      refuseNonRegular(stats, written);
      if (stats.ino !== before.ino || stats.dev !== before.dev) {
        throw new FilePathRefusedError(written, "the file changed while it was being opened; try again");
      }
      await this.verifyDescriptor(handle, real, written);
      return { handle, stats };
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /**
   * Checks through /proc/self/fd that an open descriptor lies inside the root at `real`.
   * Where /proc is missing, the dev/inode comparison of openChecked is the check.
   * @throws FilePathRefusedError when it does not
   */
  async verifyDescriptor(handle: FileHandle, real: string, written: string): Promise<void> {
    let actual: string;
    try {
      actual = await readlink(`/proc/self/fd/${handle.fd}`);
    } catch {
      return;
    }
    if (actual !== real || !this.contains(actual)) {
      throw new FilePathRefusedError(written, "a directory on the path changed while the file was opened; try again");
    }
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

/**
 * The real location of `lexical`: the realpath of its deepest existing ancestor joined with
 * the components that do not exist yet (plain names: they cannot be links).
 */
async function realOf(lexical: string, written: string): Promise<string> {
  const missing: string[] = [];
  let current = lexical;
  for (;;) {
    try {
      const real = await realpath(current);
      return missing.length === 0 ? real : join(real, ...missing.reverse());
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ELOOP") throw new FilePathRefusedError(written, "it goes through a symbolic link loop");
      if (code !== "ENOENT" && code !== "ENOTDIR") throw openError(err, written);
      // realpath fails on a dangling link too: refuse it rather than create its target.
      if (code === "ENOENT" && (await lstatOrMissing(current))?.isSymbolicLink()) {
        throw new FilePathRefusedError(written, "it goes through a symbolic link whose target does not exist");
      }
      if (code === "ENOTDIR") throw new FilePathRefusedError(written, "a part of it that should be a directory is a file");
    }
    const parent = dirname(current);
    if (parent === current) throw new FilePathRefusedError(written, "no part of it exists");
    missing.push(basename(current));
    current = parent;
  }
}

async function lstatOrMissing(path: string): Promise<Stats | undefined> {
  try {
    return await lstat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
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

/** Maps an errno from open/realpath to the tools layer's errors. */
export function openError(err: unknown, written: string): Error {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "ENOENT") return new FileNotFoundError(written);
  if (code === "ELOOP") return new FilePathRefusedError(written, "it is a symbolic link (links are not followed at the last step)");
  if (code === "EISDIR") return new FileTypeRefusedError(written, "directory");
  if (code === "ENAMETOOLONG") return new FilePathRefusedError(written, "a name in it is too long");
  if (code === "ENOTDIR") return new FilePathRefusedError(written, "a part of it that should be a directory is a file");
  return err instanceof Error ? err : new Error(String(err));
}
