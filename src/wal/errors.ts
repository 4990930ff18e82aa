import { classifyErrorCodes, defineErrorCodes, KovaError, type KovaErrorOptions } from "../core/index.js";

/** The wal layer's error codes (stable: they travel over NATS and scripts match on them). */
export const WalErrorCode = defineErrorCodes("wal", {
  WAL_CORRUPT: "WAL_CORRUPT",
  WAL_FAILED: "WAL_FAILED",
  WAL_FULL: "WAL_FULL",
  WAL_CLOSED: "WAL_CLOSED",
  WAL_BAD_KEY: "WAL_BAD_KEY",
  LOCK_ORDER: "LOCK_ORDER",
});
// A WAL that cannot write or read is the node's failure, never a run's (LOCK_ORDER is a defect).
classifyErrorCodes({
  [WalErrorCode.WAL_CORRUPT]: "unavailable",
  [WalErrorCode.WAL_FAILED]: "unavailable",
  [WalErrorCode.WAL_FULL]: "unavailable",
  [WalErrorCode.WAL_CLOSED]: "unavailable",
  [WalErrorCode.WAL_BAD_KEY]: "unavailable",
});

/**
 * One class per WAL failure. None is retryable: a failed commit or flush cannot be
 * retried safely (the kernel may have dropped the dirty pages), so the WAL stops.
 */

/** A stored record failed its CRC32 or authentication check. */
export class WalCorruptError extends KovaError {
  constructor(
    readonly seq: number,
    reason: string,
    options: KovaErrorOptions = {},
  ) {
    super(WalErrorCode.WAL_CORRUPT, `WAL record ${seq} is corrupt: ${reason}`, { ...options, data: { seq, reason } });
  }
}

/** An encrypted side-table entry (`complete({ kv })`) failed authentication: edited, moved or unreadable. */
export class WalKvCorruptError extends KovaError {
  constructor(
    readonly key: string,
    reason: string,
  ) {
    super(
      WalErrorCode.WAL_CORRUPT,
      `WAL side-table entry ${JSON.stringify(key)} is corrupt: ${reason}; it was edited or damaged on disk, so rebuild it from its source (for an actor: the checkpoint on NATS)`,
      {
        data: { key, reason },
      },
    );
  }
}

/** A commit or flush failed earlier; the WAL refuses every later write. */
export class WalFailedError extends KovaError {
  constructor(cause: unknown) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super(WalErrorCode.WAL_FAILED, `WAL is in a failed state after a commit or flush error (${why}); reopen it to recover`, {
      cause,
    });
  }
}

/** The ring holds the maximum number of PENDING records and none completed in time. */
export class WalFullError extends KovaError {
  constructor(pending: number, timeoutMs: number) {
    super(WalErrorCode.WAL_FULL, `WAL is full: ${pending} PENDING records and none completed within ${timeoutMs} ms; complete records or raise maxPending`, {
      data: { pending, timeoutMs },
    });
  }
}

export class WalClosedError extends KovaError {
  constructor() {
    super(WalErrorCode.WAL_CLOSED, "WAL is closed");
  }
}

/** The key given does not match the key the WAL was created with (or none was given). */
export class WalBadKeyError extends KovaError {
  constructor(message: string) {
    super(WalErrorCode.WAL_BAD_KEY, message);
  }
}

/** A lock was acquired out of the order Buffer → Queue → Transaction, or inside an LMDB callback. */
export class LockOrderError extends KovaError {
  constructor(message: string) {
    super(WalErrorCode.LOCK_ORDER, message);
  }
}
