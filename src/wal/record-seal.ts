import { WalBadKeyError } from "./errors.js";
import { type ChainKey, equalTags, hmac128, NonceDomain, type RecordCipher, ZERO_MAC, type SessionCipher } from "./crypto.js";
import {
  assemble,
  CipherId,
  CRC_LEN,
  decodeIdentity,
  encodeHeader,
  encodeIdentity,
  headerLength,
  writeCrc,
  writeHeader,
  type HeaderFields,
  type ParsedRecord,
} from "./record-format.js";

/**
 * Sealing and opening records: the step between the byte layout (record-format.ts)
 * and the keys (crypto.ts). Every authenticated check lives here so that recovery,
 * `kova wal verify` and the append path agree on what "valid" means.
 */
export interface Security {
  cipher: RecordCipher | undefined;
  chain: ChainKey | undefined;
  /**
   * The keys of each open, by epoch (format-v2 bodies, completion batches and side-table
   * values are sealed under them); present whenever `cipher` is.
   */
  sessions?: (epoch: number) => SessionCipher | undefined;
  /**
   * When true (inspect/verify without keys), checks that need a missing key are
   * skipped instead of failing; used only by read-only tools, never by recovery.
   */
  unverified?: boolean;
}

export interface RecordIdentity {
  epoch: number;
  seq: number;
  kind: string;
  owner: string | undefined;
}

export interface SealedRecord {
  bytes: Buffer;
  /** This record's chain mac (undefined without `wal-hmac`). */
  mac: Buffer | undefined;
  prevMac: Buffer | undefined;
}

/**
 * A marker's tag: with a cipher, the cipher's PRF of (epoch, seq) — what a marker
 * asserts is "seq of this epoch is COMPLETE", and nothing else in it is used; with only
 * the chain, an HMAC over every byte before the tag (its chain macs included).
 */
function markerTagOf(sec: Security, epoch: number, seq: number, before: Uint8Array[]): Buffer | undefined {
  if (sec.cipher !== undefined) return sec.cipher.markerTag(epoch, seq);
  if (sec.chain !== undefined) return hmac128(sec.chain.markerKey, before);
  return undefined;
}

function headerFields(sec: Security, id: RecordIdentity, marker: boolean): HeaderFields {
  return {
    complete: marker,
    marker,
    cipher: sec.cipher?.id ?? CipherId.NONE,
    chained: sec.chain !== undefined,
    epoch: id.epoch,
    seq: id.seq,
    kind: id.kind,
    owner: id.owner,
  };
}

/** The session of `epoch`, which a writer must have. */
function sessionFor(sec: Security, epoch: number): SessionCipher {
  const session = sec.sessions?.(epoch);
  if (session === undefined) throw new WalBadKeyError(`WAL has no session key for epoch ${epoch}: a writer needs the key of the open it writes in`);
  return session;
}

/**
 * Builds the stored bytes of a PENDING data record (format v2).
 * @throws RangeError for a kind or owner out of bounds, before anything is encrypted
 */
export function sealData(sec: Security, id: RecordIdentity, payload: Uint8Array, prevMac: Buffer | undefined): SealedRecord {
  if (sec.cipher === undefined && sec.chain === undefined) {
    // Hot path without keys: the whole record in one allocation.
    const hl = headerLength(id.kind, id.owner);
    const buf = Buffer.allocUnsafe(hl + payload.length + CRC_LEN);
    writeHeader(buf, headerFields(sec, id, false), payload.length);
    buf.set(payload, hl);
    return { bytes: writeCrc(buf), mac: undefined, prevMac: undefined };
  }
  let body: Uint8Array = payload;
  let tag: Buffer | undefined;
  let header: Buffer;
  if (sec.cipher !== undefined) {
    // Kind and owner are user data: they are encrypted with the payload (format v2).
    // One plaintext buffer: a second cipher update per record cost more than this copy.
    const identity = encodeIdentity(id.kind, id.owner);
    const plain = Buffer.allocUnsafe(identity.length + payload.length);
    plain.set(identity, 0);
    plain.set(payload, identity.length);
    header = encodeHeader(headerFields(sec, id, false), plain.length);
    ({ body, tag } = sessionFor(sec, id.epoch).seal(NonceDomain.RECORD, id.seq, header, [plain]));
  } else {
    header = encodeHeader(headerFields(sec, id, false), payload.length);
  }
  let mac: Buffer | undefined;
  let prev: Buffer | undefined;
  if (sec.chain !== undefined) {
    prev = prevMac ?? ZERO_MAC;
    mac = sec.chain.link(prev, [header, body, tag]);
  }
  return { bytes: assemble([header, body, tag, prev, mac]), mac, prevMac: prev };
}

/**
 * Builds a format-v1 completion marker, which replaced a data record in its slot before
 * completion batches; kept to test that v1 WALs holding them still load. It keeps the
 * completed record's chain macs so the chain stays linked through completed records.
 */
export function sealMarker(sec: Security, id: RecordIdentity, chain: { prevMac: Buffer; mac: Buffer } | undefined): Buffer {
  if (sec.cipher === undefined && sec.chain === undefined) {
    const buf = Buffer.allocUnsafe(headerLength(id.kind, id.owner) + CRC_LEN);
    writeHeader(buf, headerFields(sec, id, true), 0, 1);
    return writeCrc(buf);
  }
  const header = encodeHeader(headerFields(sec, id, true), 0, 1);
  const parts: Array<Uint8Array | undefined> = [header, chain?.prevMac, chain?.mac];
  parts.push(
    markerTagOf(
      sec,
      id.epoch,
      id.seq,
      parts.filter((p): p is Uint8Array => p !== undefined),
    ),
  );
  return assemble(parts);
}

export type OpenResult = { ok: true; plaintext: Buffer | undefined } | { ok: false; reason: string };

const CIPHER_NAME = ["none", "aes-256-gcm", "sm4"] as const;

/**
 * Authenticates a record whose CRC already checked out, and decrypts a data record's
 * body. A CRC only catches accidents; these checks catch an edit whose CRC was
 * recomputed.
 */
export function openRecord(sec: Security, rec: ParsedRecord): OpenResult {
  const expected = sec.cipher?.id ?? CipherId.NONE;
  if (rec.cipher !== expected && !(sec.unverified && sec.cipher === undefined)) {
    return { ok: false, reason: `record uses cipher ${CIPHER_NAME[rec.cipher]}, WAL opened with ${CIPHER_NAME[expected]}` };
  }
  if (sec.chain !== undefined && !rec.chained) return { ok: false, reason: "record lacks the HMAC chain mac" };
  if (sec.chain !== undefined && !rec.marker && !equalTags(rec.mac!, sec.chain.link(rec.prevMac!, [rec.header, rec.body, rec.tag]))) {
    return { ok: false, reason: "HMAC chain mac mismatch (record edited)" };
  }
  if (rec.marker) {
    const expectedTag = markerTagOf(sec, rec.epoch, rec.seq, [rec.beforeMarkerTag]);
    if (expectedTag !== undefined) {
      if (rec.markerTag === undefined || !equalTags(rec.markerTag, expectedTag)) {
        return { ok: false, reason: "completion marker authentication failed" };
      }
    } else if (rec.markerTag !== undefined && !sec.unverified) {
      return { ok: false, reason: "completion marker is authenticated but no key was given" };
    }
    return { ok: true, plaintext: undefined };
  }
  if (rec.cipher === CipherId.NONE) return { ok: true, plaintext: rec.body };
  if (sec.cipher === undefined) return { ok: true, plaintext: undefined }; // unverified: cannot decrypt
  const failed: OpenResult = { ok: false, reason: `${sec.cipher.algorithm} authentication failed (record edited or wrong key)` };
  if (rec.version === 1) {
    const plaintext = sec.cipher.open(rec.header, rec.body, rec.tag!, rec.epoch, rec.seq);
    return plaintext === undefined ? failed : { ok: true, plaintext };
  }
  const session = sec.sessions?.(rec.epoch);
  if (session === undefined) return { ok: false, reason: `no key for epoch ${rec.epoch}: the salt of that open is missing from the opens table` };
  const plain = session.open(NonceDomain.RECORD, rec.seq, rec.header, rec.body, rec.tag!);
  if (plain === undefined) return failed;
  const identity = decodeIdentity(plain);
  if (identity === undefined) return { ok: false, reason: "sealed kind/owner block malformed" };
  rec.reveal(identity.kind, identity.owner);
  return { ok: true, plaintext: plain.subarray(identity.payloadStart) };
}
