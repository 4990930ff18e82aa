import { randomBytes } from "node:crypto";
import { ChainKey, equalTags, RecordCipher, resolveKey } from "./crypto.js";
import { WalBadKeyError } from "./errors.js";
import type { Security } from "./record-seal.js";
import type { WalMeta } from "./storage.js";
import type { WalOptions } from "./types.js";

/**
 * Matches the configured keys against the check values stored at creation, so that a
 * wrong key is a clear WAL_BAD_KEY at open instead of every record failing later.
 * Returns the security context and the meta to store.
 * @throws WalBadKeyError on a wrong, missing or unexpected key
 */
export function resolveSecurity(
  options: Pick<WalOptions, "encryption" | "hmac" | "ringBits">,
  stored: WalMeta | undefined,
): { security: Security; meta: WalMeta } {
  const meta: WalMeta = stored ?? { format: 1, ringBits: options.ringBits ?? 16, epoch: 0, salt: randomBytes(16).toString("hex") };
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
  return { security: { cipher, chain }, meta: { ...meta } };
}
