import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/wal/crc32.js";
import { CipherId, FORMAT_VERSION, parseRecord, RECORD_MAGIC } from "../../src/wal/record-format.js";
import { sealData, sealMarker } from "../../src/wal/record-seal.js";
import { encodePayload, decodePayload } from "../../src/wal/codec.js";

const plain = { cipher: undefined, chain: undefined };
const id = { epoch: 3, seq: 2 ** 40 + 5, kind: "tool-call", owner: "agent-α" };

describe("wal record format", () => {
  it("crc32 - is unsigned CRC-32/IEEE (check value of '123456789' is 0xCBF43926)", () => {
    expect(crc32(Buffer.from("123456789"))).toBe(0xcbf43926);
    expect(crc32(Buffer.from([0xff, 0xff, 0xff, 0xff]))).toBeGreaterThan(0); // never negative
  });

  it("record - round-trips header fields, a seq past 2^32 and a UTF-8 owner", () => {
    const { bytes } = sealData(plain, id, encodePayload({ a: [1, 2] }), undefined);
    expect(bytes[0]).toBe(RECORD_MAGIC);
    expect(bytes[1]).toBe(FORMAT_VERSION);
    const r = parseRecord(bytes);
    if (!r.ok) throw new Error(r.reason);
    expect(r.record).toMatchObject({ ...id, complete: false, marker: false, cipher: CipherId.NONE, chained: false });
    expect(decodePayload(r.record.body)).toEqual({ a: [1, 2] });
  });

  it("record - a completion marker keeps the identity, has no body and is COMPLETE", () => {
    const r = parseRecord(sealMarker(plain, id, undefined));
    if (!r.ok) throw new Error(r.reason);
    expect(r.record).toMatchObject({ ...id, complete: true, marker: true });
    expect(r.record.body.length).toBe(0);
  });

  it("record - every single-bit flip is caught by the CRC", () => {
    const { bytes } = sealData(plain, id, encodePayload({ text: "hello" }), undefined);
    for (let bit = 0; bit < bytes.length * 8; bit++) {
      const damaged = Buffer.from(bytes);
      damaged[bit >> 3] = damaged[bit >> 3]! ^ (1 << (bit & 7));
      const r = parseRecord(damaged);
      expect(r.ok, `bit ${bit}`).toBe(false);
    }
  });

  it("record - every truncation fails, and the seq is still read while the header survives", () => {
    const { bytes } = sealData(plain, id, encodePayload({ text: "hello" }), undefined);
    for (let keep = 0; keep < bytes.length; keep++) {
      const r = parseRecord(bytes.subarray(0, keep));
      expect(r.ok, `keep ${keep}`).toBe(false);
      if (!r.ok && keep >= 22) expect(r.seq).toBe(id.seq);
    }
  });

  it("record - an unknown format version is reported, not misread", () => {
    const { bytes } = sealData(plain, id, encodePayload(1), undefined);
    const v9 = Buffer.from(bytes);
    v9[1] = 9;
    v9.writeUInt32BE(crc32(v9.subarray(0, v9.length - 4)), v9.length - 4);
    const r = parseRecord(v9);
    expect(r).toMatchObject({ ok: false, reason: "unknown format version 9" });
  });

  it("record - rejects an empty or over-long kind before anything is written", () => {
    expect(() => sealData(plain, { ...id, kind: "" }, encodePayload(1), undefined)).toThrow(RangeError);
    expect(() => sealData(plain, { ...id, kind: "k".repeat(256) }, encodePayload(1), undefined)).toThrow(RangeError);
  });

  it("record - version 2 refuses what only version 1 had: a COMPLETE or MARKER flag, and (with a cipher) kind or owner in the clear", () => {
    const { bytes } = sealData(plain, id, encodePayload(1), undefined);
    const flagged = Buffer.from(bytes);
    flagged[2] = flagged[2]! | 0x01;
    flagged.writeUInt32BE(crc32(flagged.subarray(0, flagged.length - 4)), flagged.length - 4);
    expect(parseRecord(flagged)).toMatchObject({ ok: false, reason: expect.stringMatching(/COMPLETE or MARKER/) });
    const claimsCipher = Buffer.from(bytes);
    claimsCipher[2] = claimsCipher[2]! | (CipherId.AES_256_GCM << 2);
    claimsCipher.writeUInt32BE(crc32(claimsCipher.subarray(0, claimsCipher.length - 4)), claimsCipher.length - 4);
    expect(parseRecord(claimsCipher)).toMatchObject({ ok: false, reason: expect.stringMatching(/kind or owner in the clear/) });
    // The same marker bytes as version 1 are fine.
    expect(parseRecord(sealMarker(plain, id, undefined))).toMatchObject({ ok: true, record: { version: 1, marker: true } });
  });
});
