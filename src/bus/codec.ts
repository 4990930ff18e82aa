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
  return ct && ct.toLowerCase().startsWith(ContentType.json) ? "json" : "msgpack";
}

export function encodeValue(value: unknown, encoding: Encoding = "msgpack"): Uint8Array {
  return encoding === "json" ? utf8Encoder.encode(JSON.stringify(value)) : packr.pack(value);
}

/**
 * Decodes bytes within the limits.
 * @throws PayloadTooLargeError over `maxBytes`; DecodeError for malformed msgpack,
 *   invalid JSON or nesting over `maxDepth`
 */
export function decodeValue(data: Uint8Array, encoding: Encoding, limits: CodecLimits = DEFAULT_CODEC_LIMITS, subject = "message"): unknown {
  if (data.length > limits.maxBytes) throw new PayloadTooLargeError(data.length, limits.maxBytes, subject);
  if (encoding === "json") {
    let value: unknown;
    try {
      value = JSON.parse(utf8.decode(data));
    } catch (err) {
      throw new DecodeError("json", err instanceof Error ? err.message : String(err), { cause: err });
    }
    const depth = jsonDepthOver(value, limits.maxDepth);
    if (depth) throw new DecodeError("json", `nesting deeper than ${limits.maxDepth}`);
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
 * Bytes (plus headers, for the content type) → a validated envelope.
 * @throws PayloadTooLargeError, DecodeError, InvalidEnvelopeError, UnknownMessageTypeError
 */
export function decodeEnvelope(data: Uint8Array, headers?: MsgHdrs, limits: CodecLimits = DEFAULT_CODEC_LIMITS, subject?: string): A2AEnvelope {
  return validateEnvelope(decodeValue(data, encodingOf(headers), limits, subject));
}

/** Iterative, so a hostile document cannot overflow the stack while being checked. */
function jsonDepthOver(root: unknown, maxDepth: number): boolean {
  const stack: Array<[unknown, number]> = [[root, 0]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (typeof value !== "object" || value === null) continue;
    if (depth + 1 > maxDepth) return true;
    for (const child of Array.isArray(value) ? value : Object.values(value)) {
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}
