import { realpathSync } from "node:fs";
import { basename, dirname, join, sep } from "node:path";

/**
 * Where an absolute host path really leads: its realpath when it exists; otherwise the
 * realpath of its nearest existing ancestor with the rest appended, because a directory
 * created there later lands where that ancestor's symlinks point. Judging a sandbox bind by
 * this (not by the path as written) keeps a symlink from carrying a forbidden directory in.
 */
export function realPath(path: string): string {
  const rest: string[] = [];
  for (let at = path; ; at = dirname(at)) {
    try {
      return join(realpathSync.native(at), ...rest.reverse());
    } catch {
      if (dirname(at) === at) return path;
      rest.push(basename(at));
    }
  }
}

/** Whether absolute, normalized `path` is `dir` or lies below it. */
export function isWithin(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : `${dir}${sep}`);
}
