import { cpSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Wal, type CipherAlgorithm } from "../../src/wal/index.js";
import { parseRecord, type ParsedRecord } from "../../src/wal/record-format.js";
import { tamper, walDirs } from "./wal-helpers.js";

const dir = walDirs();
const KEY = `hex:${"9d".repeat(32)}`;
const PAYLOAD = { text: "the same plaintext in both copies" };

/** The stored records of `seqs` (ring of 2^4) and the salts of the opens table, read without WAL code. */
async function readRaw(d: string, seqs: number[]): Promise<{ records: ParsedRecord[]; salts: Map<number, Buffer> }> {
  const records: ParsedRecord[] = [];
  const salts = new Map<number, Buffer>();
  await tamper(d, (raw) => {
    for (const seq of seqs) {
      const r = parseRecord(Buffer.from(raw.ring.get(seq % 16)!));
      if (!r.ok) throw new Error(r.reason);
      records.push(r.record);
    }
    const opens = raw.env.openDB<Buffer, number>({ name: "opens", keyEncoding: "uint32", encoding: "binary" });
    for (const { key, value } of opens.getRange({})) salts.set(key, Buffer.from(value));
  });
  return { records, salts };
}

async function appendSame(d: string, algorithm: CipherAlgorithm): Promise<number[]> {
  const wal = await Wal.open({ dir: d, ringBits: 4, encryption: { algorithm, key: KEY } });
  const seqs: number[] = [];
  for (let i = 0; i < 5; i++) seqs.push(await wal.append("step", PAYLOAD, { owner: "agent-1" }));
  await wal.close();
  return seqs;
}

describe.each(["aes-256-gcm", "sm4"] as CipherAlgorithm[])("wal nonces with %s", (algorithm) => {
  it(`wal - ${algorithm}: a data dir restored from a backup never reuses a nonce: the same epoch and seq in both copies are sealed under different keys`, async () => {
    const original = dir("original");
    const restored = dir("restored");
    const wal = await Wal.open({ dir: original, ringBits: 4, encryption: { algorithm, key: KEY } });
    for (let i = 0; i < 3; i++) await wal.append("step", { before: i });
    await wal.close();
    cpSync(original, restored, { recursive: true }); // the backup, restored (or copied elsewhere) later

    // Both copies go on from the same state: same epoch (2), same seqs, same plaintexts.
    const seqsA = await appendSame(original, algorithm);
    const seqsB = await appendSame(restored, algorithm);
    expect(seqsB).toEqual(seqsA);
    const a = await readRaw(original, seqsA);
    const b = await readRaw(restored, seqsB);
    for (let i = 0; i < seqsA.length; i++) {
      expect(b.records[i]!.epoch).toBe(a.records[i]!.epoch);
      expect(b.records[i]!.seq).toBe(a.records[i]!.seq);
      // Under one key and one nonce, equal plaintexts would give equal ciphertexts (and
      // the XOR of two ciphertexts would be the XOR of their plaintexts).
      expect(b.records[i]!.body.equals(a.records[i]!.body), `seq ${seqsA[i]}`).toBe(false);
    }
    // Each copy drew its own salt for epoch 2; epoch 1 (before the copy) is shared.
    expect(a.salts.get(2)!.length).toBe(32);
    expect(a.salts.get(2)!.equals(b.salts.get(2)!)).toBe(false);
    expect(a.salts.get(1)!.equals(b.salts.get(1)!)).toBe(true);

    // Both still read back in full.
    for (const d of [original, restored]) {
      const again = await Wal.open({ dir: d, encryption: { algorithm, key: KEY } });
      expect(again.recovery.corrupt).toEqual([]);
      expect(again.recovery.pending).toHaveLength(8);
      await again.close();
    }
  });
});

describe("wal nonces", () => {
  it("wal - every open draws a new salt, and an epoch rolled back in the meta does not bring an earlier epoch (or its keys) back", async () => {
    const d = dir("opens");
    for (let i = 1; i <= 3; i++) {
      const wal = await Wal.open({ dir: d, ringBits: 4, encryption: { algorithm: "aes-256-gcm", key: KEY } });
      expect(wal.epoch).toBe(i);
      await wal.append("step", { epoch: i });
      await wal.close();
    }
    const { salts } = await readRaw(d, []);
    expect([...salts.keys()]).toEqual([1, 2, 3]);
    expect(new Set([...salts.values()].map((s) => s.toString("hex"))).size).toBe(3);

    // Someone puts an old meta back (epoch 0): the opens table still knows epoch 3 was used.
    await tamper(d, (raw) => raw.meta.put("wal", { ...(raw.meta.get("wal") as object), epoch: 0 }));
    {
      await using wal = await Wal.open({ dir: d, encryption: { algorithm: "aes-256-gcm", key: KEY } });
      expect(wal.epoch).toBe(4);
      expect(wal.recovery.pending.map((p) => p.payload)).toEqual([{ epoch: 1 }, { epoch: 2 }, { epoch: 3 }]);
    }
    const after = await readRaw(d, []);
    expect(after.salts.get(3)!.equals(salts.get(3)!)).toBe(true); // earlier opens' keys untouched
    expect(after.salts.size).toBe(4);
  });
});
