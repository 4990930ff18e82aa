import { randomBytes } from "node:crypto";
import { ChainKey, equalTags, RecordCipher, resolveKey, type SessionCipher } from "./crypto.js";
import { WalBadKeyError } from "./errors.js";
import type { Security } from "./record-seal.js";
import type { WalMeta } from "./storage.js";
import type { WalOptions } from "./types.js";

/**
 * The SessionCipher of each open, by epoch, derived once from the salt that open stored
 * in the `opens` table (see SessionCipher for why each open has its own keys).
 */
export class SessionKeys {
  readonly #cache = new Map<number, SessionCipher | null>();

  constructor(
    private readonly cipher: RecordCipher,
    private readonly salts: (epoch: number) => Buffer | undefined,
  ) {}

  /** The keys of the open in `epoch`; undefined when its salt is not stored. */
  get(epoch: number): SessionCipher | undefined {
    let session = this.#cache.get(epoch);
    if (session === undefined) {
      const salt = this.salts(epoch);
      session = salt === undefined ? null : this.cipher.session(salt);
      this.#cache.set(epoch, session);
    }
    return session ?? undefined;
  }

  /** Registers the current open's salt (written in the same transaction as the epoch). */
  add(epoch: number, salt: Buffer): SessionCipher {
    const session = this.cipher.session(salt);
    this.#cache.set(epoch, session);
    return session;
  }
}

/**
 * Matches the configured keys against the check values stored at creation, so that a
 * wrong key is a clear WAL_BAD_KEY at open instead of every record failing later.
 * Returns the security context (with `salts` as the source of per-open keys) and the
 * meta to store.
 * @throws WalBadKeyError on a wrong, missing or unexpected key
 */
export function resolveSecurity(
  options: Pick<WalOptions, "encryption" | "hmac" | "ringBits">,
  stored: WalMeta | undefined,
  salts: (epoch: number) => Buffer | undefined = () => undefined,
): { security: Security; meta: WalMeta; sessions: SessionKeys | undefined } {
  const meta: WalMeta = stored ?? { format: 2, ringBits: options.ringBits ?? 16, epoch: 0, salt: randomBytes(16).toString("hex") };
  const salt = Buffer.from(meta.salt, "hex");
  const isNew = stored === undefined;

  let cipher: RecordCipher | undefined;
  if (options.encryption !== undefined) {
    cipher = new RecordCipher(options.encryption.algorithm, resolveKey(options.encryption.key, "wal.encryption.key"), salt);
    if (isNew) meta.cipher = { algorithm: cipher.algorithm, check: cipher.checkValue.toString("hex") };
    else if (meta.cipher === undefined) throw new WalBadKeyError("this WAL was created without encryption; open it without an encryption key");
    else if (meta.cipher.algorithm !== cipher.algorithm)
      throw new WalBadKeyError(`this WAL is encrypted with ${meta.cipher.algorithm}, not ${cipher.algorithm}`);
    else if (!equalTags(Buffer.from(meta.cipher.check, "hex"), cipher.checkValue))
      throw new WalBadKeyError("wrong WAL encryption key: it does not match the key this WAL was created with");
  } else if (meta.cipher !== undefined) {
    throw new WalBadKeyError(`this WAL is encrypted with ${meta.cipher.algorithm}; give its key (option encryption.key or KOVA_WAL_KEY)`);
  }

  let chain: ChainKey | undefined;
  if (options.hmac !== undefined) {
    chain = new ChainKey(resolveKey(options.hmac.key, "wal.hmac.key"), salt);
    if (isNew) meta.chain = { check: chain.checkValue.toString("hex") };
    else if (meta.chain === undefined) throw new WalBadKeyError("this WAL was created without an HMAC chain; open it without an hmac key");
    else if (!equalTags(Buffer.from(meta.chain.check, "hex"), chain.checkValue))
      throw new WalBadKeyError("wrong WAL hmac key: it does not match the key this WAL was created with");
  } else if (meta.chain !== undefined) {
    throw new WalBadKeyError("this WAL has an HMAC chain; give its key (option hmac.key)");
  }
  const sessions = cipher === undefined ? undefined : new SessionKeys(cipher, salts);
  const security: Security = sessions === undefined ? { cipher, chain } : { cipher, chain, sessions: (epoch) => sessions.get(epoch) };
  return { security, meta: { ...meta }, sessions };
}
