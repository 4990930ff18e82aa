import { decodePayload, encodePayload } from "./codec.js";
import { NonceDomain, type SessionCipher } from "./crypto.js";
import { TAG_LEN } from "./record-format.js";

/**
 * The side table written by `complete({ kv })` when the WAL is encrypted (table
 * `kvsealed`): the key is stored as HMAC-SHA256(kv-name subkey, key) (RecordCipher.kvName),
 * so an actor id used as a key is not on disk in the clear and a lookup stays one read;
 * the value is msgpack sealed under the keys of the open that wrote it (big-endian):
 *
 * | offset | size | field                                              |
 * | ------ | ---- | -------------------------------------------------- |
 * | 0      | 1    | magic 0xCA                                         |
 * | 1      | 1    | version (1)                                        |
 * | 2      | 2    | reserved (0)                                       |
 * | 4      | 4    | epoch of the open that wrote it (selects the keys) |
 * | 8      | 8    | write number in that open (the nonce counter)      |
 * | 16     | V    | the value (msgpack), encrypted                     |
 * |        | 16   | cipher tag over bytes 0..16, the stored key name and the ciphertext |
 *
 * Binding the stored key name into the tag means a value moved under another key fails
 * authentication instead of being read as that key's value.
 */
export const KV_MAGIC = 0xca;
const HEADER = 16;
const TWO_32 = 2 ** 32;

export function sealKv(session: SessionCipher, epoch: number, counter: number, name: Buffer, value: unknown): Buffer {
  const header = Buffer.allocUnsafe(HEADER);
  header[0] = KV_MAGIC;
  header[1] = 1;
  header.writeUInt16BE(0, 2);
  header.writeUInt32BE(epoch >>> 0, 4);
  header.writeUInt32BE(Math.floor(counter / TWO_32), 8);
  header.writeUInt32BE(counter >>> 0, 12);
  const { body, tag } = session.seal(NonceDomain.KV, counter, Buffer.concat([header, name]), [encodePayload(value)]);
  return Buffer.concat([header, body, tag]);
}

export type KvOpenResult = { ok: true; value: unknown } | { ok: false; reason: string };

/** Authenticates and decodes a sealed side-table value. Never throws. */
export function openKv(sessions: (epoch: number) => SessionCipher | undefined, name: Buffer, stored: Buffer): KvOpenResult {
  if (stored.length < HEADER + TAG_LEN || stored[0] !== KV_MAGIC || stored[1] !== 1) return { ok: false, reason: "bad header" };
  const epoch = stored.readUInt32BE(4);
  const session = sessions(epoch);
  if (session === undefined) return { ok: false, reason: `no key for epoch ${epoch}` };
  const counter = stored.readUInt32BE(8) * TWO_32 + stored.readUInt32BE(12);
  const aad = Buffer.concat([stored.subarray(0, HEADER), name]);
  const plain = session.open(NonceDomain.KV, counter, aad, stored.subarray(HEADER, stored.length - TAG_LEN), stored.subarray(stored.length - TAG_LEN));
  if (plain === undefined) return { ok: false, reason: `${session.algorithm} authentication failed (value edited, moved to another key, or wrong key)` };
  try {
    return { ok: true, value: decodePayload(plain) };
  } catch {
    return { ok: false, reason: "value does not decode" };
  }
}
