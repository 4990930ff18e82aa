import { mkdirSync } from "node:fs";
import { ErrorCode, KovaError } from "../core/errors.js";
import { defaultLogger, type Logger } from "../core/logger.js";
import { encodePayload } from "./codec.js";
import { WalFullError, WalErrorCode } from "./errors.js";
import { resolveSecurity } from "./keys.js";
import { LockManager, type QueueLock, type TransactionLock } from "./locks.js";
import { sealDone } from "./completion.js";
import { sealData, type Security } from "./record-seal.js";
import { scan, type PendingFound, type StoredEntry } from "./recovery.js";
import { Ring } from "./ring.js";
import { WalStorage, type WalMeta } from "./storage.js";
import { Durability } from "./sync.js";
import type { RecoveryReport, SyncMode, WalOptions, WalRecord } from "./types.js";

/** A PENDING record the WAL keeps safe (shape shared with the recovery scan). */
type PendingEntry = PendingFound;

interface Waiter {
  resolve(): void;
  reject(err: unknown): void;
}

const RESOLVED: Promise<void> = Promise.resolve();
const NOTHING = (): undefined => undefined;

/** What `open` has settled before the recovery scan. */
interface OpenContext {
  storage: WalStorage;
  locks: LockManager;
  ring: Ring;
  security: Security;
  sync: SyncMode;
  epoch: number;
  log: Logger;
  options: WalOptions;
}

/** Longest a healthy close waits for LMDB to finish. */
const CLOSE_TIMEOUT_MS = 10_000;

const internals = new WeakMap<Wal, { storage: WalStorage; locks: LockManager }>();

/** Test seam: the storage and locks of an open WAL (not exported from the package). */
export function walInternals(wal: Wal): { storage: WalStorage; locks: LockManager } {
  return internals.get(wal)!;
}

function notPending(seq: number): KovaError {
  return new KovaError(ErrorCode.INVALID_ID, `WAL seq ${seq} is not PENDING`, { data: { seq } });
}

function toRecord(e: PendingEntry): WalRecord {
  return { ...e.record };
}

/** lmdb's range entries already have the shape the scan reads (keys are numbers here). */
function entries(range: Iterable<{ key: unknown; value: unknown }>): Iterable<StoredEntry> {
  return range as Iterable<StoredEntry>;
}

/**
 * The write-ahead log of one node: log → execute → complete, with crash recovery.
 * See docs/wal.md for the format, sync modes, encryption, lock order and recovery.
 */
export class Wal {
  /** What the recovery scan at open found; `pending` must be re-executed. */
  readonly recovery: RecoveryReport;
  readonly #storage: WalStorage;
  readonly #locks: LockManager;
  readonly #ring: Ring;
  readonly #security: Security;
  readonly #durability: Durability;
  readonly #epoch: number;
  readonly #log: Logger;
  readonly #maxPending: number;
  readonly #backpressureMs: number;
  #nextSeq: number;
  #headMac: Buffer | undefined;
  readonly #pending = new Map<number, PendingEntry>();
  /**
   * PENDING entries per owner, in seq order. Completed entries are dropped lazily (on
   * read, or once they are half the list): an array push per append and a counter per
   * complete are cheaper than a Set, which matters when recovery indexes 500k records.
   */
  readonly #byOwner = new Map<string, { list: PendingEntry[]; dead: number }>();
  #waiters: Waiter[] = [];
  /** Completion batches on disk, oldest first, with the highest seq each names. */
  #doneBatches: Array<{ key: number; maxSeq: number }> = [];
  #nextDoneKey = 1;
  /** The completions of the current event turn, written as one batch at its end. */
  #turn: { seqs: number[]; promise: Promise<void>; resolve(): void; reject(err: unknown): void } | undefined;
  #closing: Promise<void> | undefined;

  private constructor(init: OpenContext & { nextSeq: number; headMac: Buffer | undefined; recovery: RecoveryReport }) {
    this.#storage = init.storage;
    this.#locks = init.locks;
    this.#ring = init.ring;
    this.#security = init.security;
    this.#durability = new Durability(init.storage, init.sync);
    this.#epoch = init.epoch;
    this.#log = init.log;
    this.#maxPending = init.options.maxPending ?? init.ring.size;
    this.#backpressureMs = init.options.backpressureTimeoutMs ?? 5000;
    this.#nextSeq = init.nextSeq;
    this.#headMac = init.headMac;
    this.recovery = init.recovery;
    internals.set(this, { storage: init.storage, locks: init.locks });
  }

  /**
   * Opens (or creates) the WAL in `options.dir`: checks keys, bumps and flushes the
   * epoch, runs the recovery scan, quarantines corrupt records.
   * @throws WalBadKeyError when the key is wrong, missing, or given for a WAL created without one
   * @throws ConfigError on bad options (key material shorter than 16 bytes)
   * @throws RangeError when ringBits is outside 1-24
   */
  static async open(options: WalOptions): Promise<Wal> {
    const log = (options.logger ?? defaultLogger()).child({ component: "wal", dir: options.dir });
    const sync = options.sync ?? "full";
    if (options.ringBits !== undefined) new Ring(options.ringBits); // validate before touching disk
    mkdirSync(options.dir, { recursive: true });
    const locks = new LockManager();
    const storage = WalStorage.open(options.dir, locks);
    try {
      const stored = storage.readMeta();
      const { security, meta } = resolveSecurity(options, stored);
      if (stored !== undefined && options.ringBits !== undefined && options.ringBits !== stored.ringBits) {
        log.warn({ stored: stored.ringBits, requested: options.ringBits }, "WAL keeps the ring size it was created with");
      }
      const ring = new Ring(meta.ringBits);
      // The epoch is part of every AES-GCM/SM4 nonce: it must be on disk before the
      // first encryption of this open, so a crash can never lead to a reused nonce.
      const epoch = meta.epoch + 1;
      const next: WalMeta = { ...meta, epoch };
      const { write } = locks.withLocks((tx) => ({ write: storage.writeMeta(tx, next) }));
      await write;
      await storage.flushed();
      return await Wal.#recover({ storage, locks, ring, security, sync, epoch, log, options });
    } catch (err) {
      await storage.close().catch(() => undefined);
      throw err;
    }
  }

  static async #recover(ctx: OpenContext): Promise<Wal> {
    const { storage, locks, ring, security, epoch, log, options } = ctx;
    const quarantined = new Set<number>();
    for (const key of storage.corrupt.getKeys({})) quarantined.add((key as unknown as number[])[0]!);
    const found = scan({
      done: storage.done.getRange({}) as Iterable<{ key: number; value: Buffer }>,
      // Without keys there is nothing to authenticate: plain records are checked (and
      // PENDING ones decoded) in place by the fast decoder instead of being copied out.
      ring: entries(security.cipher === undefined && security.chain === undefined ? storage.ringFast.getRange({}) : storage.ring.getRange({})),
      overflow: entries(storage.overflow.getRange({})),
      layout: ring,
      security,
      epoch,
      head: storage.readHead(),
      quarantined,
      policy: options.corruptPolicy ?? "skip",
      decode: true,
    });
    if (found.corrupt.length > 0) {
      // Quarantine: keep the damaged bytes for inspection and free the slot, so a
      // later lap can use it without ever treating the damage as data.
      const { write } = locks.withLocks((tx) => {
        for (const c of found.corrupt) {
          storage.putCorrupt(tx, { seq: c.seq, where: c.where, slot: c.slot, reason: c.reason, bytes: c.bytes });
          if (c.where === "ring") storage.removeSlot(tx, c.key);
          else if (c.where === "done") storage.removeDone(tx, c.key);
          else storage.removeOverflow(tx, c.key);
        }
        return { write: storage.lastWrite };
      });
      await write;
      await storage.flushed();
      for (const c of found.corrupt) log.warn({ seq: c.seq, slot: c.slot, where: c.where, reason: c.reason }, "corrupt WAL record skipped");
    }
    for (const b of found.chainBreaks) log.warn({ seq: b.seq, reason: b.reason }, "WAL HMAC chain break");
    let maxSeq = found.maxSeq;
    for (const q of quarantined) if (q > maxSeq) maxSeq = q;
    const recovery: RecoveryReport = {
      complete: found.complete,
      pending: found.pending.map((p) => p.record),
      corrupt: found.corrupt.map((c) => ({ seq: c.seq, slot: c.slot, reason: c.reason, where: c.where })),
      stale: found.stale,
      epoch,
      withheld: found.withheld.map((p) => p.record),
      chainBreaks: found.chainBreaks,
    };
    const wal = new Wal({ ...ctx, nextSeq: maxSeq + 1, headMac: found.headMac, recovery });
    wal.#doneBatches = found.doneBatches;
    wal.#nextDoneKey = (found.doneBatches.at(-1)?.key ?? 0) + 1;
    for (const c of found.corrupt) if (c.where === "done" && c.key >= wal.#nextDoneKey) wal.#nextDoneKey = c.key + 1;
    for (const p of found.pending) wal.#addPending(p);
    for (const p of found.withheld) wal.#addPending(p);
    log.info(
      { epoch, complete: recovery.complete, pending: recovery.pending.length, corrupt: recovery.corrupt.length, stale: recovery.stale },
      "WAL opened",
    );
    return wal;
  }

  #addPending(e: PendingEntry): void {
    const { seq, owner } = e.record;
    this.#pending.set(seq, e);
    if (owner !== undefined) {
      const index = this.#byOwner.get(owner);
      if (index === undefined) this.#byOwner.set(owner, { list: [e], dead: 0 });
      else index.list.push(e);
    }
  }

  #removePending(e: PendingEntry): void {
    const { seq, owner } = e.record;
    this.#pending.delete(seq);
    if (owner !== undefined) {
      const index = this.#byOwner.get(owner);
      if (index !== undefined && ++index.dead * 2 >= index.list.length) this.#liveFor(owner, index);
    }
    this.#waiters.shift()?.resolve();
  }

  /** The epoch of this open (part of every nonce). */
  get epoch(): number {
    return this.#epoch;
  }

  /** Number of PENDING records, including withheld ones. */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** The seq the next append will get. */
  get nextSeq(): number {
    return this.#nextSeq;
  }

  get syncMode(): SyncMode {
    return this.#durability.mode;
  }

  /**
   * Writes a PENDING record and resolves with its seq once durable per the sync mode
   * (`full`: flushed; `normal`: committed).
   * @throws WalFailedError (WAL_FAILED) after any commit or flush failure
   * @throws WalClosedError (WAL_CLOSED) after close
   * @throws WalFullError (WAL_FULL) when maxPending records stay PENDING for backpressureTimeoutMs
   * @throws RangeError when kind is empty or longer than 255 bytes
   */
  append<T>(kind: string, payload: T, opts?: { owner?: string }): Promise<number> {
    // Not an async function: the hot path allocates one promise per append, and appends
    // of one event turn share the settle promise of their common commit.
    try {
      this.#durability.assertWritable();
      if (this.#pending.size >= this.#maxPending) return this.#appendWhenRoom(kind, payload, opts?.owner);
      const { seq, write } = this.#stage(kind, payload, opts?.owner, undefined);
      return this.#durability.settle(write).then(() => seq);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  async #appendWhenRoom(kind: string, payload: unknown, owner: string | undefined): Promise<number> {
    while (this.#pending.size >= this.#maxPending) {
      await this.#room();
      this.#durability.assertWritable();
    }
    const { seq, write } = this.#stage(kind, payload, owner, undefined);
    await this.#durability.settle(write);
    return seq;
  }

  /**
   * Marks a record COMPLETE, and writes `kv` entries (the outcome) in the same LMDB
   * transaction. Completing a seq that is not PENDING (already complete) is a no-op,
   * so a re-executed step may complete again safely.
   * @throws WalFailedError, WalClosedError
   */
  complete(seq: number, opts?: { kv?: Array<{ key: string; value: unknown }> }): Promise<void> {
    try {
      this.#durability.assertWritable();
      const entry = this.#pending.get(seq);
      if (entry === undefined) return RESOLVED;
      const turn = this.#section(NOTHING, (tx) => {
        if (opts?.kv !== undefined) for (const { key, value } of opts.kv) this.#storage.putKv(tx, key, value);
        return this.#writeCompletion(tx, entry);
      });
      this.#removePending(entry);
      return turn ?? this.#durability.settle(this.#storage.lastWrite);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Atomically marks `seq` COMPLETE and appends a new PENDING record with the same
   * owner (and kind unless given). A seq is never rewritten, so nonces never repeat.
   * @throws KovaError INVALID_ID when `seq` is not PENDING; WalFailedError, WalClosedError
   */
  async replace<T>(seq: number, payload: T, opts?: { kind?: string }): Promise<number> {
    this.#durability.assertWritable();
    const entry = this.#pending.get(seq);
    if (entry === undefined || entry.withheld) throw notPending(seq);
    const staged = this.#stage(opts?.kind ?? entry.record.kind, payload, entry.record.owner, entry);
    await this.#durability.settle(staged.write);
    return staged.seq;
  }

  /**
   * log → execute → complete. If `exec` throws, the record stays PENDING (recovery
   * hands it back) and the error is rethrown.
   * @throws whatever `exec` throws; the errors of append and complete
   */
  async run<T, R>(kind: string, payload: T, exec: (seq: number) => Promise<R>, opts?: { owner?: string }): Promise<R> {
    const seq = await this.append(kind, payload, opts);
    const result = await exec(seq);
    await this.complete(seq);
    return result;
  }

  /** Reads the side table written by `complete({ kv })`. */
  getKv<V>(key: string): V | undefined {
    return this.#storage.kv.get(key) as V | undefined;
  }

  /** PENDING records of one owner, in seq order (withheld ones excluded). */
  pendingFor(owner: string): WalRecord[] {
    const index = this.#byOwner.get(owner);
    if (index === undefined) return [];
    return this.#liveFor(owner, index)
      .filter((e) => !e.withheld)
      .map(toRecord);
  }

  /** Drops completed entries from an owner's list (and the owner when none is left). */
  #liveFor(owner: string, index: { list: PendingEntry[]; dead: number }): PendingEntry[] {
    if (index.dead > 0) {
      index.list = index.list.filter((e) => this.#pending.get(e.record.seq) === e);
      index.dead = 0;
    }
    if (index.list.length === 0) this.#byOwner.delete(owner);
    return index.list;
  }

  /** Every PENDING record (withheld ones excluded), in seq order. */
  pendingRecords(): WalRecord[] {
    const out: WalRecord[] = [];
    for (const e of this.#pending.values()) if (!e.withheld) out.push(toRecord(e));
    return out.sort((a, b) => a.seq - b.seq);
  }

  /**
   * Refuses new writes, waits for issued writes to be flushed, closes LMDB.
   * Idempotent; appends waiting for room reject with WAL_CLOSED.
   */
  close(): Promise<void> {
    if (this.#closing !== undefined) return this.#closing;
    this.#durability.markClosed();
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w.reject(new KovaError(WalErrorCode.WAL_CLOSED, "WAL closed while waiting for room"));
    this.#closing = (async () => {
      // After a failure lmdb may never settle the failed batch: do not wait for it.
      if (!this.#durability.failed) {
        try {
          await this.#storage.lastWrite;
          await this.#storage.flushed();
        } catch (err) {
          this.#durability.fail(err);
          this.#log.error({ err }, "WAL write failed before close");
        }
      }
      // lmdb's close waits for its last batch, which never settles after a failed
      // commit: bound it, so that shutdown never hangs.
      const closed = this.#storage.close().catch((err: unknown) => this.#log.warn({ err }, "LMDB close failed"));
      let timer: NodeJS.Timeout | undefined;
      const limit = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), this.#durability.failed ? 200 : CLOSE_TIMEOUT_MS);
      });
      if ((await Promise.race([closed, limit])) === "timeout") this.#log.warn("LMDB close did not finish; abandoning the environment");
      clearTimeout(timer);
    })();
    return this.#closing;
  }

  /**
   * One synchronous write section: `prepare` runs under the Buffer lock, `write` under
   * Buffer → Queue → Transaction (taken by hand: this is the hot path). A synchronous
   * throw from LMDB while issuing writes is a failed commit.
   */
  #section<P, T>(prepare: () => P, write: (tx: TransactionLock, prepared: P) => T): T {
    const locks = this.#locks;
    const buffer = locks.buffer();
    let queue: QueueLock | undefined;
    let tx: TransactionLock | undefined;
    try {
      const prepared = prepare();
      queue = locks.queue(buffer);
      tx = locks.transaction(queue);
      try {
        return write(tx, prepared);
      } catch (err) {
        throw err instanceof KovaError && err.code === WalErrorCode.LOCK_ORDER ? err : this.#durability.fail(err);
      }
    } finally {
      tx?.release();
      queue?.release();
      buffer.release();
    }
  }

  /**
   * The append path, in one synchronous section. Nothing in memory changes unless every
   * write was issued.
   */
  #stage(
    kind: string,
    payload: unknown,
    owner: string | undefined,
    completing: PendingEntry | undefined,
  ): { seq: number; write: Promise<unknown> } {
    const seq = this.#nextSeq;
    return this.#section(
      // Buffer: seq, seal (encrypt, chain). A throw here (bad kind, unencodable payload) changes nothing.
      () => sealData(this.#security, { epoch: this.#epoch, seq, kind, owner }, encodePayload(payload), this.#headMac),
      (tx, sealed) => {
        // Queue: the record a lap behind in this slot is kept (moved to overflow) if still PENDING.
        const evicted = this.#pending.get(seq - this.#ring.size);
        const move = evicted !== undefined && evicted.where === "ring";
        // Records found by recovery may not hold their bytes: they are committed, so read them back.
        const movedBytes = move ? (evicted.bytes ?? this.#storage.ring.get(this.#ring.slotOf(evicted.record.seq))) : undefined;
        if (move && movedBytes === undefined) throw new KovaError(ErrorCode.INTERNAL, `PENDING record ${evicted.record.seq} vanished from its slot`);
        // Transaction: issue the writes in seq order; one event turn = one LMDB txn.
        if (move) this.#storage.putOverflow(tx, evicted.record.seq, movedBytes!);
        if (completing !== undefined) this.#writeCompletion(tx, completing);
        this.#storage.putSlot(tx, this.#ring.slotOf(seq), sealed.bytes);
        // Background compaction of COMPLETE records: a completion batch goes once every
        // slot it names has been reused (in this transaction at the latest).
        const batches = this.#doneBatches;
        while (batches.length > 0 && batches[0]!.maxSeq + this.#ring.size <= seq) this.#storage.removeDone(tx, batches.shift()!.key);
        if (sealed.mac !== undefined) this.#storage.writeHead(tx, { seq, mac: sealed.mac.toString("hex") });
        if (move) evicted.where = "overflow";
        this.#nextSeq = seq + 1;
        this.#headMac = sealed.mac;
        if (completing !== undefined) this.#removePending(completing);
        const record: WalRecord =
          owner === undefined
            ? { seq, epoch: this.#epoch, kind, payload, status: "PENDING" }
            : { seq, epoch: this.#epoch, kind, owner, payload, status: "PENDING" };
        this.#addPending({ record, bytes: sealed.bytes, where: "ring", mac: sealed.mac, prevMac: sealed.prevMac, withheld: false });
        return { seq, write: this.#storage.lastWrite };
      },
    );
  }

  /**
   * COMPLETE: a record in overflow is removed (compaction); a ring record joins this
   * event turn's completion batch, whose promise is returned. The batch is written by a
   * microtask, which runs before lmdb commits the turn's writes (lmdb commits from
   * setImmediate), so it lands in the same LMDB transaction as everything this turn
   * wrote: the kv outcome of complete({ kv }), the new record of replace().
   */
  #writeCompletion(tx: TransactionLock, e: PendingEntry): Promise<void> | undefined {
    if (e.where === "overflow") {
      this.#storage.removeOverflow(tx, e.record.seq);
      return undefined;
    }
    let turn = this.#turn;
    if (turn === undefined) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const promise = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      // replace() does not wait on this promise (its own write shares the commit): keep a
      // failure here from being an unhandled rejection; callers still see it.
      promise.catch(() => undefined);
      turn = this.#turn = { seqs: [], promise, resolve, reject };
      queueMicrotask(() => this.#writeTurn());
    }
    turn.seqs.push(e.record.seq);
    return turn.promise;
  }

  #writeTurn(): void {
    const turn = this.#turn!;
    this.#turn = undefined;
    try {
      // Completions accepted before a close in the same turn are still written: close
      // waits for them (lmdb's close waits for every issued write).
      this.#durability.assertNotFailed();
      const key = this.#nextDoneKey++;
      const doneKey = this.#security.cipher?.doneKey ?? this.#security.chain?.doneKey;
      this.#section(NOTHING, (tx) => this.#storage.putDone(tx, key, sealDone(doneKey, this.#epoch, turn.seqs)));
      let maxSeq = 0;
      for (const seq of turn.seqs) if (seq > maxSeq) maxSeq = seq;
      this.#doneBatches.push({ key, maxSeq });
      this.#durability.settle(this.#storage.lastWrite).then(turn.resolve, turn.reject);
    } catch (err) {
      turn.reject(err);
    }
  }

  #room(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(new WalFullError(this.#pending.size, this.#backpressureMs));
      }, this.#backpressureMs);
      this.#waiters.push(waiter);
    });
  }
}
