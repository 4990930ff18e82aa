import { crc32 } from "./crc32.js";

/**
 * The stored form of one WAL record (all integers big-endian). Format version 2 is
 * written now; version 1 is read (golden files in test/fixtures/wal/v1):
 *
 * | offset | size | field                                                        |
 * | ------ | ---- | ------------------------------------------------------------ |
 * | 0      | 1    | magic 0xC7                                                   |
 * | 1      | 1    | format version (1 or 2)                                      |
 * | 2      | 1    | flags: bit0 COMPLETE, bit1 MARKER, bits2-3 cipher, bit4 CHAIN |
 * | 3      | 1    | kind length K (bytes, UTF-8, ≤ 255)                          |
 * | 4      | 4    | epoch (u32)                                                  |
 * | 8      | 8    | seq (u64; JS keeps it below 2^53)                            |
 * | 16     | 2    | owner length O (0 = no owner)                                |
 * | 18     | 4    | body length B                                                |
 * | 22     | K+O  | kind, owner                                                  |
 * |        | B    | body: msgpack payload, or its ciphertext                     |
 * |        | 16   | cipher tag (data records with a cipher only)                 |
 * |        | 32   | prevMac, mac (CHAIN only)                                    |
 * |        | 16   | marker tag (MARKER records when a key is configured)         |
 * |        | 4    | CRC-32/IEEE (unsigned) over every byte before it             |
 *
 * Bytes 0 .. 22+K+O are the "header": the AAD of the cipher.
 *
 * Version 2 differs only where a cipher is set: the kind and owner (user data: an
 * actor id, a step name) move out of the header into the encrypted body (K = O = 0 in
 * the header; the plaintext is `K (1) ‖ O (2) ‖ kind ‖ owner ‖ payload`), and the body
 * is sealed under the keys of the open that wrote it (crypto.ts, SessionCipher) with
 * nonce (RECORD, seq), not under the long-term key with nonce epoch ‖ seq. Version 2
 * has no completion markers (COMPLETE and MARKER must be clear): completion batches
 * replaced them. A version-1 completion marker (MARKER|COMPLETE) replaces a data record
 * in its slot; it keeps the header fields and chain macs of the record it completes but
 * carries no body.
 */
export const RECORD_MAGIC = 0xc7;
export const FORMAT_VERSION = 2;
export const HEADER_FIXED = 22;
export const TAG_LEN = 16;
export const MAC_LEN = 16;
export const CRC_LEN = 4;

export const Flag = { COMPLETE: 0x01, MARKER: 0x02, CHAIN: 0x10 } as const;
export const CipherId = { NONE: 0, AES_256_GCM: 1, SM4: 2 } as const;
export type CipherId = (typeof CipherId)[keyof typeof CipherId];

const TWO_32 = 2 ** 32;

export interface HeaderFields {
  complete: boolean;
  marker: boolean;
  cipher: CipherId;
  chained: boolean;
  epoch: number;
  seq: number;
  kind: string;
  owner: string | undefined;
}

/**
 * A record whose CRC and layout checked out (authentication is checked by the caller).
 * Fields are read lazily from the stored bytes: the recovery scan touches a million
 * records and most of them only need seq, epoch and flags.
 */
export class ParsedRecord implements HeaderFields {
  #revealed: { kind: string; owner: string | undefined } | undefined;
  constructor(
    /** The stored bytes. */
    readonly bytes: Buffer,
    readonly version: number,
    readonly seq: number,
    private readonly flags: number,
    private readonly headerEnd: number,
    private readonly bodyEnd: number,
    private readonly tagEnd: number,
    private readonly chainEnd: number,
    private readonly markerTagEnd: number,
  ) {}
  get complete(): boolean {
    return (this.flags & Flag.COMPLETE) !== 0;
  }
  get marker(): boolean {
    return (this.flags & Flag.MARKER) !== 0;
  }
  get chained(): boolean {
    return (this.flags & Flag.CHAIN) !== 0;
  }
  get cipher(): CipherId {
    return ((this.flags >> 2) & 3) as CipherId;
  }
  get epoch(): number {
    return this.bytes.readUInt32BE(4);
  }
  /** True when kind and owner travel inside the encrypted body (v2 with a cipher). */
  get sealedIdentity(): boolean {
    return this.version >= 2 && this.cipher !== CipherId.NONE;
  }
  /** The kind; for a sealed identity, known once `reveal` ran (else "(sealed)"). */
  get kind(): string {
    if (this.sealedIdentity) return this.#revealed?.kind ?? SEALED_KIND;
    return this.bytes.toString("utf8", HEADER_FIXED, HEADER_FIXED + this.bytes[3]!);
  }
  get owner(): string | undefined {
    if (this.sealedIdentity) return this.#revealed?.owner;
    const start = HEADER_FIXED + this.bytes[3]!;
    return this.headerEnd > start ? this.bytes.toString("utf8", start, this.headerEnd) : undefined;
  }
  /** Records the identity read from the decrypted body of a sealed record. */
  reveal(kind: string, owner: string | undefined): void {
    this.#revealed = { kind, owner };
  }
  get header(): Buffer {
    return this.bytes.subarray(0, this.headerEnd);
  }
  get body(): Buffer {
    return this.bytes.subarray(this.headerEnd, this.bodyEnd);
  }
  get tag(): Buffer | undefined {
    return this.tagEnd > this.bodyEnd ? this.bytes.subarray(this.bodyEnd, this.tagEnd) : undefined;
  }
  get prevMac(): Buffer | undefined {
    return this.chainEnd > this.tagEnd ? this.bytes.subarray(this.tagEnd, this.tagEnd + MAC_LEN) : undefined;
  }
  get mac(): Buffer | undefined {
    return this.chainEnd > this.tagEnd ? this.bytes.subarray(this.tagEnd + MAC_LEN, this.chainEnd) : undefined;
  }
  get markerTag(): Buffer | undefined {
    return this.markerTagEnd > this.chainEnd ? this.bytes.subarray(this.chainEnd, this.markerTagEnd) : undefined;
  }
  /** Every byte the marker tag covers (all bytes before it). */
  get beforeMarkerTag(): Buffer {
    return this.bytes.subarray(0, this.chainEnd);
  }
  /** A plain snapshot of the header fields (for logs, tests and tools). */
  toJSON(): HeaderFields & { version: number } {
    const { version, complete, marker, cipher, chained, epoch, seq, kind, owner } = this;
    return { version, complete, marker, cipher, chained, epoch, seq, kind, owner };
  }
}

export type ParseResult =
  | { ok: true; record: ParsedRecord }
  | { ok: false; reason: string; seq: number | undefined; owner: string | undefined; epoch: number | undefined };

function flagsOf(f: Pick<HeaderFields, "complete" | "marker" | "cipher" | "chained">): number {
  return (f.complete ? Flag.COMPLETE : 0) | (f.marker ? Flag.MARKER : 0) | (f.cipher << 2) | (f.chained ? Flag.CHAIN : 0);
}

/**
 * UTF-8 bytes of kinds and owners, cached: a node uses a handful of kinds and a
 * bounded set of owners, and encoding them for every record was a visible share of the
 * append path. Cleared when it grows past a bound, so arbitrary owners cannot bloat it.
 */
const utf8Cache = new Map<string, Buffer>();
const UTF8_CACHE_MAX = 10_000;

function utf8(text: string): Buffer {
  let bytes = utf8Cache.get(text);
  if (bytes === undefined) {
    if (utf8Cache.size >= UTF8_CACHE_MAX) utf8Cache.clear();
    bytes = Buffer.from(text, "utf8");
    utf8Cache.set(text, bytes);
  }
  return bytes;
}

/** What `kind` says for a sealed record whose body was not opened (no key). */
export const SEALED_KIND = "(sealed)";

/** True when the identity of a record with these fields goes in the encrypted body. */
function identitySealed(fields: Pick<HeaderFields, "cipher">, version: number): boolean {
  return version >= 2 && fields.cipher !== CipherId.NONE;
}

/** Size of the header for these fields. */
export function headerLength(kind: string, owner: string | undefined, sealed = false): number {
  return sealed ? HEADER_FIXED : HEADER_FIXED + utf8(kind).length + (owner === undefined ? 0 : utf8(owner).length);
}

/** Identity blocks, cached for the same reason and with the same bound as `utf8`. */
const identityCache = new Map<string, Buffer>();

/**
 * The identity block at the start of a sealed record's plaintext: `K (1) ‖ O (2) ‖ kind ‖ owner`.
 * The result is shared: copy it, never change it.
 * @throws RangeError as `writeHeader` does, for a kind or owner out of bounds
 */
export function encodeIdentity(kind: string, owner: string | undefined): Buffer {
  // The kind's length first makes the key unambiguous whatever characters kind and owner hold.
  const cacheKey = `${kind.length}:${kind}${owner ?? ""}`;
  let block = identityCache.get(cacheKey);
  if (block === undefined) {
    if (identityCache.size >= UTF8_CACHE_MAX) identityCache.clear();
    block = identityBlock(kind, owner);
    identityCache.set(cacheKey, block);
  }
  return block;
}

function identityBlock(kind: string, owner: string | undefined): Buffer {
  const k = utf8(kind);
  const o = owner === undefined ? undefined : utf8(owner);
  checkIdentity(k.length, o?.length ?? 0);
  const out = Buffer.allocUnsafe(3 + k.length + (o?.length ?? 0));
  out[0] = k.length;
  out.writeUInt16BE(o?.length ?? 0, 1);
  out.set(k, 3);
  if (o !== undefined) out.set(o, 3 + k.length);
  return out;
}

/** Reads the identity block of a decrypted body; undefined when it does not fit. */
export function decodeIdentity(plain: Buffer): { kind: string; owner: string | undefined; payloadStart: number } | undefined {
  if (plain.length < 3) return undefined;
  const k = plain[0]!;
  const o = plain.readUInt16BE(1);
  const end = 3 + k + o;
  if (k === 0 || end > plain.length) return undefined;
  return { kind: plain.toString("utf8", 3, 3 + k), owner: o === 0 ? undefined : plain.toString("utf8", 3 + k, end), payloadStart: end };
}

function checkIdentity(kindLen: number, ownerLen: number): void {
  if (kindLen === 0 || kindLen > 255) throw new RangeError(`record kind must be 1-255 UTF-8 bytes, got ${kindLen}`);
  if (ownerLen > 0xffff) throw new RangeError(`record owner must be at most 65535 UTF-8 bytes, got ${ownerLen}`);
}

function writeU32(h: Buffer, v: number, at: number): void {
  h[at] = v >>> 24;
  h[at + 1] = (v >>> 16) & 0xff;
  h[at + 2] = (v >>> 8) & 0xff;
  h[at + 3] = v & 0xff;
}

/**
 * Writes the header at the start of `h` (which may be longer: the plain append path
 * builds the whole record in one allocation). In version 2 with a cipher, kind and
 * owner are checked but not written (they go in the body: `encodeIdentity`).
 * @throws RangeError when kind is empty or over 255 bytes, owner over 65535 bytes, or seq is not a safe integer
 */
export function writeHeader(h: Buffer, fields: HeaderFields, bodyLen: number, version: 1 | 2 = FORMAT_VERSION): number {
  const kind = utf8(fields.kind);
  const owner = fields.owner === undefined ? undefined : utf8(fields.owner);
  checkIdentity(kind.length, owner === undefined ? 0 : owner.length);
  if (!Number.isSafeInteger(fields.seq) || fields.seq < 0) throw new RangeError(`bad seq ${fields.seq}`);
  const sealed = identitySealed(fields, version);
  const kindLen = sealed ? 0 : kind.length;
  const ownerLen = sealed || owner === undefined ? 0 : owner.length;
  h[0] = RECORD_MAGIC;
  h[1] = version;
  h[2] = flagsOf(fields);
  h[3] = kindLen;
  writeU32(h, fields.epoch >>> 0, 4);
  writeU32(h, Math.floor(fields.seq / TWO_32), 8);
  writeU32(h, fields.seq >>> 0, 12);
  h[16] = ownerLen >>> 8;
  h[17] = ownerLen & 0xff;
  writeU32(h, bodyLen, 18);
  if (!sealed) {
    h.set(kind, HEADER_FIXED);
    if (owner !== undefined) h.set(owner, HEADER_FIXED + kindLen);
  }
  return HEADER_FIXED + kindLen + ownerLen;
}

/** Builds the header (the AAD) for a record whose body will be `bodyLen` bytes. */
export function encodeHeader(fields: HeaderFields, bodyLen: number, version: 1 | 2 = FORMAT_VERSION): Buffer {
  const h = Buffer.allocUnsafe(headerLength(fields.kind, fields.owner, identitySealed(fields, version)));
  writeHeader(h, fields, bodyLen, version);
  return h;
}

/** Seals a record already laid out in `buf`: writes the CRC over all bytes before it. */
export function writeCrc(buf: Buffer): Buffer {
  const end = buf.length - CRC_LEN;
  buf.writeUInt32BE(crc32(buf.subarray(0, end)), end);
  return buf;
}

/** Concatenates the parts of a record and appends the CRC over all of them. */
export function assemble(parts: ReadonlyArray<Uint8Array | undefined>): Buffer {
  let total = CRC_LEN;
  for (const p of parts) if (p !== undefined) total += p.length;
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (const p of parts) {
    if (p === undefined) continue;
    out.set(p, at);
    at += p.length;
  }
  out.writeUInt32BE(crc32(out.subarray(0, at)), at);
  return out;
}

/** Reads seq/epoch/owner from a damaged record if its header is still there (for reporting only). */
function looseHeader(buf: Buffer): { seq: number | undefined; owner: string | undefined; epoch: number | undefined } {
  if (buf.length < HEADER_FIXED || buf[0] !== RECORD_MAGIC) return { seq: undefined, owner: undefined, epoch: undefined };
  const seq = buf.readUInt32BE(8) * TWO_32 + buf.readUInt32BE(12);
  const kindLen = buf[3]!;
  const ownerLen = buf.readUInt16BE(16);
  const ownerEnd = HEADER_FIXED + kindLen + ownerLen;
  const owner = ownerLen > 0 && ownerEnd <= buf.length ? buf.toString("utf8", HEADER_FIXED + kindLen, ownerEnd) : undefined;
  return { seq: Number.isSafeInteger(seq) ? seq : undefined, owner, epoch: buf.readUInt32BE(4) };
}

function fail(buf: Buffer, reason: string): ParseResult {
  return { ok: false, reason, ...looseHeader(buf) };
}

/**
 * Checks the CRC and layout of one stored record. Never throws: damage is a result.
 * Version dispatch lives here so that older formats keep loading when a new one is added.
 */
export function parseRecord(buf: Buffer): ParseResult {
  if (buf.length < HEADER_FIXED + CRC_LEN) return fail(buf, `truncated: ${buf.length} bytes`);
  if (buf[0] !== RECORD_MAGIC) return fail(buf, "bad magic byte");
  const end = buf.length - CRC_LEN;
  if (buf.readUInt32BE(end) !== crc32(buf.subarray(0, end))) return fail(buf, "CRC32 mismatch");
  const version = buf[1]!;
  if (version === 1 || version === 2) return parseLayout(buf, end, version);
  return fail(buf, `unknown format version ${version}`);
}

/** Versions 1 and 2 share the layout; version 2 forbids markers and identity in the clear under a cipher. */
function parseLayout(buf: Buffer, end: number, version: 1 | 2): ParseResult {
  const flags = buf[2]!;
  const kindLen = buf[3]!;
  const ownerLen = buf.readUInt16BE(16);
  const bodyLen = buf.readUInt32BE(18);
  const marker = (flags & Flag.MARKER) !== 0;
  const chained = (flags & Flag.CHAIN) !== 0;
  const cipher = ((flags >> 2) & 3) as CipherId;
  if (cipher > CipherId.SM4) return fail(buf, `unknown cipher id ${cipher}`);
  if (marker && bodyLen !== 0) return fail(buf, "marker with a body");
  if (version === 2 && (flags & (Flag.COMPLETE | Flag.MARKER)) !== 0) return fail(buf, "a version-2 record with a COMPLETE or MARKER flag");
  if (version === 2 && cipher !== CipherId.NONE && kindLen + ownerLen !== 0) return fail(buf, "an encrypted version-2 record with kind or owner in the clear");
  const headerEnd = HEADER_FIXED + kindLen + ownerLen;
  const bodyEnd = headerEnd + bodyLen;
  const tagEnd = bodyEnd + (cipher !== CipherId.NONE && !marker ? TAG_LEN : 0);
  const chainEnd = tagEnd + (chained ? 2 * MAC_LEN : 0);
  const markerTagEnd = chainEnd + (marker && (cipher !== CipherId.NONE || chained) ? TAG_LEN : 0);
  if (markerTagEnd !== end) return fail(buf, `length mismatch: layout says ${markerTagEnd + CRC_LEN}, stored ${buf.length}`);
  const seq = buf.readUInt32BE(8) * TWO_32 + buf.readUInt32BE(12);
  if (!Number.isSafeInteger(seq)) return fail(buf, "seq out of range");
  const record = new ParsedRecord(buf, version, seq, flags, headerEnd, bodyEnd, tagEnd, chainEnd, markerTagEnd);
  return { ok: true, record };
}
