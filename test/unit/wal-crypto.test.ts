import { describe, expect, it } from "vitest";
import { ErrorCode } from "../../src/core/errors.js";
import { crc32 } from "../../src/wal/crc32.js";
import { ChainKey, RecordCipher, resolveKey } from "../../src/wal/crypto.js";
import { encodePayload } from "../../src/wal/codec.js";
import { parseRecord, type ParsedRecord } from "../../src/wal/record-format.js";
import { openRecord, sealData, sealMarker, type Security } from "../../src/wal/record-seal.js";
import { openKv, sealKv } from "../../src/wal/kv-seal.js";

const salt = Buffer.alloc(16, 1);
const master = Buffer.alloc(32, 9);
const id = { epoch: 1, seq: 42, kind: "step", owner: "a" };

function parsed(bytes: Buffer): ParsedRecord {
  const r = parseRecord(bytes);
  if (!r.ok) throw new Error(r.reason);
  return r.record;
}

/** A security context whose every epoch has the keys of one open with this salt. */
function withSession(algorithm: "aes-256-gcm" | "sm4", openSalt: Buffer, key = master): Security {
  const cipher = new RecordCipher(algorithm, key, salt);
  const session = cipher.session(openSalt);
  return { cipher, chain: undefined, sessions: () => session };
}

describe.each(["aes-256-gcm", "sm4"] as const)("wal crypto %s", (algorithm) => {
  const sec = withSession(algorithm, Buffer.alloc(32, 3));

  it(`${algorithm} - seals and opens; the nonce is (RECORD, seq) under the open's own key, so equal plaintexts differ across seqs and across opens`, () => {
    const payload = encodePayload({ secret: "s" });
    const a = parsed(sealData(sec, id, payload, undefined).bytes);
    const b = parsed(sealData(sec, { ...id, seq: 43 }, payload, undefined).bytes);
    // Another open (say, of a restored backup) with the same epoch and seq: another key.
    const c = parsed(sealData(withSession(algorithm, Buffer.alloc(32, 4)), id, payload, undefined).bytes);
    const again = parsed(sealData(sec, id, payload, undefined).bytes);
    expect(a.body.equals(b.body)).toBe(false);
    expect(a.body.equals(c.body)).toBe(false);
    expect(a.body.equals(again.body)).toBe(true); // deterministic under one open's key and seq
    expect(openRecord(sec, a)).toEqual({ ok: true, plaintext: Buffer.from(payload) });
    expect(a).toMatchObject({ version: 2, kind: id.kind, owner: id.owner });
  });

  it(`${algorithm} - kind and owner are sealed with the payload: not in the stored bytes, and unknown without the key`, () => {
    const bytes = sealData(sec, { ...id, kind: "kind-marker-7f3a", owner: "owner-marker-9c1e" }, encodePayload(1), undefined).bytes;
    expect(bytes.includes(Buffer.from("kind-marker-7f3a"))).toBe(false);
    expect(bytes.includes(Buffer.from("owner-marker-9c1e"))).toBe(false);
    const keyless = parsed(bytes);
    expect(keyless).toMatchObject({ kind: "(sealed)", owner: undefined });
    const rec = parsed(bytes);
    expect(openRecord(sec, rec).ok).toBe(true);
    expect(rec).toMatchObject({ kind: "kind-marker-7f3a", owner: "owner-marker-9c1e" });
  });

  it(`${algorithm} - a record of an open whose salt is unknown, or sealed under another open's key, does not open`, () => {
    const rec = parsed(sealData(sec, id, encodePayload(1), undefined).bytes);
    expect(openRecord({ ...sec, sessions: () => undefined }, rec)).toMatchObject({ ok: false, reason: expect.stringMatching(/no key for epoch 1/) });
    expect(openRecord(withSession(algorithm, Buffer.alloc(32, 5)), rec)).toMatchObject({ ok: false, reason: expect.stringMatching(/authentication failed/) });
  });

  it(`${algorithm} - an edit anywhere (header/AAD, body, tag) with a recomputed CRC is rejected`, () => {
    const bytes = sealData(sec, id, encodePayload({ secret: "s" }), undefined).bytes;
    let rejected = 0;
    for (let at = 0; at < bytes.length - 4; at++) {
      const edited = Buffer.from(bytes);
      edited[at] = edited[at]! ^ 0x80;
      edited.writeUInt32BE(crc32(edited.subarray(0, edited.length - 4)), edited.length - 4);
      const r = parseRecord(edited);
      if (!r.ok || !openRecord(sec, r.record).ok) rejected++;
    }
    expect(rejected).toBe(bytes.length - 4);
  });

  it(`${algorithm} - a completion marker is authenticated`, () => {
    const marker = Buffer.from(sealMarker(sec, id, undefined));
    expect(openRecord(sec, parsed(marker)).ok).toBe(true);
    const other = withSession(algorithm, Buffer.alloc(32, 3), Buffer.alloc(32, 8));
    expect(openRecord(other, parsed(marker))).toMatchObject({ ok: false, reason: expect.stringMatching(/marker/) });
  });
});

describe("wal keys and chain", () => {
  it("resolveKey - accepts hex:, base64: and passphrases; refuses short material", () => {
    expect(resolveKey(`hex:${"ab".repeat(16)}`)).toEqual(Buffer.alloc(16, 0xab));
    expect(resolveKey(`base64:${Buffer.alloc(20, 3).toString("base64")}`)).toEqual(Buffer.alloc(20, 3));
    expect(resolveKey("a long enough passphrase").toString()).toBe("a long enough passphrase");
    expect(() => resolveKey("short")).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_CONFIG }));
  });

  it("HKDF - subkeys differ per purpose and per salt; check values identify the key", () => {
    const a = new RecordCipher("aes-256-gcm", master, salt);
    const b = new RecordCipher("aes-256-gcm", master, Buffer.alloc(16, 2));
    const s = new RecordCipher("sm4", master, salt);
    expect(a.checkValue.equals(b.checkValue)).toBe(false);
    expect(a.markerTag(1, 2).equals(s.markerTag(1, 2))).toBe(false);
    expect(a.markerTag(1, 2).equals(a.markerTag(1, 3))).toBe(false);
    expect(a.markerTag(1, 2).equals(a.markerTag(2, 2))).toBe(false);
    expect(new ChainKey(master, salt).checkValue.equals(a.checkValue)).toBe(false);
  });

  it("chain - each mac covers the previous one; an edited record breaks its own mac", () => {
    const sec: Security = { cipher: undefined, chain: new ChainKey(master, salt) };
    const r1 = sealData(sec, id, encodePayload(1), undefined);
    const r2 = sealData(sec, { ...id, seq: 43 }, encodePayload(2), r1.mac);
    expect(parsed(r2.bytes).prevMac!.equals(r1.mac!)).toBe(true);
    expect(openRecord(sec, parsed(r2.bytes)).ok).toBe(true);
    const edited = Buffer.from(r2.bytes);
    edited[30] = edited[30]! ^ 1;
    edited.writeUInt32BE(crc32(edited.subarray(0, edited.length - 4)), edited.length - 4);
    expect(openRecord(sec, parsed(edited))).toMatchObject({ ok: false, reason: expect.stringMatching(/HMAC/) });
  });
});

describe.each(["aes-256-gcm", "sm4"] as const)("wal side table sealing %s", (algorithm) => {
  const cipher = new RecordCipher(algorithm, master, salt);
  const session = cipher.session(Buffer.alloc(32, 6));
  const sessions = () => session;

  it(`kv - ${algorithm}: a value round-trips under its hashed key name; under another name, or edited, it does not open`, () => {
    const name = cipher.kvName("actors/a1/checkpoint");
    expect(name.includes(Buffer.from("a1"))).toBe(false);
    expect(name.equals(cipher.kvName("actors/a1/checkpoint"))).toBe(true);
    expect(name.equals(new RecordCipher(algorithm, Buffer.alloc(32, 8), salt).kvName("actors/a1/checkpoint"))).toBe(false);
    const sealed = sealKv(session, 3, 9, name, { state: "secret-state" });
    expect(sealed.includes(Buffer.from("secret-state"))).toBe(false);
    expect(openKv(sessions, name, sealed)).toEqual({ ok: true, value: { state: "secret-state" } });
    expect(openKv(sessions, cipher.kvName("actors/a2/checkpoint"), sealed)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/authentication failed/),
    });
    const edited = Buffer.from(sealed);
    edited[20] = edited[20]! ^ 1;
    expect(openKv(sessions, name, edited).ok).toBe(false);
    expect(openKv(() => undefined, name, sealed)).toMatchObject({ ok: false, reason: "no key for epoch 3" });
  });
});
