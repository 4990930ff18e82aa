import { randomBytes } from "node:crypto";
import { constants, realpathSync, statSync } from "node:fs";
import { link, lstat, mkdir, open, rename, unlink } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";
import { boolValue, intValue, rejectUnknown, stringValue, type ConfigTable } from "../../core/config-table.js";
import { ConfigError } from "../../core/errors.js";
import { defineTool } from "../define-tool.js";
import { FileExistsError, FileNotFoundError, FilePathRefusedError, FileTooLargeError, FileTypeRefusedError } from "../errors.js";
import { utf8Boundary } from "../result-cap.js";
import type { Tool } from "../types.js";
import { FileRoot, openError, refuseNonRegular } from "./file-root.js";

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
  const real = await root.resolve(args.path);
  const { handle, stats } = await root.openChecked(real, args.path, constants.O_RDONLY);
  try {
    const want = Math.min(args.length ?? config.maxBytes, config.maxBytes, Math.max(0, stats.size - args.offset));
    const buf = Buffer.alloc(want);
    let got = 0;
    while (got < want) {
      const { bytesRead } = await handle.read(buf, got, want - got, args.offset + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    let data = buf.subarray(0, got);
    const more = args.offset + got < stats.size;
    // A text read cut by the cap ends at a character boundary; next_offset resumes there.
    if (args.encoding === "utf8" && more) data = data.subarray(0, utf8Boundary(data, data.length));
    const result: FileReadResult = {
      path: root.display(real),
      size: stats.size,
      offset: args.offset,
      bytes: data.length,
      content: args.encoding === "base64" ? data.toString("base64") : data.toString("utf8"),
      encoding: args.encoding,
      truncated: more,
    };
    if (more) result.next_offset = args.offset + data.length;
    return result;
  } finally {
    await handle.close();
  }
}

async function writeFile(root: FileRoot, config: FileToolConfig, args: WriteArgs): Promise<FileWriteResult> {
  const data = Buffer.from(args.content, args.encoding);
  if (data.length > config.maxBytes) throw new FileTooLargeError(args.path, data.length, config.maxBytes);
  const real = await root.resolve(args.path);
  if (real === root.real) throw new FileTypeRefusedError(args.path, "directory");
  const dir = dirname(real);
  await ensureDir(root, dir, args);
  const existing = await lstat(real).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw openError(err, args.path);
  });
  if (existing) refuseNonRegular(existing, args.path);
  if (existing && args.mode === "create") throw new FileExistsError(args.path);

  // Atomic replace: a temp file in the same directory (same filesystem, so rename is
  // atomic), fsynced before the rename and the directory fsynced after it, so a crash
  // leaves the old file or the new one, never a torn one.
  const tmp = join(dir, `.${basename(real).slice(0, 200)}.${randomBytes(6).toString("hex")}.kova-tmp`);
  const handle = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, existing ? existing.mode & 0o777 : 0o644);
  let renamed = false;
  try {
    await root.verifyDescriptor(handle, tmp, args.path);
    await handle.writeFile(data);
    await handle.sync();
    await handle.close();
    if (args.mode === "create") {
      // link() fails with EEXIST if the name appeared meanwhile: no-clobber without a race.
      await link(tmp, real).catch((err: NodeJS.ErrnoException) => {
        throw err.code === "EEXIST" ? new FileExistsError(args.path) : openError(err, args.path);
      });
      await unlink(tmp);
    } else {
      await rename(tmp, real);
    }
    renamed = true;
    await syncDir(dir);
  } finally {
    await handle.close().catch(() => undefined);
    if (!renamed) await unlink(tmp).catch(() => undefined);
  }
  return { path: root.display(real), bytes: data.length, created: existing === undefined };
}

/** Creates missing directories one level at a time, each checked to be inside the root. */
async function ensureDir(root: FileRoot, dir: string, args: WriteArgs): Promise<void> {
  const st = await lstat(dir).catch(() => undefined);
  if (st?.isDirectory()) return;
  if (st) throw new FilePathRefusedError(args.path, "a part of it that should be a directory is not one");
  if (!args.create_dirs) throw new FileNotFoundError(root.display(dir), "directory", "pass create_dirs: true to create it");
  const missing: string[] = [];
  let current = dir;
  while (!(await lstat(current).catch(() => undefined))) {
    missing.unshift(current);
    current = dirname(current);
  }
  for (const d of missing) {
    await mkdir(d).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "EEXIST") throw err;
    });
    // Re-resolve: a link planted at this name since the check would show up here.
    if ((await root.resolve(d)) !== d || !(await lstat(d)).isDirectory()) {
      throw new FilePathRefusedError(args.path, "a directory on the path changed while it was being created; try again");
    }
  }
}

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
