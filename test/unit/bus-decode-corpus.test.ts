import { headers, type MsgHdrs } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { createEnvelope, DecodeError, decodeEnvelope, encodeEnvelope, InvalidEnvelopeError, UnknownMessageTypeError } from "../../src/bus/index.js";
import { scanMsgpack } from "../../src/bus/msgpack-scan.js";
import { loadCorpus, reasonOf } from "../fixtures/bus/decode-corpus.js";

const corpus = loadCorpus();
const jsonHeaders: MsgHdrs = headers();
jsonHeaders.set("Content-Type", "application/json");

/** What decoding threw, or "decoded" when it did not. */
function attempt(bytes: Uint8Array, encoding: "msgpack" | "json"): unknown {
  try {
    decodeEnvelope(bytes, encoding === "json" ? jsonHeaders : undefined);
    return "decoded";
  } catch (err) {
    return err;
  }
}

function causes(err: unknown): unknown[] {
  const out: unknown[] = [];
  for (let e = err; e instanceof Error && out.length < 10; e = e.cause) out.push(e);
  return out;
}

const prototypeKeys = () => Object.getOwnPropertyNames(Object.prototype).sort();

describe("bus decode corpus", () => {
  it("corpus - holds every kind of bad input docs/protocol.md names", () => {
    const names = corpus.map((c) => c.name).join("\n");
    for (const kind of [
      "truncated-at-000",
      "random-",
      "mutated-",
      "deep-fixarray",
      "deep-map32",
      "deep-ext-set",
      "deep-ext-record-definition",
      "claims-4G",
      "proto-key",
      "constructor",
    ]) {
      expect(names, kind).toContain(kind);
    }
    expect(corpus.length).toBeGreaterThan(300);
  });

  it("corpus - every input is refused with DecodeError, InvalidEnvelopeError or UnknownMessageTypeError and the reason its name gives, never a RangeError", () => {
    const before = prototypeKeys();
    for (const item of corpus) {
      const err = attempt(item.bytes, item.encoding);
      expect(err, item.name).not.toBe("decoded");
      const ok = err instanceof DecodeError || err instanceof InvalidEnvelopeError || err instanceof UnknownMessageTypeError;
      expect(ok, `${item.name}: ${String(err)}`).toBe(true);
      if (item.reason !== undefined) expect(reasonOf(err), item.name).toBe(item.reason);
      for (const e of causes(err)) expect(e, item.name).not.toBeInstanceOf(RangeError);
    }
    expect(prototypeKeys()).toEqual(before);
    expect((Object.prototype as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("corpus - malformed msgpack is refused by the scan itself, before msgpackr runs on it", () => {
    for (const item of corpus.filter((c) => c.encoding === "msgpack")) {
      const err = attempt(item.bytes, "msgpack");
      if (!(err instanceof DecodeError)) continue;
      // A DecodeError with a cause would be msgpackr's own failure on bytes the scan let through.
      expect(err.cause, `${item.name}: ${err.message}`).toBeUndefined();
      expect(scanMsgpack(item.bytes, 64), item.name).toBeDefined();
    }
  });

  it("corpus - the 20,000-deep chain of Set extensions is refused at its first extension", () => {
    const item = corpus.find((c) => c.name.endsWith("malformed_msgpack--deep-ext-set.msgpack"))!;
    expect(scanMsgpack(item.bytes, 64)).toMatch(/extension type 115 at byte 5 is not accepted/);
  });

  it("fuzz - 20,000 seeded mutations of a valid envelope either decode or fail with a bus decode error, and msgpackr never fails on bytes the scan accepted", () => {
    const env = createEnvelope({
      from: "fuzzer",
      to: "victim",
      type: "task_delegate",
      payload: { text: "hello", list: [1, 2.5, null, true], at: new Date(0), bin: Buffer.from([1, 2]) },
    });
    const base = encodeEnvelope(env);
    let seed = 12345;
    const rnd = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    let decoded = 0;
    let refused = 0;
    for (let i = 0; i < 20_000; i++) {
      const bytes = Buffer.from(base);
      for (let k = 0, n = 1 + Math.floor(rnd() * 4); k < n; k++) bytes[Math.floor(rnd() * bytes.length)] = Math.floor(rnd() * 256);
      const cut = rnd() < 0.2 ? bytes.subarray(0, Math.floor(rnd() * bytes.length)) : bytes;
      const err = attempt(cut, "msgpack");
      if (err === "decoded") {
        decoded++;
        continue;
      }
      refused++;
      expect(reasonOf(err), String(err)).toBeDefined();
      if (err instanceof DecodeError) expect(err.cause, `${cut.toString("hex")}: ${err.message}`).toBeUndefined();
    }
    expect(decoded).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(decoded);
  });

  it("codec - the msgpack timestamp stays accepted: a Date in a payload round-trips", () => {
    const env = createEnvelope({ from: "a", to: "b", type: "task_delegate", payload: { at: new Date(1_700_000_000_123) } });
    expect(decodeEnvelope(encodeEnvelope(env))).toEqual(env);
  });
});
