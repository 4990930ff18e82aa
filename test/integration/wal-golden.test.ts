import { cpSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Wal } from "../../src/wal/index.js";
import { decodePayload } from "../../src/wal/codec.js";
import { openDone } from "../../src/wal/completion.js";
import { ChainKey, RecordCipher, resolveKey } from "../../src/wal/crypto.js";
import { parseRecord } from "../../src/wal/record-format.js";
import { openRecord, type Security } from "../../src/wal/record-seal.js";
import { tempWalDir } from "./wal-helpers.js";

// Golden files of format version 1, written by test/fixtures/wal/make-golden.mjs. They
// are never regenerated for v1: if this test fails, the change broke old WALs.
const V1 = join(import.meta.dirname, "../fixtures/wal/v1");
interface Manifest {
  formatVersion: number;
  key: string;
  salt: string;
  identity: { epoch: number; seq: number; kind: string; owner: string };
  records: Record<string, { security: string; complete: boolean; seq: number; payload: unknown }>;
  done: Record<string, { security: string; epoch: number; seqs: number[] }>;
  environments: Record<string, { key: string | null; algorithm?: "aes-256-gcm"; complete: number; epoch: number; pending: unknown[] }>;
}
const manifest = JSON.parse(readFileSync(join(V1, "manifest.json"), "utf8")) as Manifest;

/** JSON turned Buffers into { type, data }; turn them back for comparison. */
function revive(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(revive);
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    if (o.type === "Buffer" && Array.isArray(o.data)) return new Uint8Array(o.data as number[]);
    return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, revive(x)]));
  }
  return v;
}

function normalise(v: unknown): unknown {
  if (v instanceof Uint8Array) return new Uint8Array(v);
  if (Array.isArray(v)) return v.map(normalise);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, normalise(x)]));
  return v;
}

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

describe("wal golden files (format v1)", () => {
  const master = resolveKey(manifest.key);
  const salt = Buffer.from(manifest.salt, "hex");
  const security: Record<string, Security> = {
    none: { cipher: undefined, chain: undefined },
    "aes-256-gcm": { cipher: new RecordCipher("aes-256-gcm", master, salt), chain: undefined },
    sm4: { cipher: new RecordCipher("sm4", master, salt), chain: undefined },
    hmac: { cipher: undefined, chain: new ChainKey(master, salt) },
  };

  it("golden - every stored v1 record still parses, authenticates and decodes to the same payload", () => {
    const names = Object.keys(manifest.records);
    expect(names.length).toBeGreaterThanOrEqual(7);
    for (const name of names) {
      const expected = manifest.records[name]!;
      const r = parseRecord(readFileSync(join(V1, "records", `${name}.bin`)));
      if (!r.ok) throw new Error(`${name}: ${r.reason}`);
      expect(r.record.version, name).toBe(1);
      expect(r.record, name).toMatchObject({ ...manifest.identity, seq: expected.seq, complete: expected.complete });
      const opened = openRecord(security[expected.security]!, r.record);
      if (!opened.ok) throw new Error(`${name}: ${opened.reason}`);
      if (!expected.complete) expect(normalise(decodePayload(opened.plaintext!)), name).toEqual(normalise(revive(expected.payload)));
    }
  });

  it("golden - every stored v1 completion batch still opens to the same seqs", () => {
    const names = Object.keys(manifest.done);
    expect(names.length).toBeGreaterThanOrEqual(3);
    for (const name of names) {
      const expected = manifest.done[name]!;
      const sec = security[expected.security]!;
      const key = sec.cipher?.doneKey ?? sec.chain?.doneKey;
      expect(openDone(key, readFileSync(join(V1, "records", `${name}.bin`))), name).toEqual({ ok: true, epoch: expected.epoch, seqs: expected.seqs });
    }
  });

  for (const [name, env] of Object.entries(manifest.environments)) {
    it(`golden - the v1 LMDB environment ${name} opens and recovers the same report`, async () => {
      const t = tempWalDir("golden");
      cleanups.push(t.cleanup);
      cpSync(join(V1, name), t.dir, { recursive: true });
      const wal = await Wal.open({ dir: t.dir, ...(env.key ? { encryption: { algorithm: env.algorithm!, key: env.key } } : {}) });
      expect(wal.recovery.complete).toBe(env.complete);
      expect(wal.recovery.corrupt).toEqual([]);
      expect(wal.recovery.epoch).toBe(env.epoch + 1);
      expect(wal.recovery.pending.map((p) => ({ ...p, status: undefined }))).toEqual(
        (env.pending as object[]).map((p) => ({ ...p, status: undefined })),
      );
      await wal.close();
    });
  }
});
