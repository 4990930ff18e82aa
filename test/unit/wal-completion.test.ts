import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/wal/crc32.js";
import { openDone, sealDone, sealDoneSealed } from "../../src/wal/completion.js";
import { RecordCipher } from "../../src/wal/crypto.js";

const key = Buffer.alloc(32, 5);
const seqs = [3, 4, 2 ** 33 + 1, 9];

describe("wal completion batches", () => {
  it("completion - round-trips seqs (past 2^32) with and without a key", () => {
    expect(openDone(undefined, sealDone(undefined, 7, seqs))).toEqual({ ok: true, epoch: 7, seqs });
    expect(openDone(key, sealDone(key, 7, seqs))).toEqual({ ok: true, epoch: 7, seqs });
  });

  it("completion - every bit flip is caught, and the damaged batch still names its seqs when it can", () => {
    const bytes = sealDone(undefined, 1, seqs);
    for (let bit = 0; bit < bytes.length * 8; bit++) {
      const damaged = Buffer.from(bytes);
      damaged[bit >> 3] = damaged[bit >> 3]! ^ (1 << (bit & 7));
      expect(openDone(undefined, damaged).ok, `bit ${bit}`).toBe(false);
    }
    const flipped = Buffer.from(bytes);
    flipped[bytes.length - 1] = flipped[bytes.length - 1]! ^ 1; // CRC only
    expect(openDone(undefined, flipped)).toMatchObject({ ok: false, seqs });
  });

  it("completion - a batch edited with a recomputed CRC fails authentication; a keyed batch needs its key", () => {
    const bytes = sealDone(key, 1, seqs);
    const edited = Buffer.from(bytes);
    edited[19] = edited[19]! ^ 1; // the low byte of the first seq
    edited.writeUInt32BE(crc32(edited.subarray(0, edited.length - 4)), edited.length - 4);
    expect(openDone(key, edited)).toMatchObject({ ok: false, reason: "completion batch authentication failed" });
    expect(openDone(Buffer.alloc(32, 6), bytes).ok).toBe(false);
    expect(openDone(undefined, bytes)).toMatchObject({ ok: false, reason: expect.stringMatching(/no key/) });
    expect(openDone(undefined, bytes, true).ok).toBe(true); // read-only tools without a key
    // An unkeyed batch is refused where a key is configured (a forger has no key).
    expect(openDone(key, sealDone(undefined, 1, seqs)).ok).toBe(false);
  });

  describe.each(["aes-256-gcm", "sm4"] as const)("sealed (%s)", (algorithm) => {
    const cipher = new RecordCipher(algorithm, Buffer.alloc(32, 1), Buffer.alloc(16, 2));
    const session = cipher.session(Buffer.alloc(32, 3));
    const sessions = (epoch: number) => (epoch === 7 ? session : undefined);

    it(`completion - a sealed batch (${algorithm}) round-trips, shows no seq in the clear, and any edit fails even with a recomputed CRC`, () => {
      const bytes = sealDoneSealed(session, 7, 41, seqs);
      expect(openDone(undefined, bytes, false, sessions)).toEqual({ ok: true, epoch: 7, seqs });
      expect(bytes.includes(Buffer.from([0, 0, 0, 2, 0, 0, 0, 1]))).toBe(false); // 2^33 + 1 as a u64
      for (let at = 0; at < bytes.length - 4; at++) {
        const edited = Buffer.from(bytes);
        edited[at] = edited[at]! ^ 0x10;
        edited.writeUInt32BE(crc32(edited.subarray(0, edited.length - 4)), edited.length - 4);
        expect(openDone(undefined, edited, false, sessions).ok, `byte ${at}`).toBe(false);
      }
    });

    it(`completion - a sealed batch (${algorithm}) needs the keys of the open that wrote it; a tool without any key sees it as unread`, () => {
      const bytes = sealDoneSealed(session, 7, 41, seqs);
      expect(openDone(undefined, bytes, false, () => undefined)).toMatchObject({ ok: false, reason: expect.stringMatching(/no key for epoch 7/) });
      expect(openDone(undefined, bytes, false, () => cipher.session(Buffer.alloc(32, 4)))).toMatchObject({
        ok: false,
        reason: "completion batch authentication failed",
      });
      expect(openDone(undefined, bytes, true)).toEqual({ ok: true, epoch: 7, seqs: [], unread: true });
    });
  });
});
