import { describe, expect, it } from "vitest";
import { verifyWal, Wal, type WalOptions } from "../../src/wal/index.js";
import { walInternals } from "../../src/wal/wal.js";
import { flipBit, recomputeCrc, tamper, walDirs } from "./wal-helpers.js";

const dir = walDirs();

const KEY = `hex:${"11".repeat(32)}`;

/** Writes `count` PENDING records ({ i }) with ringBits 4 and closes; returns their seqs. */
async function seed(d: string, count: number, extra: Partial<WalOptions> = {}): Promise<number[]> {
  const wal = await Wal.open({ dir: d, ringBits: 4, ...extra });
  const seqs: number[] = [];
  for (let i = 0; i < count; i++) seqs.push(await wal.append("step", { i, text: `payload ${i}` }, { owner: `o${i % 2}` }));
  await wal.close();
  return seqs;
}

describe("wal corruption", () => {
  it("wal - a single-bit flip anywhere in a stored record is reported corrupt with its seq and never returned", async () => {
    const d = dir("flip");
    const seqs = await seed(d, 5);
    const target = seqs[2]!;
    let length = 0;
    await tamper(d, (raw) => (length = raw.ring.get(target % 16)!.length));
    // Every bit position of the record: header, kind, payload, CRC.
    const stride = Number(process.env.WAL_FLIP_STRIDE ?? 7); // 1 = every bit (slower)
    for (let bit = 0; bit < length * 8; bit += stride) {
      let original: Buffer | undefined;
      await tamper(d, (raw) => {
        original = raw.ring.get(target % 16)!;
        return raw.ring.put(target % 16, flipBit(original, bit));
      });
      {
        await using wal = await Wal.open({ dir: d });
        expect(
          wal.recovery.corrupt.map((c) => c.seq),
          `bit ${bit}`,
        ).toEqual([target]);
        expect(wal.recovery.pending.map((p) => p.seq)).toEqual(seqs.filter((s) => s !== target));
      }
      // Put the good bytes back (the open quarantined the damaged ones).
      await tamper(d, (raw) => raw.ring.put(target % 16, original!));
    }
  });

  it("wal - truncated records are reported corrupt with the right seq, down to an empty value", async () => {
    const d = dir("trunc");
    const seqs = await seed(d, 4);
    const target = seqs[3]!; // the newest: its seq must come from the header or the ring position
    let original: Buffer = Buffer.alloc(0);
    await tamper(d, (raw) => (original = raw.ring.get(target % 16)!));
    for (const keep of [original.length - 1, original.length - 5, 30, 22, 10, 1, 0]) {
      await tamper(d, (raw) => raw.ring.put(target % 16, original.subarray(0, keep)));
      {
        await using wal = await Wal.open({ dir: d });
        const reported = wal.recovery.corrupt.map((c) => c.seq);
        // With the header gone, the seq a slot must hold is inferred from the ring; for the
        // newest record that is the previous lap (slot 4 → seq 4 - 16 < 1 → 0) unless the
        // header survived. Either way nothing damaged is returned as data.
        if (keep >= 16) expect(reported).toEqual([target]);
        else expect(reported).toHaveLength(1);
        expect(wal.recovery.pending.map((p) => p.seq)).toEqual(seqs.slice(0, 3));
      }
      await tamper(d, (raw) => raw.ring.put(target % 16, original));
    }
  });

  it("wal - a truncated record in the middle of the ring gets its seq from the ring position", async () => {
    const d = dir("trunc-mid");
    const seqs = await seed(d, 6);
    await tamper(d, (raw) => raw.ring.put(seqs[1]! % 16, Buffer.from([0xc7, 1])));
    const wal = await Wal.open({ dir: d });
    expect(wal.recovery.corrupt).toMatchObject([{ seq: seqs[1], slot: seqs[1]! % 16 }]);
    await wal.close();
    const v = verifyWal(d);
    expect(v.ok).toBe(false);
    expect(v.corrupt.map((c) => c.seq)).toEqual([seqs[1]]);
  });

  for (const [mode, opts] of [
    ["aes-256-gcm", { encryption: { algorithm: "aes-256-gcm", key: KEY } }],
    ["sm4", { encryption: { algorithm: "sm4", key: KEY } }],
    ["hmac chain", { hmac: { key: KEY } }],
  ] as Array<[string, Partial<WalOptions>]>) {
    it(`wal - a record edited with a recomputed CRC is caught by ${mode}`, async () => {
      const d = dir("edit");
      const seqs = await seed(d, 3, opts);
      const target = seqs[1]!;
      await tamper(d, (raw) => {
        const b = raw.ring.get(target % 16)!;
        const edited = Buffer.from(b);
        edited[b.length - 30] = edited[b.length - 30]! ^ 0x01; // inside the body/tag/macs
        return raw.ring.put(target % 16, recomputeCrc(edited));
      });
      await using wal = await Wal.open({ dir: d, ...opts });
      expect(wal.recovery.corrupt).toHaveLength(1);
      expect(wal.recovery.corrupt[0]).toMatchObject({ seq: target });
      expect(wal.recovery.corrupt[0]!.reason).toMatch(/authentication|HMAC/);
      expect(wal.recovery.pending.map((p) => p.seq)).toEqual([seqs[0], seqs[2]]);
    });

    it(`wal - a forged COMPLETE flag with a recomputed CRC is caught by ${mode}`, async () => {
      const d = dir("forge");
      const seqs = await seed(d, 2, opts);
      const target = seqs[0]!;
      await tamper(d, (raw) => {
        const b = Buffer.from(raw.ring.get(target % 16)!);
        b[2] = b[2]! | 0x01; // COMPLETE, hoping recovery skips it
        return raw.ring.put(target % 16, recomputeCrc(b));
      });
      const wal = await Wal.open({ dir: d, ...opts });
      expect(wal.recovery.corrupt.map((c) => c.seq)).toEqual([target]);
      expect(wal.recovery.complete).toBe(0);
      await wal.close();
    });
  }

  for (const [mode, opts] of [
    ["no key (CRC)", {}],
    ["aes-256-gcm", { encryption: { algorithm: "aes-256-gcm", key: KEY } }],
    ["hmac chain", { hmac: { key: KEY } }],
  ] as Array<[string, Partial<WalOptions>]>) {
    it(`wal - a damaged or forged completion batch is reported and its records are re-executed, not lost (${mode})`, async () => {
      const d = dir("done");
      const wal = await Wal.open({ dir: d, ringBits: 4, ...opts });
      const a = await wal.append("step", { n: 1 });
      const b = await wal.append("step", { n: 2 });
      await wal.complete(a);
      await wal.complete(b);
      const c = await wal.append("step", { n: 3 });
      await wal.close();
      await tamper(d, async (raw) => {
        const done = raw.env.openDB<Buffer, number>({ name: "done", encoding: "binary" });
        const [first] = [...done.getRange({})];
        const bytes = Buffer.from(first!.value);
        bytes[19] = bytes[19]! ^ 1; // seq a → another seq
        // With a key, recompute the CRC (a forger can); without, leave it (a disk error).
        await done.put(first!.key, "encryption" in opts || "hmac" in opts ? recomputeCrc(bytes) : bytes);
      });
      await using again = await Wal.open({ dir: d, ...opts });
      const damaged = again.recovery.corrupt.filter((x) => x.where === "done");
      if (Object.keys(opts).length === 0) {
        expect(damaged).toHaveLength(1);
        expect(damaged[0]!.reason).toMatch(/CRC32 mismatch/);
      } else {
        expect(damaged).toHaveLength(1);
        expect(damaged[0]!.reason).toMatch(/authentication failed/);
      }
      // a's completion is lost with the batch (b's batch is separate or the same): what
      // is not provably COMPLETE is handed back; nothing is lost.
      const pending = again.recovery.pending.map((p) => p.seq);
      expect(pending).toContain(a);
      expect(pending).toContain(c);
    });
  }

  it("wal - without keys, an edit with a recomputed CRC is undetectable (why wal-hmac exists)", async () => {
    const d = dir("nokey");
    const seqs = await seed(d, 1);
    await tamper(d, (raw) => {
      const b = Buffer.from(raw.ring.get(seqs[0]! % 16)!);
      b[b.length - 6] = b[b.length - 6]! ^ 0x01;
      return raw.ring.put(seqs[0]! % 16, recomputeCrc(b));
    });
    const wal = await Wal.open({ dir: d });
    expect(wal.recovery.corrupt).toEqual([]);
    await wal.close();
  });

  it("wal - a valid record from an earlier lap put back in its slot is stale and ignored", async () => {
    const d = dir("stale");
    const wal = await Wal.open({ dir: d, ringBits: 4 });
    const first = await wal.append("step", { lap: 1 });
    // The lap-1 bytes of seq 1 while it is still PENDING: valid CRC, valid record.
    const old = Buffer.from(walInternals(wal).storage.ring.get(first % 16)!);
    await wal.complete(first);
    const seqs: number[] = [];
    for (let i = 0; i < 19; i++) {
      seqs.push(await wal.append("step", { lap: 2, i }));
      if (i < 16) await wal.complete(seqs[i]!);
    }
    await wal.close();
    // Slot 1 now holds seq 17 (a COMPLETE marker of the current lap); put seq 1 back.
    await tamper(d, (raw) => raw.ring.put(first % 16, old));
    const again = await Wal.open({ dir: d });
    expect(again.recovery.stale).toBe(1);
    expect(again.recovery.pending.map((p) => p.seq)).toEqual(seqs.slice(16));
    expect(again.recovery.pending.some((p) => p.seq === first)).toBe(false);
    expect(again.recovery.corrupt).toEqual([]);
    await again.close();
  });

  it("wal - stop-owner policy withholds the owner's later PENDING records after a corrupt one", async () => {
    const d = dir("policy");
    const seqs = await seed(d, 6); // owners alternate o0, o1
    await tamper(d, (raw) => raw.ring.put(seqs[2]! % 16, flipBit(raw.ring.get(seqs[2]! % 16)!, 200))); // o0
    const wal = await Wal.open({ dir: d, corruptPolicy: "stop-owner" });
    expect(wal.recovery.corrupt.map((c) => c.seq)).toEqual([seqs[2]]);
    expect(wal.recovery.pending.map((p) => p.seq)).toEqual([seqs[0], seqs[1], seqs[3], seqs[5]]);
    expect(wal.recovery.withheld.map((p) => p.seq)).toEqual([seqs[4]]);
    expect(wal.pendingFor("o0").map((p) => p.seq)).toEqual([seqs[0]]);
    await wal.close();
  });

  it("wal - corrupt records stay quarantined and keep failing verify after the open that found them", async () => {
    const d = dir("quarantine");
    const seqs = await seed(d, 3);
    await tamper(d, (raw) => raw.ring.put(seqs[0]! % 16, flipBit(raw.ring.get(seqs[0]! % 16)!, 100)));
    const wal = await Wal.open({ dir: d });
    expect(wal.recovery.corrupt.map((c) => c.seq)).toEqual([seqs[0]]);
    await wal.close();
    const again = await Wal.open({ dir: d });
    expect(again.recovery.corrupt).toEqual([]); // already reported and quarantined
    expect(again.nextSeq).toBe(seqs[2]! + 1);
    await again.close();
    const v = verifyWal(d);
    expect(v.ok).toBe(false);
    expect(v.corrupt[0]).toMatchObject({ seq: seqs[0] });
  });
});
