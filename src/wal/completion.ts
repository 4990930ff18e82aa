import { crc32 } from "./crc32.js";
import { equalTags, hmac128, NonceDomain, type SessionCipher } from "./crypto.js";
import { CRC_LEN, TAG_LEN } from "./record-format.js";

/**
 * Completion batches: how records become COMPLETE. Every `complete` of one event turn
 * lands in ONE stored value (instead of one marker write per record), written in the
 * same LMDB transaction as whatever else the turn wrote (the kv outcome of
 * `complete({ kv })`, the new record of `replace`). A ring record whose seq is in a
 * batch is COMPLETE; a batch is deleted once every slot it names has been reused.
 *
 * Version 1 (written without a cipher; big-endian):
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
 *
 * Version 2 (written with a cipher): the seqs are encrypted and authenticated under
 * the keys of the open that wrote the batch, nonce (DONE, batch number); the first 12
 * bytes are laid out as in version 1:
 *
 * | offset | size | field                                        |
 * | ------ | ---- | -------------------------------------------- |
 * | 0      | 1    | magic 0xC9                                   |
 * | 1      | 1    | version (2)                                  |
 * | 2      | 1    | flags: bit1 SEALED                           |
 * | 3      | 1    | reserved (0)                                 |
 * | 4      | 4    | epoch in which the batch was written (selects the keys) |
 * | 8      | 4    | count n                                      |
 * | 12     | 8    | batch number (the nonce counter)             |
 * | 20     | 8·n  | completed seqs, encrypted                    |
 * |        | 16   | cipher tag (AES-GCM, or SM4-CTR + HMAC) over bytes 0..20 and the ciphertext |
 * |        | 4    | CRC-32/IEEE (unsigned) over every byte before it |
 */
export const DONE_MAGIC = 0xc9;
const FIXED = 12;
const SEALED_FIXED = 20;
const SEALED = 0x02;
const TWO_32 = 2 ** 32;

function writeSeqs(buf: Buffer, at: number, seqs: readonly number[]): void {
  for (const seq of seqs) {
    buf.writeUInt32BE(Math.floor(seq / TWO_32), at);
    buf.writeUInt32BE(seq >>> 0, at + 4);
    at += 8;
  }
}

/** A version-2 batch, sealed under the session of `epoch`; `batch` is its key in the `done` table. */
export function sealDoneSealed(session: SessionCipher, epoch: number, batch: number, seqs: readonly number[]): Buffer {
  const header = Buffer.allocUnsafe(SEALED_FIXED);
  header[0] = DONE_MAGIC;
  header[1] = 2;
  header[2] = SEALED;
  header[3] = 0;
  header.writeUInt32BE(epoch >>> 0, 4);
  header.writeUInt32BE(seqs.length, 8);
  header.writeUInt32BE(Math.floor(batch / TWO_32), 12);
  header.writeUInt32BE(batch >>> 0, 16);
  const plain = Buffer.allocUnsafe(8 * seqs.length);
  writeSeqs(plain, 0, seqs);
  const { body, tag } = session.seal(NonceDomain.DONE, batch, header, [plain]);
  const out = Buffer.allocUnsafe(SEALED_FIXED + body.length + TAG_LEN + CRC_LEN);
  header.copy(out, 0);
  body.copy(out, SEALED_FIXED);
  tag.copy(out, SEALED_FIXED + body.length);
  out.writeUInt32BE(crc32(out.subarray(0, out.length - CRC_LEN)), out.length - CRC_LEN);
  return out;
}

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
  writeSeqs(buf, FIXED, seqs);
  if (doneKey !== undefined) hmac128(doneKey, [buf.subarray(0, bodyEnd)]).copy(buf, bodyEnd);
  buf.writeUInt32BE(crc32(buf.subarray(0, bodyEnd + tagLen)), bodyEnd + tagLen);
  return buf;
}

/** `unread`: a sealed batch a tool without the key could not open (its seqs are unknown). */
export type DoneResult = { ok: true; epoch: number; seqs: number[]; unread?: true } | { ok: false; reason: string; seqs: number[] };

/**
 * Checks and reads a completion batch of either version. Never throws. `unverified`
 * (tools without a key) accepts a tag it cannot check, and a sealed batch it cannot
 * open as `unread`. `sessions` gives the keys of the open that sealed a v2 batch.
 */
export function openDone(doneKey: Buffer | undefined, buf: Buffer, unverified = false, sessions?: (epoch: number) => SessionCipher | undefined): DoneResult {
  if (buf.length < FIXED + CRC_LEN || buf[0] !== DONE_MAGIC) return { ok: false, reason: "completion batch: bad header", seqs: [] };
  const end = buf.length - CRC_LEN;
  if (buf.readUInt32BE(end) !== crc32(buf.subarray(0, end)))
    return { ok: false, reason: "completion batch: CRC32 mismatch", seqs: buf[1] === 1 ? looseSeqs(buf) : [] };
  if (buf[1] === 2) return openSealed(buf, end, unverified, sessions);
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

function openSealed(buf: Buffer, end: number, unverified: boolean, sessions: ((epoch: number) => SessionCipher | undefined) | undefined): DoneResult {
  const n = buf.length >= SEALED_FIXED ? buf.readUInt32BE(8) : -1;
  if (buf[2] !== SEALED || n < 0 || SEALED_FIXED + 8 * n + TAG_LEN !== end) return { ok: false, reason: "completion batch: length mismatch", seqs: [] };
  const epoch = buf.readUInt32BE(4);
  const session = sessions?.(epoch);
  if (session === undefined) {
    if (unverified && sessions === undefined) return { ok: true, epoch, seqs: [], unread: true };
    return { ok: false, reason: `completion batch: no key for epoch ${epoch}`, seqs: [] };
  }
  const batch = buf.readUInt32BE(12) * TWO_32 + buf.readUInt32BE(16);
  const plain = session.open(
    NonceDomain.DONE,
    batch,
    buf.subarray(0, SEALED_FIXED),
    buf.subarray(SEALED_FIXED, end - TAG_LEN),
    buf.subarray(end - TAG_LEN, end),
  );
  if (plain === undefined) return { ok: false, reason: "completion batch authentication failed", seqs: [] };
  return { ok: true, epoch, seqs: readSeqs(plain, n, 0) };
}

function readSeqs(buf: Buffer, n: number, from = FIXED): number[] {
  const seqs: number[] = [];
  for (let i = 0, at = from; i < n && at + 8 <= buf.length; i++, at += 8) seqs.push(buf.readUInt32BE(at) * TWO_32 + buf.readUInt32BE(at + 4));
  return seqs;
}

/** The seqs of a damaged batch, for the report (they are re-executed, not trusted). */
function looseSeqs(buf: Buffer): number[] {
  const n = buf.readUInt32BE(8);
  return readSeqs(buf, Math.min(n, Math.floor((buf.length - FIXED) / 8))).filter((s) => Number.isSafeInteger(s));
}
