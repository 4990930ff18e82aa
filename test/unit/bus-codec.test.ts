import { pack } from "msgpackr";
import { headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import {
  DecodeError,
  PayloadTooLargeError,
  createEnvelope,
  decodeEnvelope,
  decodeValue,
  encodeEnvelope,
  encodeValue,
  encodingOf,
} from "../../src/bus/index.js";
import { scanMsgpack } from "../../src/bus/msgpack-scan.js";

const limits = { maxBytes: 4096, maxDepth: 8 };

function nested(depth: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = i % 2 ? [v] : { k: v };
  return v;
}

describe("bus codec", () => {
  it("codec - round-trips an envelope through msgpack and JSON", () => {
    const env = createEnvelope({ from: "a", to: "b", type: "task_delegate", payload: { text: "héllo", n: 2 ** 40, list: [1, null, true], bin: "x" } });
    expect(decodeEnvelope(encodeEnvelope(env))).toEqual(env);
    const h = headers();
    h.set("Content-Type", "application/json; charset=utf-8");
    expect(encodingOf(h)).toBe("json");
    expect(decodeEnvelope(encodeEnvelope(env, "json"), h)).toEqual(env);
  });

  it("codec - the header name is matched case-insensitively and absence means msgpack", () => {
    const h = headers();
    h.set("content-type", "application/json");
    expect(encodingOf(h)).toBe("json");
    expect(encodingOf(undefined)).toBe("msgpack");
    const m = headers();
    m.set("Content-Type", "application/msgpack");
    expect(encodingOf(m)).toBe("msgpack");
  });

  it("codec - msgpack is plain msgpack, without msgpackr records", () => {
    const bytes = encodeValue({ a: 1, b: [2] });
    // fixmap with 2 entries, not the 0xd4 record extension
    expect(bytes[0]).toBe(0x82);
  });

  it("codec - rejects nesting deeper than the limit, in msgpack and JSON", () => {
    expect(decodeValue(encodeValue(nested(8)), "msgpack", limits)).toEqual(nested(8));
    expect(() => decodeValue(encodeValue(nested(9)), "msgpack", limits)).toThrow(/nesting deeper than 8/);
    const json = new TextEncoder().encode(JSON.stringify(nested(9)));
    expect(() => decodeValue(json, "json", limits)).toThrow(DecodeError);
  });

  it("codec - a hostile 100k-deep msgpack document fails cleanly instead of overflowing the stack", () => {
    const bytes = new Uint8Array(100_000).fill(0x91); // [[[[...
    expect(() => decodeValue(bytes, "msgpack", { maxBytes: 1 << 20, maxDepth: 64 })).toThrow(DecodeError);
  });

  it("codec - rejects malformed, truncated and trailing msgpack and claims larger than the data", () => {
    expect(scanMsgpack(Uint8Array.from([0xc1]), 8)).toMatch(/invalid byte/);
    expect(scanMsgpack(Uint8Array.from([0x92, 0x01]), 8)).toMatch(/claims|truncated/);
    expect(scanMsgpack(Uint8Array.from([0x01, 0x02]), 8)).toMatch(/trailing/);
    expect(scanMsgpack(Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff, 0x01]), 8)).toMatch(/claims/);
    expect(scanMsgpack(Uint8Array.from([0xdb, 0x00, 0x00, 0x10, 0x00, 0x61]), 8)).toMatch(/truncated/);
    expect(scanMsgpack(new Uint8Array(0), 8)).toMatch(/empty/);
    expect(() => decodeValue(Uint8Array.from([0x93, 0x01]), "msgpack", limits)).toThrow(/malformed msgpack/);
  });

  it("codec - the scanner accepts everything our encoder and msgpackr write", () => {
    const samples: unknown[] = [
      null,
      true,
      false,
      0,
      -1,
      -33,
      127,
      128,
      255,
      256,
      65535,
      65536,
      2 ** 32,
      -(2 ** 31),
      -(2 ** 40),
      1.5,
      -0.25,
      "",
      "a".repeat(31),
      "b".repeat(32),
      "c".repeat(300),
      "d".repeat(70_000),
      Buffer.alloc(10),
      Buffer.alloc(300),
      Buffer.alloc(70_000),
      new Date(0),
      new Date(),
      [],
      Array.from({ length: 20 }, (_, i) => i),
      Array.from({ length: 70_000 }, () => 0),
      {},
      Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i])),
      Object.fromEntries(Array.from({ length: 70_000 }, (_, i) => [`k${i}`, null])),
      { nested: [{ deep: [1, { x: "y" }] }] },
    ];
    for (const s of samples) expect(scanMsgpack(encodeValue(s), 64), JSON.stringify(s)?.slice(0, 40)).toBeUndefined();
    // msgpackr's default (fixed 16-bit map headers) is what a JS sender may use.
    for (const s of samples.slice(0, -2)) expect(scanMsgpack(pack(s), 64)).toBeUndefined();
  });

  it("codec - rejects bytes over maxBytes with PAYLOAD_TOO_LARGE before parsing", () => {
    expect(() => decodeValue(new Uint8Array(4097), "msgpack", limits)).toThrow(PayloadTooLargeError);
  });

  it("codec - invalid UTF-8 and invalid JSON are DECODE_FAILED for JSON", () => {
    expect(() => decodeValue(Uint8Array.from([0x7b, 0xff, 0x7d]), "json", limits)).toThrow(/invalid JSON/);
    expect(() => decodeValue(new TextEncoder().encode("{"), "json", limits)).toThrow(/invalid JSON/);
  });
});
