import { crc32 } from "./crc32.js";
import { equalTags, hmac128 } from "./crypto.js";
import { CRC_LEN, TAG_LEN } from "./record-format.js";

/**
 * Completion batches: how records become COMPLETE. Every `complete` of one event turn
 * lands in ONE stored value (instead of one marker write per record), written in the
 * same LMDB transaction as whatever else the turn wrote (the kv outcome of
 * `complete({ kv })`, the new record of `replace`). A ring record whose seq is in a
 * batch is COMPLETE; a batch is deleted once every slot it names has been reused.
 *
 * Layout, version 1 (big-endian):
 *
 * | offset | size | field                                        |
 * | ------ | ---- | -------------------------------------------- |
 * | 0      | 1    | magic 0xC9                                   |
 * | 1      | 1    | version (1)                                  |
 * | 2      | 1    | flags: bit0 TAGGED                           |
 * | 3      | 1    | reserved (0)                                 |
 * | 4      | 4    | epoch in which the batch was written         |
 * | 8      | 4    | count n                                      |
 * | 12     | 8·n  | completed seqs (u64)                         |
 * |        | 16   | tag: HMAC-SHA256/128 under the done subkey (TAGGED only) |
 * |        | 4    | CRC-32/IEEE (unsigned) over every byte before it |
 */
export const DONE_MAGIC = 0xc9;
const FIXED = 12;
const TWO_32 = 2 ** 32;

export function sealDone(doneKey: Buffer | undefined, epoch: number, seqs: readonly number[]): Buffer {
  const tagLen = doneKey === undefined ? 0 : TAG_LEN;
  const bodyEnd = FIXED + 8 * seqs.length;
  const buf = Buffer.allocUnsafe(bodyEnd + tagLen + CRC_LEN);
  buf[0] = DONE_MAGIC;
  buf[1] = 1;
  buf[2] = doneKey === undefined ? 0 : 1;
  buf[3] = 0;
  buf.writeUInt32BE(epoch >>> 0, 4);
  buf.writeUInt32BE(seqs.length, 8);
  let at = FIXED;
  for (const seq of seqs) {
    buf.writeUInt32BE(Math.floor(seq / TWO_32), at);
    buf.writeUInt32BE(seq >>> 0, at + 4);
    at += 8;
  }
  if (doneKey !== undefined) hmac128(doneKey, [buf.subarray(0, bodyEnd)]).copy(buf, bodyEnd);
  buf.writeUInt32BE(crc32(buf.subarray(0, bodyEnd + tagLen)), bodyEnd + tagLen);
  return buf;
}

export type DoneResult = { ok: true; epoch: number; seqs: number[] } | { ok: false; reason: string; seqs: number[] };

/**
 * Checks and reads a completion batch. Never throws. `unverified` (tools without a key)
 * accepts a tag it cannot check.
 */
export function openDone(doneKey: Buffer | undefined, buf: Buffer, unverified = false): DoneResult {
  if (buf.length < FIXED + CRC_LEN || buf[0] !== DONE_MAGIC) return { ok: false, reason: "completion batch: bad header", seqs: [] };
  const end = buf.length - CRC_LEN;
  if (buf.readUInt32BE(end) !== crc32(buf.subarray(0, end))) return { ok: false, reason: "completion batch: CRC32 mismatch", seqs: looseSeqs(buf) };
  if (buf[1] !== 1) return { ok: false, reason: `completion batch: unknown version ${buf[1]}`, seqs: [] };
  const tagged = (buf[2]! & 1) === 1;
  const n = buf.readUInt32BE(8);
  const bodyEnd = FIXED + 8 * n;
  if (bodyEnd + (tagged ? TAG_LEN : 0) !== end) return { ok: false, reason: "completion batch: length mismatch", seqs: [] };
  const seqs = readSeqs(buf, n);
  if (doneKey !== undefined) {
    if (!tagged || !equalTags(buf.subarray(bodyEnd, end), hmac128(doneKey, [buf.subarray(0, bodyEnd)]))) {
      return { ok: false, reason: "completion batch authentication failed", seqs };
    }
  } else if (tagged && !unverified) {
    return { ok: false, reason: "completion batch is authenticated but no key was given", seqs };
  }
  return { ok: true, epoch: buf.readUInt32BE(4), seqs };
}

function readSeqs(buf: Buffer, n: number): number[] {
  const seqs: number[] = [];
  for (let i = 0, at = FIXED; i < n && at + 8 <= buf.length; i++, at += 8) seqs.push(buf.readUInt32BE(at) * TWO_32 + buf.readUInt32BE(at + 4));
  return seqs;
}

/** The seqs of a damaged batch, for the report (they are re-executed, not trusted). */
function looseSeqs(buf: Buffer): number[] {
  const n = buf.readUInt32BE(8);
  return readSeqs(buf, Math.min(n, Math.floor((buf.length - FIXED) / 8))).filter((s) => Number.isSafeInteger(s));
}
