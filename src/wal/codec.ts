import { Packr } from "msgpackr";

/**
 * Payload codec. Records must decode in another process, years later, without any
 * shared state, so msgpackr's record-structure extension (which keeps structure
 * definitions outside the bytes) is off: plain MessagePack maps only.
 * The codec is part of format version 1; a new codec needs a new format version.
 */
const packr = new Packr({ useRecords: false, moreTypes: false });

/** Encodes a payload. The result is only valid until the next call (msgpackr reuses its buffer). */
export function encodePayload(payload: unknown): Buffer {
  return packr.pack(payload);
}

export function decodePayload<T = unknown>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}
