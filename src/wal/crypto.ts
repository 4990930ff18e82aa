import { createCipheriv, createDecipheriv, createHmac, hkdfSync, timingSafeEqual, type Cipher, type CipherGCM } from "node:crypto";
import { ConfigError } from "../core/index.js";
import { CipherId, MAC_LEN, TAG_LEN } from "./record-format.js";

export type CipherAlgorithm = "aes-256-gcm" | "sm4";

/** Minimum key material accepted; HKDF stretches it into the subkeys. */
const MIN_KEY_BYTES = 16;

/**
 * Turns configured key material into bytes. A string may be `hex:<hex>`,
 * `base64:<base64>`, or anything else (taken as UTF-8 bytes, e.g. a passphrase from
 * the environment).
 * @throws ConfigError when the material is shorter than 16 bytes
 */
export function resolveKey(key: Buffer | string, what = "wal key"): Buffer {
  let bytes: Buffer;
  if (Buffer.isBuffer(key)) bytes = key;
  else if (key.startsWith("hex:")) bytes = Buffer.from(key.slice(4), "hex");
  else if (key.startsWith("base64:")) bytes = Buffer.from(key.slice(7), "base64");
  else bytes = Buffer.from(key, "utf8");
  if (bytes.length < MIN_KEY_BYTES) throw new ConfigError(what, `key material must be at least ${MIN_KEY_BYTES} bytes`);
  return bytes;
}

/** Reads key material from the environment (default `KOVA_WAL_KEY`). */
export function keyFromEnv(name = "KOVA_WAL_KEY"): string | undefined {
  const v = process.env[name];
  return v === undefined || v === "" ? undefined : v;
}

function subkey(master: Buffer, salt: Buffer, info: string): Buffer {
  return Buffer.from(hkdfSync("sha256", master, salt, `kova-wal/v1/${info}`, 32));
}

/** HMAC-SHA256 truncated to 128 bits (as RFC 4868 does), over the parts in order. */
export function hmac128(key: Buffer, parts: ReadonlyArray<Uint8Array>): Buffer {
  const h = createHmac("sha256", key);
  for (const p of parts) h.update(p);
  return h.digest().subarray(0, MAC_LEN);
}

export function equalTags(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

const CHECK_TEXT = Buffer.from("kova-wal key check v1");
const HEAD_TEXT = Buffer.from("kova-wal chain head v2");

/**
 * The nonce of format-v1 records (read only now): epoch (4 bytes) then seq (8 bytes)
 * under the WAL's one long-term key. It relied on the epoch in the unauthenticated meta,
 * which a restored backup rolls back; v2 records use a per-open key (SessionCipher).
 */
function nonce(epoch: number, seq: number, size: 12 | 16): Buffer {
  // One scratch buffer per size: OpenSSL copies the IV (and ECB input) at the call, so
  // reusing it saves an allocation per record on the hot path.
  const iv = size === 12 ? IV12 : IV16;
  iv.writeUInt32BE(epoch >>> 0, 0);
  iv.writeUInt32BE(Math.floor(seq / 2 ** 32), 4);
  iv.writeUInt32BE(seq >>> 0, 8);
  if (size === 16) iv.writeUInt32BE(0, 12); // sm4-ctr: the block counter, starting at 0
  return iv;
}
const IV12 = Buffer.alloc(12);
const IV16 = Buffer.alloc(16);

/**
 * The WAL's long-term cipher keys, derived by HKDF from one master key and the WAL's
 * salt: the v1 record key (read only), marker and completion-batch tags (v1), the key
 * check value, the side table's key-naming key, and the base from which every open
 * derives its own SessionCipher.
 */
export class RecordCipher {
  readonly id: CipherId;
  readonly checkValue: Buffer;
  /** Authenticates completion batches (completion.ts). */
  readonly doneKey: Buffer;
  readonly #keys: AeadKeys;
  /**
   * Completion markers have no body to encrypt; their tag is a PRF of (epoch, seq):
   * one block cipher call under a marker subkey through a long-lived ECB context (a
   * fresh HMAC or GCM context per marker costs several microseconds; this ~0.7 µs).
   */
  readonly #markerPrf: Cipher;
  readonly #sessionBase: Buffer;
  readonly #kvNameKey: Buffer;

  constructor(
    readonly algorithm: CipherAlgorithm,
    master: Buffer,
    salt: Buffer,
  ) {
    this.id = algorithm === "aes-256-gcm" ? CipherId.AES_256_GCM : CipherId.SM4;
    // SM4 takes a 128-bit key; AES-256 a 256-bit one.
    this.#keys = {
      id: this.id,
      enc: subkey(master, salt, `${algorithm}/enc`).subarray(0, algorithm === "sm4" ? 16 : 32),
      mac: subkey(master, salt, `${algorithm}/mac`),
    };
    this.doneKey = subkey(master, salt, `${algorithm}/done`);
    const markerKey = subkey(master, salt, `${algorithm}/marker`).subarray(0, algorithm === "sm4" ? 16 : 32);
    this.#markerPrf = createCipheriv(algorithm === "sm4" ? "sm4-ecb" : "aes-256-ecb", markerKey, null);
    this.#markerPrf.setAutoPadding(false);
    this.checkValue = hmac128(subkey(master, salt, `${algorithm}/check`), [CHECK_TEXT]);
    this.#sessionBase = subkey(master, salt, `${algorithm}/session`);
    this.#kvNameKey = subkey(master, salt, `${algorithm}/kv-name`);
  }

  /** The keys of one open of the WAL, from its random salt (see SessionCipher). */
  session(openSalt: Buffer): SessionCipher {
    return new SessionCipher(this.algorithm, this.#sessionBase, openSalt);
  }

  /**
   * The stored name of a side-table key: HMAC-SHA256 of the key, so that the key (an
   * actor id, say) is not on disk in the clear, while lookups stay one read.
   */
  kvName(key: string): Buffer {
    return createHmac("sha256", this.#kvNameKey).update(key, "utf8").digest();
  }

  /** The marker tag for (epoch, seq): E_markerKey(epoch ‖ seq ‖ "MRK1"), 16 bytes. */
  markerTag(epoch: number, seq: number): Buffer {
    const block = nonce(epoch, seq, 16);
    block.write("MRK1", 12, "latin1");
    return this.#markerPrf.update(block);
  }

  /**
   * Decrypts and authenticates a format-v1 body (IV epoch ‖ seq under the long-term
   * key, SM4's MAC over header ‖ body); undefined when authentication fails. Nothing is
   * sealed this way any more.
   */
  open(header: Buffer, body: Buffer, tag: Buffer, epoch: number, seq: number): Buffer | undefined {
    return aeadOpen(
      this.#keys,
      (size) => nonce(epoch, seq, size),
      header,
      body,
      tag,
      (b) => [header, b],
    );
  }
}

interface AeadKeys {
  id: CipherId;
  enc: Buffer;
  /** SM4's MAC key (encrypt-then-MAC: Node has no SM4-GCM). */
  mac: Buffer;
}

/**
 * AES-256-GCM, or SM4-CTR then HMAC-SHA256/128 over `macInput(ciphertext)`. `iv` gives the
 * nonce in the size each mode takes (GCM 12 bytes; CTR 16, the last 4 the block counter).
 */
function aeadSeal(
  k: AeadKeys,
  iv: (size: 12 | 16) => Buffer,
  aad: Uint8Array,
  parts: ReadonlyArray<Uint8Array>,
  macInput: (body: Buffer) => Uint8Array[],
): { body: Buffer; tag: Buffer } {
  const gcm = k.id === CipherId.AES_256_GCM;
  const c = gcm ? createCipheriv("aes-256-gcm", k.enc, iv(12), { authTagLength: TAG_LEN }) : createCipheriv("sm4-ctr", k.enc, iv(16));
  if (gcm) (c as CipherGCM).setAAD(aad);
  const body = parts.length === 1 ? c.update(parts[0]!) : Buffer.concat(parts.map((p) => c.update(p)));
  c.final(); // stream modes: final() returns no bytes (GCM: it finishes the tag)
  return { body, tag: gcm ? (c as CipherGCM).getAuthTag() : hmac128(k.mac, macInput(body)) };
}

function aeadOpen(
  k: AeadKeys,
  iv: (size: 12 | 16) => Buffer,
  aad: Uint8Array,
  body: Uint8Array,
  tag: Uint8Array,
  macInput: (body: Uint8Array) => Uint8Array[],
): Buffer | undefined {
  if (k.id === CipherId.AES_256_GCM) {
    try {
      const d = createDecipheriv("aes-256-gcm", k.enc, iv(12), { authTagLength: TAG_LEN });
      d.setAAD(aad);
      d.setAuthTag(tag);
      return Buffer.concat([d.update(body), d.final()]);
    } catch {
      return undefined;
    }
  }
  if (!equalTags(tag, hmac128(k.mac, macInput(body)))) return undefined;
  const d = createDecipheriv("sm4-ctr", k.enc, iv(16));
  return Buffer.concat([d.update(body), d.final()]);
}

/** What a session nonce counts; each has its own counter, so the nonces cannot meet. */
export const NonceDomain = { RECORD: 1, DONE: 2, KV: 3 } as const;
export type NonceDomain = (typeof NonceDomain)[keyof typeof NonceDomain];

/** A session nonce: domain (4 bytes) then counter (8 bytes), then for SM4-CTR a zero block counter. */
function sessionNonce(domain: NonceDomain, counter: number, size: 12 | 16): Buffer {
  const iv = size === 12 ? SIV12 : SIV16;
  iv.writeUInt32BE(domain, 0);
  iv.writeUInt32BE(Math.floor(counter / 2 ** 32), 4);
  iv.writeUInt32BE(counter >>> 0, 8);
  if (size === 16) iv.writeUInt32BE(0, 12);
  return iv;
}
const SIV12 = Buffer.alloc(12);
const SIV16 = Buffer.alloc(16);

/**
 * Authenticated encryption under the keys of ONE open of the WAL (format v2). Every
 * open draws a fresh random 32-byte salt, stores it in the clear (the `opens` table,
 * keyed by the open's epoch) and flushes it before its first encryption; its keys are
 * HKDF(long-term session base, salt). The nonce is a counter that never repeats within
 * one open: (RECORD, seq), (DONE, batch key), (KV, side-table write number). So a nonce
 * repeats under one key only if two opens drew the same 256-bit salt — also after a
 * data directory is restored from a backup or copied to another machine, where an
 * epoch counter read from the (unauthenticated) meta would repeat. docs/wal.md,
 * "Why nonces never repeat".
 */
export class SessionCipher {
  readonly id: CipherId;
  readonly #keys: AeadKeys;

  constructor(
    readonly algorithm: CipherAlgorithm,
    base: Buffer,
    salt: Buffer,
  ) {
    this.id = algorithm === "aes-256-gcm" ? CipherId.AES_256_GCM : CipherId.SM4;
    const info = (what: string) => `kova-wal/v2/${algorithm}/${what}`;
    this.#keys = {
      id: this.id,
      enc: Buffer.from(hkdfSync("sha256", base, salt, info("enc"), algorithm === "sm4" ? 16 : 32)),
      mac: Buffer.from(hkdfSync("sha256", base, salt, info("mac"), 32)),
    };
  }

  /** Encrypts `parts` (as one plaintext) under the nonce (domain, counter); `aad` is authenticated only. */
  seal(domain: NonceDomain, counter: number, aad: Uint8Array, parts: ReadonlyArray<Uint8Array>): { body: Buffer; tag: Buffer } {
    // SM4's MAC covers the nonce too, so a body cannot be moved to another counter.
    return aeadSeal(
      this.#keys,
      (size) => sessionNonce(domain, counter, size),
      aad,
      parts,
      (body) => [sessionNonce(domain, counter, 16), aad, body],
    );
  }

  /** Decrypts and authenticates; undefined when authentication fails. */
  open(domain: NonceDomain, counter: number, aad: Uint8Array, body: Uint8Array, tag: Uint8Array): Buffer | undefined {
    return aeadOpen(
      this.#keys,
      (size) => sessionNonce(domain, counter, size),
      aad,
      body,
      tag,
      (b) => [sessionNonce(domain, counter, 16), aad, b],
    );
  }
}

/** The keyed HMAC chain (`wal-hmac`): each record's mac covers the previous record's mac. */
export class ChainKey {
  readonly checkValue: Buffer;
  readonly markerKey: Buffer;
  /** Authenticates completion batches (completion.ts). */
  readonly doneKey: Buffer;
  readonly #key: Buffer;
  readonly #headKey: Buffer;
  readonly #overflowKey: Buffer;

  constructor(master: Buffer, salt: Buffer) {
    this.#key = subkey(master, salt, "chain");
    this.markerKey = subkey(master, salt, "chain/marker");
    this.doneKey = subkey(master, salt, "chain/done");
    this.checkValue = hmac128(subkey(master, salt, "chain/check"), [CHECK_TEXT]);
    this.#headKey = subkey(master, salt, "chain/head");
    this.#overflowKey = subkey(master, salt, "chain/overflow");
  }

  /**
   * The head's tag: it binds the newest seq, its mac and the overflow digest, so that
   * truncating the newest records and writing back an older head, or deleting an
   * overflow record, cannot go unnoticed by someone without the key.
   */
  headTag(seq: number, mac: Uint8Array, overflow: Uint8Array): Buffer {
    const s = Buffer.allocUnsafe(8);
    s.writeUInt32BE(Math.floor(seq / 2 ** 32), 0);
    s.writeUInt32BE(seq >>> 0, 4);
    return hmac128(this.#headKey, [HEAD_TEXT, s, mac, overflow]);
  }

  /**
   * One overflow seq's share of the overflow digest. The digest is the XOR of the shares
   * of every seq in the overflow table (a keyed set hash, as in XOR-MAC): adding or
   * removing one seq flips it in O(1), and without the key nobody can make a set with a
   * seq missing hash to the same value.
   */
  overflowShare(seq: number): Buffer {
    const s = Buffer.allocUnsafe(8);
    s.writeUInt32BE(Math.floor(seq / 2 ** 32), 0);
    s.writeUInt32BE(seq >>> 0, 4);
    return hmac128(this.#overflowKey, [s]);
  }

  /** mac(n) = HMAC(key, mac(n-1) ‖ header ‖ body ‖ tag), truncated to 128 bits. */
  link(prevMac: Uint8Array, parts: ReadonlyArray<Uint8Array | undefined>): Buffer {
    const h = createHmac("sha256", this.#key);
    h.update(prevMac);
    for (const p of parts) if (p !== undefined) h.update(p);
    return h.digest().subarray(0, MAC_LEN);
  }
}

export const ZERO_MAC = Buffer.alloc(MAC_LEN);
