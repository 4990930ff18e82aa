import { describe, expect, it } from "vitest";
import { verifyWal, Wal } from "../../src/wal/index.js";
import { parseRecord } from "../../src/wal/record-format.js";
import type { ChainHead } from "../../src/wal/storage.js";
import { walInternals } from "../../src/wal/wal.js";
import { tamper, walDirs, type RawWal } from "./wal-helpers.js";

const dir = walDirs();

const HKEY = `hex:${"ab".repeat(32)}`;

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

  /** Deletes the two newest records, then writes back a head naming the newest survivor, as its record gives it. */
  async function truncateAndRewriteHead(raw: RawWal, seqs: number[], head: (h: ChainHead, mac: string) => ChainHead | undefined): Promise<void> {
    const survivor = parseRecord(Buffer.from(raw.ring.get(seqs[7]! % 16)!));
    if (!survivor.ok) throw new Error(survivor.reason);
    await raw.ring.remove(seqs[9]! % 16);
    await raw.ring.remove(seqs[8]! % 16);
    const next = head(raw.meta.get("head") as ChainHead, survivor.record.mac!.toString("hex"));
    await (next === undefined ? raw.meta.remove("head") : raw.meta.put("head", next));
  }

  for (const [how, rewrite] of [
    ["rewritten keeping the old tag", (h: ChainHead, mac: string) => ({ ...h, seq: 8, mac })],
    ["rewritten without a tag, as before format v2", (_h: ChainHead, mac: string) => ({ seq: 8, mac })],
    ["deleted", () => undefined],
  ] as const) {
    it(`wal - truncating the newest records is reported even when the chain head is made to match: head ${how}`, async () => {
      const d = dir("rewritten-head");
      const seqs = await seed(d);
      expect(seqs[7]).toBe(8);
      await tamper(d, (raw) => truncateAndRewriteHead(raw, seqs, rewrite));
      const v = verifyWal(d, { hmacKey: HKEY });
      expect(v.ok).toBe(false);
      expect(v.chainBreaks).toEqual([{ seq: 8, reason: expect.stringMatching(/chain head (fails authentication|has no tag|is missing)/) }]);
      const wal = await Wal.open({ dir: d, hmac: { key: HKEY } });
      expect(wal.recovery.chainBreaks.map((b) => b.reason)).toEqual(v.chainBreaks.map((b) => b.reason));
      await wal.close();
    });
  }

  it("wal - the chain covers overflow records: completing them keeps it whole, deleting one (a PENDING record) is reported", async () => {
    const d = dir("overflow");
    const wal = await Wal.open({ dir: d, ringBits: 3, maxPending: 100, hmac: { key: HKEY } });
    const { storage } = walInternals(wal);
    const seqs: number[] = [];
    for (let i = 0; i < 20; i++) seqs.push(await wal.append("step", { i }));
    for (const seq of seqs.filter((s) => s % 4 === 0)) await wal.complete(seq); // some of them from overflow
    const inOverflow = () => [...storage.overflow.getKeys({})] as number[];
    expect(inOverflow().length).toBeGreaterThan(3);
    await wal.close();
    expect(verifyWal(d, { hmacKey: HKEY })).toMatchObject({ ok: true, chainBreaks: [] });

    const again = await Wal.open({ dir: d, hmac: { key: HKEY } });
    expect(again.recovery.chainBreaks).toEqual([]);
    const victim = again.pendingRecords().find((r) => r.seq < seqs.length - 8)!.seq; // a PENDING record in overflow
    await again.close();
    await tamper(d, (raw) => raw.overflow.remove(victim));
    const v = verifyWal(d, { hmacKey: HKEY });
    expect(v.ok).toBe(false);
    expect(v.chainBreaks).toEqual([{ seq: seqs.at(-1), reason: expect.stringMatching(/overflow record was deleted or added/) }]);
    const reopened = await Wal.open({ dir: d, hmac: { key: HKEY } });
    expect(reopened.recovery.chainBreaks.map((b) => b.reason)).toEqual(v.chainBreaks.map((b) => b.reason));
    expect(reopened.recovery.pending.some((p) => p.seq === victim)).toBe(false);
    await reopened.close();
  });

  it("wal - a wrong hmac key is WAL_BAD_KEY; without a key, verify says the chain was not checked", async () => {
    const d = dir("key");
    await seed(d);
    expect(() => verifyWal(d, { hmacKey: `hex:${"cd".repeat(32)}` })).toThrow(/wrong WAL hmac key/);
    await expect(Wal.open({ dir: d })).rejects.toMatchObject({ code: "WAL_BAD_KEY" });
    const v = verifyWal(d);
    expect(v.ok).toBe(true);
    expect(v.notes.join()).toMatch(/not checked/);
  });
});
