import { open, type Database, type Key, type RootDatabase } from "lmdb";
import type { LockManager, TransactionLock } from "./locks.js";
import { scanDecoder, type ScanSummary } from "./ring-scan.js";

/**
 * The LMDB environment of one WAL and its named databases:
 *
 * - `ring`: slot (uint32) → stored record bytes; the ring of 2^k slots;
 * - `overflow`: seq → stored record bytes of PENDING records moved out of the ring
 *   because their slot came round again (compaction keeps every incomplete record);
 * - `done`: batch number → completion batch (completion.ts): the seqs made COMPLETE
 *   by one event turn;
 * - `corrupt`: [seq, where, slot] → quarantined damaged bytes and the reason;
 * - `kv`: side table written in the same transaction as a COMPLETE mark (without a
 *   cipher; with one, read only: what older versions wrote in the clear);
 * - `kvsealed`: the side table with a cipher: key name (HMAC of the key) → sealed value (kv-seal.ts);
 * - `opens`: epoch (uint32) → the random salt of that open's keys (crypto.ts, SessionCipher);
 * - `meta`: epoch, ring size, salt, key check values, chain head.
 *
 * lmdb semantics relied on (lmdb-js 3.x): async writes issued in one event turn are
 * committed in one transaction (`eventTurnBatching`, the default, set explicitly);
 * with `overlappingSync` (default off Windows) a write's promise resolves at commit and
 * `env.flushed` resolves once that commit is on disk. No sync write API is used
 * (`noSync` would trade durability for corruption; `transactionSync` split batches and
 * was seen to hang a close).
 */
export interface WalMeta {
  /** The newest record format this WAL was opened with. */
  format: 1 | 2;
  ringBits: number;
  epoch: number;
  salt: string; // hex
  cipher?: { algorithm: string; check: string };
  chain?: { check: string };
}

export interface ChainHead {
  seq: number;
  mac: string; // hex
  /** The overflow digest (hex; ChainKey.overflowShare XORed over the overflow table's seqs). Absent in v1 heads. */
  overflow?: string;
  /** ChainKey.headTag over seq, mac and overflow (hex). Absent in v1 heads. */
  tag?: string;
}

export interface CorruptEntry {
  seq: number | undefined;
  where: "ring" | "overflow" | "done";
  slot: number | undefined;
  reason: string;
  bytes: Buffer;
}

export type CorruptKey = [number, string, number];

export class WalStorage {
  readonly ring: Database<Buffer, number>;
  /** The same ring, read through the in-place scan decoder (ring-scan.ts). */
  readonly ringFast: Database<Buffer | ScanSummary, number>;
  readonly overflow: Database<Buffer, number>;
  readonly done: Database<Buffer, number>;
  readonly corrupt: Database<CorruptEntry, CorruptKey>;
  readonly kv: Database<unknown, string>;
  readonly kvSealed: Database<Buffer, Buffer>;
  readonly opens: Database<Buffer, number>;
  readonly meta: Database<unknown, string>;
  #last: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly env: RootDatabase,
    private readonly locks: LockManager | undefined,
  ) {
    this.ring = env.openDB<Buffer, number>({ name: "ring", keyEncoding: "uint32", encoding: "binary" });
    // `encoder` is supported by lmdb-js but missing from its DatabaseOptions type.
    const fastOptions = { name: "ring", keyEncoding: "uint32", encoder: scanDecoder } as { name: string; keyEncoding: "uint32" };
    this.ringFast = env.openDB<Buffer | ScanSummary, number>(fastOptions);
    this.overflow = env.openDB<Buffer, number>({ name: "overflow", encoding: "binary" });
    this.done = env.openDB<Buffer, number>({ name: "done", encoding: "binary" });
    this.corrupt = env.openDB<CorruptEntry, CorruptKey>({ name: "corrupt" });
    this.kv = env.openDB<unknown, string>({ name: "kv" });
    this.kvSealed = env.openDB<Buffer, Buffer>({ name: "kvsealed", keyEncoding: "binary", encoding: "binary" });
    this.opens = env.openDB<Buffer, number>({ name: "opens", keyEncoding: "uint32", encoding: "binary" });
    this.meta = env.openDB<unknown, string>({ name: "meta" });
  }

  /** Opens (and creates) the environment; `locks` is absent for read-only tools. */
  static open(dir: string, locks: LockManager | undefined, readOnly = false): WalStorage {
    const env = open({
      path: dir,
      maxDbs: 12,
      readOnly,
      eventTurnBatching: true,
      // Values are already compact and CRC-checked; compression would hide bit flips.
      compression: false,
    });
    return new WalStorage(env, locks);
  }

  readMeta(): WalMeta | undefined {
    // Opened read-only, an environment without Kova's tables (another program's LMDB) has no
    // `meta` database at all: lmdb-js's openDB returns undefined instead of creating it.
    return (this.meta as Database<unknown, string> | undefined)?.get("wal") as WalMeta | undefined;
  }

  readHead(): ChainHead | undefined {
    return this.meta.get("head") as ChainHead | undefined;
  }

  /** The salt of the keys of the open in `epoch`, if that open had a cipher. */
  readOpenSalt(epoch: number): Buffer | undefined {
    return this.opens.get(epoch);
  }

  /** The newest epoch in the opens table (0 when empty). */
  lastOpenEpoch(): number {
    for (const key of this.opens.getKeys({ reverse: true, limit: 1 })) return key as number;
    return 0;
  }

  #tx(tx: TransactionLock): void {
    this.locks?.assertHeld(tx, 3);
  }

  #track<T>(p: Promise<T>): Promise<T> {
    this.#last = p;
    return p;
  }

  /** Every write goes through here: it demands the Transaction token and is tracked. */
  #put<K extends Key, V>(tx: TransactionLock, db: Database<V, K>, key: K, value: V): Promise<boolean> {
    this.#tx(tx);
    return this.#track(db.put(key, value));
  }

  #remove<K extends Key, V>(tx: TransactionLock, db: Database<V, K>, key: K): Promise<boolean> {
    this.#tx(tx);
    return this.#track(db.remove(key));
  }

  /** The promise of the most recent write (all writes of one turn share a commit). */
  get lastWrite(): Promise<unknown> {
    return this.#last;
  }

  writeMeta(tx: TransactionLock, meta: WalMeta): Promise<boolean> {
    return this.#put(tx, this.meta, "wal", meta);
  }

  writeHead(tx: TransactionLock, head: ChainHead): Promise<boolean> {
    return this.#put(tx, this.meta, "head", head);
  }

  putSlot(tx: TransactionLock, slot: number, bytes: Buffer): Promise<boolean> {
    return this.#put(tx, this.ring, slot, bytes);
  }

  removeSlot(tx: TransactionLock, slot: number): Promise<boolean> {
    return this.#remove(tx, this.ring, slot);
  }

  putOverflow(tx: TransactionLock, seq: number, bytes: Buffer): Promise<boolean> {
    return this.#put(tx, this.overflow, seq, bytes);
  }

  removeOverflow(tx: TransactionLock, seq: number): Promise<boolean> {
    return this.#remove(tx, this.overflow, seq);
  }

  putDone(tx: TransactionLock, key: number, bytes: Buffer): Promise<boolean> {
    return this.#put(tx, this.done, key, bytes);
  }

  removeDone(tx: TransactionLock, key: number): Promise<boolean> {
    return this.#remove(tx, this.done, key);
  }

  putCorrupt(tx: TransactionLock, entry: CorruptEntry): Promise<boolean> {
    return this.#put(tx, this.corrupt, [entry.seq ?? -1, entry.where, entry.slot ?? -1], entry);
  }

  putKv(tx: TransactionLock, key: string, value: unknown): Promise<boolean> {
    return this.#put(tx, this.kv, key, value);
  }

  removeKv(tx: TransactionLock, key: string): Promise<boolean> {
    return this.#remove(tx, this.kv, key);
  }

  putKvSealed(tx: TransactionLock, name: Buffer, sealed: Buffer): Promise<boolean> {
    return this.#put(tx, this.kvSealed, name, sealed);
  }

  writeOpen(tx: TransactionLock, epoch: number, salt: Buffer): Promise<boolean> {
    return this.#put(tx, this.opens, epoch, salt);
  }

  /** Resolves when every commit so far is on disk; rejects if a flush failed. */
  flushed(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.env.flushed.then(() => resolve(), reject);
    });
  }

  /**
   * After a failed commit lmdb rejects promises that no caller holds (its batch-start
   * marker's commit promise); attach handlers so they are not unhandled rejections.
   */
  observeCommitFailures(): void {
    const observe = () => {
      this.env.committed.then(undefined, () => undefined);
      this.env.flushed.then(undefined, () => undefined);
    };
    observe();
    setImmediate(observe);
  }

  close(): Promise<void> {
    return this.env.close();
  }
}
