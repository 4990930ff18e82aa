import { cpSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Wal, type CipherAlgorithm, type WalOptions } from "../../src/wal/index.js";
import { decodePayload } from "../../src/wal/codec.js";
import { openDone } from "../../src/wal/completion.js";
import { ChainKey, RecordCipher, resolveKey } from "../../src/wal/crypto.js";
import { openKv } from "../../src/wal/kv-seal.js";
import { parseRecord } from "../../src/wal/record-format.js";
import { openRecord, type Security } from "../../src/wal/record-seal.js";
import { tempWalDir } from "./wal-helpers.js";

// Golden files of each format version, written by test/fixtures/wal/make-golden.mjs when
// that version was new. They are never regenerated: if this test fails, the change broke
// WALs that exist.
interface Manifest {
  formatVersion: number;
  key: string;
  /** From v2: the chain's own key (v1 used `key` for everything). */
  hmacKey?: string;
  salt: string;
  /** From v2: the salt of the open that sealed the single records. */
  openSalt?: string;
  identity: { epoch: number; seq: number; kind: string; owner: string };
  records: Record<string, { security: string; complete: boolean; seq: number; payload: unknown }>;
  done: Record<string, { security: string; epoch: number; seqs: number[] }>;
  kv?: Record<string, { security: string; key: string; value: unknown }>;
  environments: Record<
    string,
    { key: string | null; algorithm?: CipherAlgorithm; hmacKey?: string; complete: number; epoch: number; pending: unknown[]; kv?: Record<string, unknown> }
  >;
}

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

for (const version of ["v1", "v2"]) {
  const dir = join(import.meta.dirname, "../fixtures/wal", version);
  const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) as Manifest;

  describe(`wal golden files (format ${version})`, () => {
    const master = resolveKey(manifest.key);
    const salt = Buffer.from(manifest.salt, "hex");
    const chain = new ChainKey(resolveKey(manifest.hmacKey ?? manifest.key), salt);
    const keyed = (algorithm: CipherAlgorithm): Security => {
      const cipher = new RecordCipher(algorithm, master, salt);
      const session = manifest.openSalt === undefined ? undefined : cipher.session(Buffer.from(manifest.openSalt, "hex"));
      return { cipher, chain: undefined, sessions: () => session };
    };
    const security: Record<string, Security> = {
      none: { cipher: undefined, chain: undefined },
      "aes-256-gcm": keyed("aes-256-gcm"),
      sm4: keyed("sm4"),
      hmac: { cipher: undefined, chain },
      "sm4+hmac": { ...keyed("sm4"), chain },
    };

    it(`golden ${version} - every stored record still parses, authenticates and decodes to the same identity and payload`, () => {
      const names = Object.keys(manifest.records);
      expect(names.length).toBeGreaterThanOrEqual(6);
      for (const name of names) {
        const expected = manifest.records[name]!;
        const r = parseRecord(readFileSync(join(dir, "records", `${name}.bin`)));
        if (!r.ok) throw new Error(`${name}: ${r.reason}`);
        expect(r.record.version, name).toBe(manifest.formatVersion);
        const opened = openRecord(security[expected.security]!, r.record);
        if (!opened.ok) throw new Error(`${name}: ${opened.reason}`);
        // A sealed identity is known once the record is opened.
        expect(r.record, name).toMatchObject({ ...manifest.identity, seq: expected.seq, complete: expected.complete });
        if (!expected.complete) expect(normalise(decodePayload(opened.plaintext!)), name).toEqual(normalise(revive(expected.payload)));
      }
    });

    it(`golden ${version} - every stored completion batch still opens to the same seqs`, () => {
      const names = Object.keys(manifest.done);
      expect(names.length).toBeGreaterThanOrEqual(3);
      for (const name of names) {
        const expected = manifest.done[name]!;
        const sec = security[expected.security]!;
        const key = sec.cipher?.doneKey ?? sec.chain?.doneKey;
        expect(openDone(key, readFileSync(join(dir, "records", `${name}.bin`)), false, sec.sessions), name).toEqual({
          ok: true,
          epoch: expected.epoch,
          seqs: expected.seqs,
        });
      }
    });

    if (manifest.kv !== undefined) {
      it(`golden ${version} - every sealed side-table value still opens to the same value`, () => {
        for (const [name, expected] of Object.entries(manifest.kv!)) {
          const sec = security[expected.security]!;
          const opened = openKv(sec.sessions!, sec.cipher!.kvName(expected.key), readFileSync(join(dir, "records", `${name}.bin`)));
          if (!opened.ok) throw new Error(`${name}: ${opened.reason}`);
          expect(normalise(opened.value), name).toEqual(normalise(revive(expected.value)));
        }
      });
    }

    for (const [name, env] of Object.entries(manifest.environments)) {
      it(`golden ${version} - the LMDB environment ${name} opens and recovers the same report, and takes new records`, async () => {
        const t = tempWalDir("golden");
        cleanups.push(t.cleanup);
        cpSync(join(dir, name), t.dir, { recursive: true });
        const options: Partial<WalOptions> = {
          ...(env.key ? { encryption: { algorithm: env.algorithm!, key: env.key } } : {}),
          ...(env.hmacKey ? { hmac: { key: env.hmacKey } } : {}),
        };
        const wal = await Wal.open({ dir: t.dir, ...options });
        expect(wal.recovery.complete).toBe(env.complete);
        expect(wal.recovery.corrupt).toEqual([]);
        expect(wal.recovery.chainBreaks).toEqual([]);
        expect(wal.recovery.epoch).toBe(env.epoch + 1);
        expect(wal.recovery.pending.map((p) => ({ ...p, status: undefined }))).toEqual((env.pending as object[]).map((p) => ({ ...p, status: undefined })));
        for (const [key, value] of Object.entries(env.kv ?? {})) expect(wal.getKv(key)).toEqual(value);
        // The current format writes into an old environment, and both read back.
        const added = await wal.append("after-upgrade", { n: 1 }, { owner: "c" });
        await wal.close();
        const again = await Wal.open({ dir: t.dir, ...options });
        expect(again.recovery.corrupt).toEqual([]);
        expect(again.recovery.chainBreaks).toEqual([]);
        expect(again.recovery.pending.map((p) => p.seq)).toEqual([...(env.pending as Array<{ seq: number }>).map((p) => p.seq), added]);
        await again.close();
      });
    }
  });
}
