import { describe, expect, it } from "vitest";
import { verifyWal, Wal } from "../../src/wal/index.js";
import { tamper, walDirs } from "./wal-helpers.js";

const dir = walDirs();

const HKEY = "hex:" + "ab".repeat(32);

/** Ten records, ring of 16, every other one COMPLETE; returns the seqs. */
async function seed(d: string): Promise<number[]> {
  const wal = await Wal.open({ dir: d, ringBits: 4, hmac: { key: HKEY } });
  const seqs: number[] = [];
  for (let i = 0; i < 10; i++) {
    const seq = await wal.append("step", { i });
    seqs.push(seq);
    if (i % 2 === 0) await wal.complete(seq);
  }
  await wal.close();
  return seqs;
}

describe("wal hmac chain", () => {
  it("wal - an intact chain verifies, through COMPLETE markers and across reopen", async () => {
    const d = dir("ok");
    await seed(d);
    const wal = await Wal.open({ dir: d, hmac: { key: HKEY } });
    expect(wal.recovery.chainBreaks).toEqual([]);
    await wal.append("step", { after: "reopen" });
    await wal.close();
    expect(verifyWal(d, { hmacKey: HKEY })).toMatchObject({ ok: true, chainBreaks: [], corrupt: [] });
  });

  it("wal - a deleted record is reported where the chain breaks", async () => {
    const d = dir("deleted");
    const seqs = await seed(d);
    await tamper(d, (raw) => raw.ring.remove(seqs[4]! % 16));
    const v = verifyWal(d, { hmacKey: HKEY });
    expect(v.ok).toBe(false);
    expect(v.chainBreaks).toEqual([{ seq: seqs[4], reason: expect.stringMatching(/missing/) }]);
    const wal = await Wal.open({ dir: d, hmac: { key: HKEY } });
    expect(wal.recovery.chainBreaks.map((b) => b.seq)).toEqual([seqs[4]]);
    await wal.close();
  });

  it("wal - swapped (reordered) records are reported", async () => {
    const d = dir("reordered");
    const seqs = await seed(d);
    await tamper(d, async (raw) => {
      const a = raw.ring.get(seqs[3]! % 16)!;
      const b = raw.ring.get(seqs[5]! % 16)!;
      await raw.ring.put(seqs[3]! % 16, b);
      await raw.ring.put(seqs[5]! % 16, a);
    });
    const v = verifyWal(d, { hmacKey: HKEY });
    expect(v.ok).toBe(false);
    expect(v.chainBreaks.map((b) => b.seq)).toEqual([seqs[3], seqs[5]]);
  });

  it("wal - a truncated tail (newest records deleted) is reported against the chain head", async () => {
    const d = dir("truncated");
    const seqs = await seed(d);
    await tamper(d, async (raw) => {
      await raw.ring.remove(seqs[9]! % 16);
      await raw.ring.remove(seqs[8]! % 16);
    });
    const v = verifyWal(d, { hmacKey: HKEY });
    expect(v.ok).toBe(false);
    expect(v.chainBreaks).toEqual([{ seq: seqs[8], reason: expect.stringMatching(/truncated/) }]);
  });

  it("wal - a wrong hmac key is WAL_BAD_KEY; without a key, verify says the chain was not checked", async () => {
    const d = dir("key");
    await seed(d);
    expect(() => verifyWal(d, { hmacKey: "hex:" + "cd".repeat(32) })).toThrow(/wrong WAL hmac key/);
    await expect(Wal.open({ dir: d })).rejects.toMatchObject({ code: "WAL_BAD_KEY" });
    const v = verifyWal(d);
    expect(v.ok).toBe(true);
    expect(v.notes.join()).toMatch(/not checked/);
  });
});
