/**
 * `src/wal`: the node's LMDB-backed write-ahead log. See docs/wal.md.
 */
export { Wal } from "./wal.js";
export type {
  ChainBreak,
  CorruptPolicy,
  CorruptRecord,
  RecordStatus,
  RecoveryReport,
  SyncMode,
  WalOptions,
  WalRecord,
} from "./types.js";
export type { CipherAlgorithm } from "./crypto.js";
export { keyFromEnv, resolveKey } from "./crypto.js";
export { LockOrderError, WalBadKeyError, WalClosedError, WalCorruptError, WalFailedError, WalFullError, WalKvCorruptError } from "./errors.js";
export { BufferLock, LockManager, QueueLock, TransactionLock } from "./locks.js";
export { crc32 } from "./crc32.js";
export { FORMAT_VERSION } from "./record-format.js";
export { inspectWal, readWalRecords, verifyWal, type WalInspection, type WalRecordRead, type WalVerification } from "./inspect.js";
export { WalErrorCode } from "./errors.js";
