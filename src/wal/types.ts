import type { Logger } from "../core/index.js";
import type { CipherAlgorithm } from "./crypto.js";

export type SyncMode = "normal" | "full";
export type CorruptPolicy = "skip" | "stop-owner";
export type RecordStatus = "PENDING" | "COMPLETE";

export interface WalOptions {
  /** LMDB environment directory (created if missing). */
  dir: string;
  /** Ring of 2^k slots, default 16. An existing WAL keeps the size it was created with. */
  ringBits?: number;
  /** `full` (default): append resolves after the flush. `normal`: at commit. */
  sync?: SyncMode;
  /** Key material: Buffer, `hex:…`, `base64:…` or a passphrase (≥ 16 bytes); subkeys by HKDF. */
  encryption?: { algorithm: CipherAlgorithm; key: Buffer | string };
  /** Keyed HMAC chain over records (`wal-hmac`). */
  hmac?: { key: Buffer | string };
  /** `skip` (default): skip corrupt records. `stop-owner`: also withhold the owner's later PENDING records. */
  corruptPolicy?: CorruptPolicy;
  /** Most PENDING records at once before append waits (default: the ring size). */
  maxPending?: number;
  /** How long append waits for room when maxPending is reached (default 5000 ms) before WAL_FULL. */
  backpressureTimeoutMs?: number;
  /** Where its lines go; none: it writes nothing (a library stays quiet inside someone else's service). */
  logger?: Logger;
}

export interface WalRecord<T = unknown> {
  seq: number;
  epoch: number;
  kind: string;
  owner?: string;
  payload: T;
  status: RecordStatus;
}

export interface CorruptRecord {
  seq: number;
  slot: number;
  reason: string;
  /** Where the damaged bytes were found: a ring slot, the overflow table, or a completion batch (whose seqs are then re-executed). */
  where?: "ring" | "overflow" | "done";
}

export interface ChainBreak {
  seq: number;
  reason: string;
}

export interface RecoveryReport {
  /** COMPLETE records skipped. */
  complete: number;
  /** PENDING records to re-execute, in seq order; the seq is the idempotency key. */
  pending: WalRecord[];
  /** Damaged records found by this open (now quarantined), with their seq. */
  corrupt: CorruptRecord[];
  /** Valid records from an earlier lap (or wrong slot), ignored. */
  stale: number;
  /** The epoch this open runs in (bumped at every open). */
  epoch: number;
  /** Under `stop-owner`: PENDING records held back because an earlier record of their owner is corrupt. */
  withheld: WalRecord[];
  /** With `wal-hmac`: where the chain breaks (deleted, reordered or truncated records). */
  chainBreaks: ChainBreak[];
}
