import { mkdtempSync, rmSync } from "node:fs";
import { open, type Database, type RootDatabase } from "lmdb";
import { afterEach } from "vitest";
import { crc32 } from "../../src/wal/crc32.js";
import { defer } from "../fixtures/disposable.js";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A fresh temp directory for a WAL (`dir`, not yet created), removed by `cleanup` or at the end of a `using` scope. */
export function tempWalDir(label: string): { dir: string; cleanup(): void } & Disposable {
  const base = mkdtempSync(join(tmpdir(), `kova-wal-${label}-`));
  const cleanup = () => rmSync(base, { recursive: true, force: true });
  return { dir: join(base, "wal"), cleanup, [Symbol.dispose]: cleanup };
}

/** Registers cleanup after each test and returns a maker of fresh WAL directories. */
export function walDirs(): (label: string) => string {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });
  return (label) => {
    const t = tempWalDir(label);
    cleanups.push(t.cleanup);
    return t.dir;
  };
}

export interface RawWal {
  env: RootDatabase;
  ring: Database<Buffer, number>;
  overflow: Database<Buffer, number>;
  meta: Database<unknown, string>;
}

/**
 * Opens a closed WAL's LMDB environment directly (no WAL code) to damage it the way a
 * disk or an attacker would, then closes it. Writes inside `fn` are awaited.
 */
export async function tamper(dir: string, fn: (raw: RawWal) => Promise<unknown> | unknown): Promise<void> {
  const env = open({ path: dir, maxDbs: 8 });
  const raw: RawWal = {
    env,
    ring: env.openDB<Buffer, number>({ name: "ring", keyEncoding: "uint32", encoding: "binary" }),
    overflow: env.openDB<Buffer, number>({ name: "overflow", encoding: "binary" }),
    meta: env.openDB<unknown, string>({ name: "meta" }),
  };
  await using _env = defer(() => env.close());
  await fn(raw);
  await env.flushed;
}

/** Flips one bit of a copy of `bytes`. */
export function flipBit(bytes: Buffer, bit: number): Buffer {
  const out = Buffer.from(bytes);
  out[bit >> 3] = out[bit >> 3]! ^ (1 << (bit & 7));
  return out;
}

/** Rewrites the trailing CRC so that only authentication can notice an edit. */
export function recomputeCrc(bytes: Buffer): Buffer {
  const out = Buffer.from(bytes);
  out.writeUInt32BE(crc32(out.subarray(0, out.length - 4)), out.length - 4);
  return out;
}
