import { Packr, Unpackr } from "msgpackr";
import { Match, type MsgHdrs } from "@nats-io/transport-node";
import { DecodeError, PayloadTooLargeError } from "./errors.js";
import { validateEnvelope, type A2AEnvelope } from "./envelope.js";
import { scanMsgpack } from "./msgpack-scan.js";
import { ContentType, Header } from "./wire.js";

export type Encoding = "msgpack" | "json";

/** Limits applied before decoding bytes from the wire. */
export interface CodecLimits {
  /** Largest message accepted, in bytes (default: 1 MiB, nats-server's default max_payload). */
  maxBytes: number;
  /** Deepest nesting of arrays/maps accepted (default 64). */
  maxDepth: number;
}

export const DEFAULT_CODEC_LIMITS: Readonly<CodecLimits> = { maxBytes: 1024 * 1024, maxDepth: 64 };

// Plain msgpack only: msgpackr's record extension and shared structures are
// msgpackr-specific, and the wire format must decode in any language.
const packr = new Packr({ useRecords: false, moreTypes: false, encodeUndefinedAsNil: true, variableMapSize: true });
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "number" });
const utf8 = new TextDecoder("utf-8", { fatal: true });
const utf8Encoder = new TextEncoder();

/** The encoding a message declares: JSON only when `Content-Type: application/json`. */
export function encodingOf(headers: MsgHdrs | undefined): Encoding {
  const ct = headers?.get(Header.ContentType, Match.IgnoreCase);
  return ct?.toLowerCase().startsWith(ContentType.json) ? "json" : "msgpack";
}

export function encodeValue(value: unknown, encoding: Encoding = "msgpack"): Uint8Array {
  return encoding === "json" ? utf8Encoder.encode(JSON.stringify(value)) : packr.pack(value);
}

/**
 * Decodes bytes within the limits.
 * @throws PayloadTooLargeError over `maxBytes`; DecodeError for malformed msgpack,
 *   invalid JSON, nesting over `maxDepth`, a msgpack extension other than the
 *   timestamp, or an object key `__proto__` (docs/protocol.md, "Decoding limits")
 */
export function decodeValue(data: Uint8Array, encoding: Encoding, limits: CodecLimits = DEFAULT_CODEC_LIMITS, subject = "message"): unknown {
  if (data.length > limits.maxBytes) throw new PayloadTooLargeError(data.length, limits.maxBytes, subject);
  if (encoding === "json") {
    const tooDeep = scanJsonDepth(data, limits.maxDepth);
    if (tooDeep) throw new DecodeError("json", tooDeep);
    let value: unknown;
    try {
      value = JSON.parse(utf8.decode(data));
    } catch (err) {
      throw new DecodeError("json", err instanceof Error ? err.message : String(err), { cause: err });
    }
    if (hasProtoKey(value)) throw new DecodeError("json", 'object key "__proto__" is not accepted');
    return value;
  }
  const problem = scanMsgpack(data, limits.maxDepth);
  if (problem) throw new DecodeError("msgpack", problem);
  try {
    return unpackr.unpack(data);
  } catch (err) {
    throw new DecodeError("msgpack", err instanceof Error ? err.message : String(err), { cause: err });
  }
}

export function encodeEnvelope(env: A2AEnvelope, encoding: Encoding = "msgpack"): Uint8Array {
  return encodeValue(env, encoding);
}

/**
 * The `id` of the envelope stored in a message, read within the limits; undefined when the
 * bytes are not a decodable object with a string id (what the mailbox dead-letters).
 */
export function storedEnvelopeId(data: Uint8Array, headers: MsgHdrs | undefined, limits: CodecLimits = DEFAULT_CODEC_LIMITS): string | undefined {
  try {
    const value = decodeValue(data, encodingOf(headers), limits);
    const id = typeof value === "object" && value !== null ? (value as { id?: unknown }).id : undefined;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Bytes (plus headers, for the content type) → a validated envelope.
 * @throws PayloadTooLargeError, DecodeError, InvalidEnvelopeError, UnknownMessageTypeError
 */
export function decodeEnvelope(data: Uint8Array, headers?: MsgHdrs, limits: CodecLimits = DEFAULT_CODEC_LIMITS, subject?: string): A2AEnvelope {
  return validateEnvelope(decodeValue(data, encodingOf(headers), limits, subject));
}

/**
 * Nesting depth from the bytes, before JSON.parse: V8 parses deep documents without
 * overflowing, but a 1 MiB run of `[` took ~540 ms to parse (measured, Node 20), so a
 * hostile message is refused here in one linear pass instead. Brackets inside strings
 * (with their escapes) do not count; anything else malformed is left to JSON.parse.
 */
function scanJsonDepth(bytes: Uint8Array, maxDepth: number): string | undefined {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return `nesting deeper than ${maxDepth}`;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return undefined;
}

/**
 * JSON.parse makes `"__proto__"` an own property, which is harmless until some code
 * copies it with assignment (`Object.assign`, a hand-written merge) and replaces a
 * prototype. No decoded value may carry it, in JSON as in msgpack (msgpack-scan.ts).
 * Iterative: the depth is already bounded, but the walk stays off the stack anyway.
 */
function hasProtoKey(root: unknown): boolean {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value !== "object" || value === null) continue;
    if (Array.isArray(value)) {
      for (const child of value) if (typeof child === "object" && child !== null) stack.push(child);
      continue;
    }
    if (Object.hasOwn(value, "__proto__")) return true;
    for (const child of Object.values(value)) if (typeof child === "object" && child !== null) stack.push(child);
  }
  return false;
}
