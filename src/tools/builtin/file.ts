import { randomBytes } from "node:crypto";
import { constants, realpathSync, type Stats, statSync } from "node:fs";
import { type FileHandle, link, lstat, open, rename, unlink } from "node:fs/promises";
import { isAbsolute, resolve } from "node:path";
import { boolValue, intValue, rejectUnknown, stringValue, type ConfigTable, ConfigError } from "../../core/index.js";
import { defineTool } from "../define-tool.js";
import { FileExistsError, FileNotFoundError, FilePathRefusedError, FileTooLargeError } from "../errors.js";
import { utf8Boundary } from "../result-cap.js";
import type { Tool } from "../types.js";
import { at, FileRoot, type Located, openError, refuseNonRegular } from "./file-root.js";

/**
 * `file_read` and `file_write`, confined to one directory (see file-root.ts).
 *
 * ```toml
 * [tools.file]
 * root = "/srv/agent-files"   # must exist; relative paths are relative to kova.toml
 * max_bytes = 1048576         # most bytes one read returns and one write accepts
 * read_only = false           # true: only file_read
 * ```
 *
 * Replay: file_read is idempotent. file_write always writes the whole file (no append), so
 * in mode "overwrite" a re-run leaves the same bytes as the first run and is idempotent;
 * in mode "create" a re-run would fail on the file its first run made, so that mode is
 * not, and the model hears "outcome unknown" instead.
 */
export interface FileToolConfig {
  /** realpath of the root. */
  root: string;
  /** The root as configured (absolute). */
  rootWritten: string;
  maxBytes: number;
  readOnly: boolean;
}

/**
 * Parses `[tools.file]`, checking that the root exists and is a directory.
 * @param baseDir where a relative root is anchored (the config file's directory)
 * @throws ConfigError naming the key and the fix
 */
export function fileConfigFrom(table: ConfigTable, keyPrefix = "tools.file", _env: NodeJS.ProcessEnv = process.env, baseDir = process.cwd()): FileToolConfig {
  rejectUnknown(table, ["root", "max_bytes", "read_only"], `${keyPrefix}.`);
  const rootRaw = stringValue(table.root, `${keyPrefix}.root`);
  if (rootRaw === undefined)
    throw new ConfigError(`${keyPrefix}.root`, 'is required: name the directory file_read and file_write are confined to, e.g. root = "/srv/agent-files"');
  const rootWritten = isAbsolute(rootRaw) ? rootRaw : resolve(baseDir, rootRaw);
  let root: string;
  try {
    root = realpathSync(rootWritten);
    if (!statSync(root).isDirectory()) throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new ConfigError(`${keyPrefix}.root`, `${rootWritten} is not a usable directory (${code}): create it (mkdir -p ${rootWritten}) or fix the path`, {
      cause: err,
    });
  }
  try {
    FileRoot.fromChecked(root, rootWritten);
  } catch (err) {
    throw new ConfigError(
      `${keyPrefix}.root`,
      `file_read and file_write open paths below ${rootWritten} through /proc/self/fd, which does not work here (${(err as Error).message}): run the node on Linux with /proc mounted`,
      { cause: err },
    );
  }
  return {
    root,
    rootWritten,
    maxBytes: intValue(table.max_bytes, `${keyPrefix}.max_bytes`, 1, 1024 * 1024 * 1024) ?? 1024 * 1024,
    readOnly: boolValue(table.read_only, `${keyPrefix}.read_only`) ?? false,
  };
}

interface ReadArgs {
  path: string;
  offset: number;
  length?: number;
  encoding: "utf8" | "base64";
}

export interface FileReadResult {
  path: string;
  /** Size of the whole file in bytes. */
  size: number;
  offset: number;
  /** Bytes returned (before encoding). */
  bytes: number;
  content: string;
  encoding: "utf8" | "base64";
  /** More of the file follows: read again from `next_offset`. */
  truncated: boolean;
  next_offset?: number;
}

interface WriteArgs {
  path: string;
  content: string;
  encoding: "utf8" | "base64";
  mode: "overwrite" | "create";
  create_dirs: boolean;
}

export interface FileWriteResult {
  path: string;
  bytes: number;
  created: boolean;
}

/** Builds file_read, and file_write unless read_only. */
export function createFileTools(config: FileToolConfig): Tool[] {
  const root = FileRoot.fromChecked(config.root, config.rootWritten);
  const read = defineTool<ReadArgs, FileReadResult>({
    name: "file_read",
    description:
      `Reads a file below the agent's file root (paths relative to it). Returns at most ${config.maxBytes} bytes per call; ` +
      "when truncated, call again with offset = next_offset. Use encoding base64 for binary files.",
    idempotent: true,
    parameters: {
      type: "object",
      properties: {
        path: { type: "string", minLength: 1, description: "Path relative to the file root." },
        offset: { type: "integer", minimum: 0, default: 0, description: "Byte offset to start at." },
        length: { type: "integer", minimum: 1, description: `Bytes to read (at most ${config.maxBytes}).` },
        encoding: { enum: ["utf8", "base64"], default: "utf8" },
      },
      required: ["path"],
      additionalProperties: false,
    },
    run: (args) => readFile(root, config, args),
  });
  if (config.readOnly) return [read];
  const write = defineTool<WriteArgs, FileWriteResult>({
    name: "file_write",
    description:
      `Writes a whole file below the agent's file root (paths relative to it), atomically: readers see the old or the new content, never a mix. ` +
      `At most ${config.maxBytes} bytes. mode "create" refuses to replace an existing file.`,
    idempotent: false,
    idempotentFor: (args) => args.mode === "overwrite",
    parameters: {
      type: "object",
      properties: {
        path: { type: "string", minLength: 1, description: "Path relative to the file root." },
        content: { type: "string", description: "The file's full new content." },
        encoding: { enum: ["utf8", "base64"], default: "utf8", description: "How content is encoded." },
        mode: { enum: ["overwrite", "create"], default: "overwrite" },
        create_dirs: { type: "boolean", default: false, description: "Create missing parent directories." },
      },
      required: ["path", "content"],
      additionalProperties: false,
    },
    run: (args) => writeFile(root, config, args),
  });
  return [read, write];
}

async function readFile(root: FileRoot, config: FileToolConfig, args: ReadArgs): Promise<FileReadResult> {
  const loc = await root.locate(args.path, { createDirs: false, missingDir: () => new FileNotFoundError(args.path) });
  try {
    if (!loc.stats) throw new FileNotFoundError(args.path);
    refuseNonRegular(loc.stats, args.path);
    // O_NONBLOCK: a FIFO swapped in after the lstat does not hang the open; the fstat refuses it.
    const handle = await open(at(loc.dir, loc.name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY).catch(
      (err: unknown) => {
        throw openError(err, args.path);
      },
    );
    try {
      const stats = await handle.stat();
      refuseNonRegular(stats, args.path);
      if (stats.ino !== loc.stats.ino || stats.dev !== loc.stats.dev)
        throw new FilePathRefusedError(args.path, "the file changed while it was being opened; try again");
      return await readRange(handle, stats.size, loc.display, config, args);
    } finally {
      await handle.close();
    }
  } finally {
    await loc.dir.close();
  }
}

async function readRange(handle: FileHandle, size: number, display: string, config: FileToolConfig, args: ReadArgs): Promise<FileReadResult> {
  const want = Math.min(args.length ?? config.maxBytes, config.maxBytes, Math.max(0, size - args.offset));
  const buf = Buffer.alloc(want);
  let got = 0;
  while (got < want) {
    const { bytesRead } = await handle.read(buf, got, want - got, args.offset + got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  let data = buf.subarray(0, got);
  const more = args.offset + got < size;
  // A text read cut by the cap ends at a character boundary; next_offset resumes there.
  if (args.encoding === "utf8" && more) data = data.subarray(0, utf8Boundary(data, data.length));
  const result: FileReadResult = {
    path: display,
    size,
    offset: args.offset,
    bytes: data.length,
    content: args.encoding === "base64" ? data.toString("base64") : data.toString("utf8"),
    encoding: args.encoding,
    truncated: more,
  };
  if (more) result.next_offset = args.offset + data.length;
  return result;
}

async function writeFile(root: FileRoot, config: FileToolConfig, args: WriteArgs): Promise<FileWriteResult> {
  const data = Buffer.from(args.content, args.encoding);
  if (data.length > config.maxBytes) throw new FileTooLargeError(args.path, data.length, config.maxBytes);
  const loc = await root.locate(args.path, {
    createDirs: args.create_dirs,
    missingDir: (dir) => new FileNotFoundError(dir, "directory", "pass create_dirs: true to create it"),
  });
  try {
    if (loc.stats) refuseNonRegular(loc.stats, args.path);
    if (loc.stats && args.mode === "create") throw new FileExistsError(args.path);
    await root.checkInside(loc.dir, args.path);
    await placeAtomically(loc, data, args, loc.stats ? loc.stats.mode & 0o777 : 0o644);
    return { path: loc.display, bytes: data.length, created: loc.stats === undefined };
  } finally {
    await loc.dir.close();
  }
}

/**
 * Atomic replace: a temp file in the same directory (same filesystem, so rename is atomic),
 * fsynced before the rename and the directory fsynced after it, so a crash leaves the old
 * file or the new one, never a torn one. Every step names the directory by its descriptor
 * (`at`), so it happens in the directory the walk checked. A temp file left by a failure is
 * removed through the same descriptor, after checking by dev/inode that it is ours.
 */
async function placeAtomically(loc: Located, data: Buffer, args: WriteArgs, mode: number): Promise<void> {
  const tmp = `.${loc.name.slice(0, 200)}.${randomBytes(6).toString("hex")}.kova-tmp`;
  const handle = await open(at(loc.dir, tmp), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode).catch((err: unknown) => {
    throw openError(err, args.path);
  });
  let made: Stats | undefined;
  let tmpGone = false;
  try {
    made = await handle.stat();
    await handle.writeFile(data);
    await handle.sync();
    await handle.close();
    if (args.mode === "create") {
      // link() fails with EEXIST if the name appeared meanwhile: no-clobber without a race.
      await link(at(loc.dir, tmp), at(loc.dir, loc.name)).catch((err: NodeJS.ErrnoException) => {
        throw err.code === "EEXIST" ? new FileExistsError(args.path) : openError(err, args.path);
      });
    } else {
      await rename(at(loc.dir, tmp), at(loc.dir, loc.name)).catch((err: unknown) => {
        throw openError(err, args.path);
      });
      tmpGone = true;
    }
    await loc.dir.sync();
  } finally {
    await handle.close().catch(() => undefined);
    if (!tmpGone && made) await removeIfSame(loc.dir, tmp, made);
  }
}

/** Unlinks `name` in an open directory if it is still the file `made` describes. */
async function removeIfSame(dir: FileHandle, name: string, made: Stats): Promise<void> {
  const now = await lstat(at(dir, name)).catch(() => undefined);
  if (now && now.ino === made.ino && now.dev === made.dev) await unlink(at(dir, name)).catch(() => undefined);
}
