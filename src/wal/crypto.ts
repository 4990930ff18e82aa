import { createCipheriv, createDecipheriv, createHmac, hkdfSync, timingSafeEqual, type Cipher } from "node:crypto";
import { ConfigError } from "../core/errors.js";
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

/**
 * The nonce: epoch (4 bytes) then seq (8 bytes). Seq never repeats inside an epoch
 * and the epoch is bumped and flushed at every open before the first encryption, so
 * an IV is never reused even if seqs after a crash are handed out again.
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

/** Authenticated encryption of record bodies, with subkeys derived by HKDF from one master key. */
export class RecordCipher {
  readonly id: CipherId;
  readonly checkValue: Buffer;
  /** Authenticates completion batches (completion.ts). */
  readonly doneKey: Buffer;
  readonly #encKey: Buffer;
  readonly #macKey: Buffer;
  /**
   * Completion markers have no body to encrypt; their tag is a PRF of (epoch, seq):
   * one block cipher call under a marker subkey through a long-lived ECB context (a
   * fresh HMAC or GCM context per marker costs several microseconds; this ~0.7 µs).
   */
  readonly #markerPrf: Cipher;

  constructor(
    readonly algorithm: CipherAlgorithm,
    master: Buffer,
    salt: Buffer,
  ) {
    this.id = algorithm === "aes-256-gcm" ? CipherId.AES_256_GCM : CipherId.SM4;
    // SM4 takes a 128-bit key; AES-256 a 256-bit one.
    this.#encKey = subkey(master, salt, `${algorithm}/enc`).subarray(0, algorithm === "sm4" ? 16 : 32);
    this.#macKey = subkey(master, salt, `${algorithm}/mac`);
    this.doneKey = subkey(master, salt, `${algorithm}/done`);
    const markerKey = subkey(master, salt, `${algorithm}/marker`).subarray(0, algorithm === "sm4" ? 16 : 32);
    this.#markerPrf = createCipheriv(algorithm === "sm4" ? "sm4-ecb" : "aes-256-ecb", markerKey, null);
    this.#markerPrf.setAutoPadding(false);
    this.checkValue = hmac128(subkey(master, salt, `${algorithm}/check`), [CHECK_TEXT]);
  }

  /** The marker tag for (epoch, seq): E_markerKey(epoch ‖ seq ‖ "MRK1"), 16 bytes. */
  markerTag(epoch: number, seq: number): Buffer {
    const block = nonce(epoch, seq, 16);
    block.write("MRK1", 12, "latin1");
    return this.#markerPrf.update(block);
  }

  /** Encrypts a body; `header` is authenticated but not encrypted. */
  seal(header: Buffer, plaintext: Uint8Array, epoch: number, seq: number): { body: Buffer; tag: Buffer } {
    if (this.id === CipherId.AES_256_GCM) {
      const c = createCipheriv("aes-256-gcm", this.#encKey, nonce(epoch, seq, 12), { authTagLength: TAG_LEN });
      c.setAAD(header);
      const body = c.update(plaintext);
      c.final(); // GCM is a stream mode: final() returns no bytes, only finishes the tag
      return { body, tag: c.getAuthTag() };
    }
    // SM4: Node has no SM4-GCM, so CTR then HMAC over header and ciphertext (encrypt-then-MAC).
    const c = createCipheriv("sm4-ctr", this.#encKey, nonce(epoch, seq, 16));
    const body = c.update(plaintext);
    c.final();
    return { body, tag: hmac128(this.#macKey, [header, body]) };
  }

  /** Decrypts and authenticates a body; returns undefined when authentication fails. */
  open(header: Buffer, body: Buffer, tag: Buffer, epoch: number, seq: number): Buffer | undefined {
    if (this.id === CipherId.AES_256_GCM) {
      try {
        const d = createDecipheriv("aes-256-gcm", this.#encKey, nonce(epoch, seq, 12), { authTagLength: TAG_LEN });
        d.setAAD(header);
        d.setAuthTag(tag);
        return Buffer.concat([d.update(body), d.final()]);
      } catch {
        return undefined;
      }
    }
    if (!equalTags(tag, hmac128(this.#macKey, [header, body]))) return undefined;
    const d = createDecipheriv("sm4-ctr", this.#encKey, nonce(epoch, seq, 16));
    return Buffer.concat([d.update(body), d.final()]);
  }
}

/** The keyed HMAC chain (`wal-hmac`): each record's mac covers the previous record's mac. */
export class ChainKey {
  readonly checkValue: Buffer;
  readonly markerKey: Buffer;
  /** Authenticates completion batches (completion.ts). */
  readonly doneKey: Buffer;
  readonly #key: Buffer;

  constructor(master: Buffer, salt: Buffer) {
    this.#key = subkey(master, salt, "chain");
    this.markerKey = subkey(master, salt, "chain/marker");
    this.doneKey = subkey(master, salt, "chain/done");
    this.checkValue = hmac128(subkey(master, salt, "chain/check"), [CHECK_TEXT]);
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
