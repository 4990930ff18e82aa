import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { ErrorCode, KovaError, componentLogger, silentLogger, type Logger } from "../core/index.js";
import { encodePayload } from "./codec.js";
import { ZERO_MAC, type SessionCipher } from "./crypto.js";
import { WalErrorCode, WalFullError, WalKvCorruptError, type WalFailedError } from "./errors.js";
import { resolveSecurity } from "./keys.js";
import { openKv, sealKv } from "./kv-seal.js";
import { LockManager, type QueueLock, type TransactionLock } from "./locks.js";
import { sealDone, sealDoneSealed } from "./completion.js";
import { FORMAT_VERSION, MAC_LEN } from "./record-format.js";
import { sealData, type Security } from "./record-seal.js";
import { scan, type PendingFound, type StoredEntry } from "./recovery.js";
import { Ring } from "./ring.js";
import { WalStorage, type ChainHead, type WalMeta } from "./storage.js";
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
  /** The keys of this open (with a cipher): records, completion batches and side-table values are sealed under them. */
  session: SessionCipher | undefined;
  sync: SyncMode;
  epoch: number;
  log: Logger;
  options: WalOptions;
}

/** Longest a healthy close waits for LMDB to finish. */
const CLOSE_TIMEOUT_MS = 10_000;
/** How long a deferred completion waits for another write to share its transaction. */
const DEFER_MS = 10;

/** Side-table entries as they will be stored: sealed with a cipher (`name`, `sealed`), else as given. */
type SealedKv = Array<{ key: string; value: unknown; name?: Buffer; sealed?: Buffer }>;

/**
 * A promise with its resolve and reject, for a batch of writes settled together. A failure
 * nobody waits for is not an unhandled rejection; callers that hold the promise still see it.
 */
function settlement(): { promise: Promise<void>; resolve(): void; reject(err: unknown): void } {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

/** Completions accepted with `defer` (and side-table writes of `putKv`, without a record): written together, with the next write or when DEFER_MS pass. */
interface DeferredCompletions {
  items: Array<{ entry: PendingEntry | undefined; kv: SealedKv | undefined }>;
  promise: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
  timer: NodeJS.Timeout;
}

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
  readonly #session: SessionCipher | undefined;
  #nextSeq: number;
  #headMac: Buffer | undefined;
  /** With the chain: XOR of ChainKey.overflowShare over the seqs in the overflow table. */
  #overflowDigest: Buffer;
  /** Side-table writes of this open: the nonce counter of sealed values. */
  #kvWrites = 0;
  /** An encrypted WAL whose plain `kv` table still holds entries an older version wrote. */
  #legacyKv = false;
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
  #deferred: DeferredCompletions | undefined;
  #closing: Promise<void> | undefined;

  private constructor(init: OpenContext & { nextSeq: number; headMac: Buffer | undefined; overflowDigest: Buffer; recovery: RecoveryReport }) {
    this.#storage = init.storage;
    this.#locks = init.locks;
    this.#ring = init.ring;
    this.#security = init.security;
    this.#durability = new Durability(init.storage, init.sync);
    this.#epoch = init.epoch;
    this.#log = init.log;
    this.#maxPending = init.options.maxPending ?? init.ring.size;
    this.#backpressureMs = init.options.backpressureTimeoutMs ?? 5000;
    this.#session = init.session;
    this.#nextSeq = init.nextSeq;
    this.#headMac = init.headMac;
    this.#overflowDigest = init.overflowDigest;
    this.recovery = init.recovery;
    internals.set(this, { storage: init.storage, locks: init.locks });
  }

  /**
   * Opens (or creates) the WAL in `options.dir`: checks keys, bumps and flushes the
   * epoch (with a cipher, together with this open's fresh random key salt), runs the
   * recovery scan, quarantines corrupt records.
   * @throws WalBadKeyError when the key is wrong, missing, or given for a WAL created without one
   * @throws ConfigError on bad options (key material shorter than 16 bytes)
   * @throws RangeError when ringBits is outside 1-24
   */
  static async open(options: WalOptions): Promise<Wal> {
    const log = componentLogger(options.logger ?? silentLogger(), "wal", { dir: options.dir });
    const sync = options.sync ?? "full";
    if (options.ringBits !== undefined) new Ring(options.ringBits); // validate before touching disk
    mkdirSync(options.dir, { recursive: true });
    const locks = new LockManager();
    const storage = WalStorage.open(options.dir, locks);
    try {
      const stored = storage.readMeta();
      const { security, meta, sessions } = resolveSecurity(options, stored, (epoch) => storage.readOpenSalt(epoch));
      if (stored !== undefined && options.ringBits !== undefined && options.ringBits !== stored.ringBits) {
        log.warn({ stored: stored.ringBits, requested: options.ringBits }, "WAL keeps the ring size it was created with");
      }
      const ring = new Ring(meta.ringBits);
      // Each open encrypts under its own keys, from a fresh random salt stored (and
      // flushed) with the new epoch before the first encryption: a nonce can then only
      // repeat if two opens drew the same 256-bit salt, even when this directory is a
      // restored backup (docs/wal.md, "Why nonces never repeat"). The epoch only names
      // the open; taking the newest of meta and the opens table keeps it unique here.
      const epoch = Math.max(meta.epoch, storage.lastOpenEpoch()) + 1;
      const next: WalMeta = { ...meta, epoch, format: FORMAT_VERSION };
      const salt = sessions === undefined ? undefined : randomBytes(32);
      const { write } = locks.withLocks((tx) => {
        storage.writeMeta(tx, next);
        if (salt !== undefined) storage.writeOpen(tx, epoch, salt);
        return { write: storage.lastWrite };
      });
      await write;
      await storage.flushed();
      const session = salt === undefined ? undefined : sessions!.add(epoch, salt);
      return await Wal.#recover({ storage, locks, ring, security, session, sync, epoch, log, options });
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
    // The overflow digest of what stays in the overflow table after the quarantine below.
    let overflowDigest = found.overflowDigest ?? Buffer.alloc(MAC_LEN);
    if (security.chain !== undefined) {
      for (const c of found.corrupt) if (c.where === "overflow") overflowDigest = xor(overflowDigest, security.chain.overflowShare(c.key));
    }
    let maxSeq = found.maxSeq;
    for (const q of quarantined) if (q > maxSeq) maxSeq = q;
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
        // The overflow table changed: the head must vouch for what is left in it.
        if (security.chain !== undefined && found.corrupt.some((c) => c.where === "overflow")) {
          storage.writeHead(tx, chainHead(security, maxSeq, found.headMac ?? ZERO_MAC, overflowDigest));
        }
        return { write: storage.lastWrite };
      });
      await write;
      await storage.flushed();
      for (const c of found.corrupt) log.warn({ seq: c.seq, slot: c.slot, where: c.where, reason: c.reason }, "corrupt WAL record skipped");
    }
    for (const b of found.chainBreaks) log.warn({ seq: b.seq, reason: b.reason }, "WAL HMAC chain break");
    const recovery: RecoveryReport = {
      complete: found.complete,
      pending: found.pending.map((p) => p.record),
      corrupt: found.corrupt.map((c) => ({ seq: c.seq, slot: c.slot, reason: c.reason, where: c.where })),
      stale: found.stale,
      epoch,
      withheld: found.withheld.map((p) => p.record),
      chainBreaks: found.chainBreaks,
    };
    const wal = new Wal({ ...ctx, nextSeq: maxSeq + 1, headMac: found.headMac, overflowDigest, recovery });
    wal.#legacyKv = security.cipher !== undefined && storage.kv.getKeysCount({ limit: 1 }) > 0;
    wal.#doneBatches = found.doneBatches;
    wal.#nextDoneKey = (found.doneBatches.at(-1)?.key ?? 0) + 1;
    for (const c of found.corrupt) if (c.where === "done" && c.key >= wal.#nextDoneKey) wal.#nextDoneKey = c.key + 1;
    for (const p of found.pending) wal.#addPending(p);
    for (const p of found.withheld) wal.#addPending(p);
    log.info({ epoch, complete: recovery.complete, pending: recovery.pending.length, corrupt: recovery.corrupt.length, stale: recovery.stale }, "WAL opened");
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

  /** The epoch of this open (it names the open whose keys sealed a record). */
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
   * Resolves with the WalFailedError of the first failed commit or flush (never, on a
   * healthy WAL). From then on every write is refused, so whatever depends on the WAL
   * must stop using it: a node gives its actors to its peers and exits.
   */
  get failure(): Promise<WalFailedError> {
    return this.#durability.failure;
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
   *
   * `defer`: the record is complete for this process at once (no longer PENDING, its
   * slot free for reuse), and the completion with its `kv` is written in the transaction
   * of the WAL's next write, or on its own after 10 ms: a caller for whom a completion
   * lost in a crash is harmless (it can tell the record is done at the next start) spares
   * a commit of its own. The promise resolves when it is durable per the sync mode.
   * @throws WalFailedError, WalClosedError
   */
  complete(seq: number, opts?: { kv?: Array<{ key: string; value: unknown }>; defer?: boolean }): Promise<void> {
    try {
      this.#durability.assertWritable();
      const entry = this.#pending.get(seq);
      if (entry === undefined) return RESOLVED;
      if (opts?.defer === true) return this.#defer(entry, opts.kv);
      // Sealing (and encoding) comes first: a value that cannot be encoded throws here,
      // before any write, and changes nothing.
      const turn = this.#section(
        () => (opts?.kv === undefined ? undefined : this.#sealKv(opts.kv)),
        (tx, kv) => {
          this.#writeDeferred(tx);
          if (kv !== undefined) this.#writeKv(tx, kv);
          return this.#writeCompletion(tx, entry);
        },
      );
      this.#removePending(entry);
      return turn ?? this.#durability.settle(this.#storage.lastWrite);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Writes side-table entries (what `getKv` reads) without a record, deferred as
   * `complete`'s `defer` is: in the transaction of the WAL's next write, or on its own after
   * 10 ms, in order with the deferred completions. For entries that copy what is durable
   * elsewhere, so that losing them in a crash only leaves the older copy (an actor's local
   * checkpoint after a turn that wrote no record). Resolves when durable per the sync mode.
   * @throws WalFailedError, WalClosedError
   */
  putKv(kv: Array<{ key: string; value: unknown }>): Promise<void> {
    try {
      this.#durability.assertWritable();
      return this.#defer(undefined, kv);
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

  /**
   * Reads the side table written by `complete({ kv })`.
   * @throws WalKvCorruptError (WAL_CORRUPT) when an encrypted entry fails authentication
   */
  getKv<V>(key: string): V | undefined {
    const cipher = this.#security.cipher;
    if (cipher !== undefined) {
      const name = cipher.kvName(key);
      const stored = this.#storage.kvSealed.get(name);
      if (stored !== undefined) {
        const opened = openKv(this.#security.sessions!, name, stored);
        if (!opened.ok) throw new WalKvCorruptError(key, opened.reason);
        return opened.value as V;
      }
      // Not rewritten since a version that stored the side table in the clear.
    }
    return this.#storage.kv.get(key) as V | undefined;
  }

  /** Side-table entries as they will be stored: sealed with a cipher, else as given. */
  #sealKv(kv: ReadonlyArray<{ key: string; value: unknown }>): SealedKv {
    const cipher = this.#security.cipher;
    if (cipher === undefined) return [...kv];
    return kv.map(({ key, value }) => {
      const name = cipher.kvName(key);
      return { key, value, name, sealed: sealKv(this.#session!, this.#epoch, this.#kvWrites++, name, value) };
    });
  }

  #writeKv(tx: TransactionLock, kv: Readonly<SealedKv>): void {
    for (const e of kv) {
      if (e.sealed === undefined) {
        this.#storage.putKv(tx, e.key, e.value);
        continue;
      }
      this.#storage.putKvSealed(tx, e.name!, e.sealed);
      // What an older version wrote in the clear goes when the key is rewritten.
      if (this.#legacyKv) this.#storage.removeKv(tx, e.key);
    }
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
    // Completions accepted before the close are still written (close waits for them).
    this.#flushDeferred();
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

  /** `await using wal = await Wal.open(…)` closes the WAL at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
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
  #stage(kind: string, payload: unknown, owner: string | undefined, completing: PendingEntry | undefined): { seq: number; write: Promise<unknown> } {
    const seq = this.#nextSeq;
    return this.#section(
      // Buffer: seq, seal (encrypt, chain). A throw here (bad kind, unencodable payload) changes nothing.
      () => sealData(this.#security, { epoch: this.#epoch, seq, kind, owner }, encodePayload(payload), this.#headMac),
      (tx, sealed) => {
        // Deferred completions share this transaction (they may name the slot reused here).
        this.#writeDeferred(tx);
        // Queue: the record a lap behind in this slot is kept (moved to overflow) if still PENDING.
        const evicted = this.#pending.get(seq - this.#ring.size);
        const chain = this.#security.chain;
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
        const digest = move && chain !== undefined ? xor(this.#overflowDigest, chain.overflowShare(evicted.record.seq)) : this.#overflowDigest;
        if (sealed.mac !== undefined) this.#storage.writeHead(tx, chainHead(this.#security, seq, sealed.mac, digest));
        if (move) evicted.where = "overflow";
        this.#overflowDigest = digest;
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
      const chain = this.#security.chain;
      if (chain !== undefined) {
        // The head vouches for the overflow table: it changes in this transaction too.
        const digest = xor(this.#overflowDigest, chain.overflowShare(e.record.seq));
        this.#storage.writeHead(tx, chainHead(this.#security, this.#nextSeq - 1, this.#headMac ?? ZERO_MAC, digest));
        this.#overflowDigest = digest;
      }
      return undefined;
    }
    let turn = this.#turn;
    if (turn === undefined) {
      // replace() does not wait on this promise (its own write shares the commit).
      turn = this.#turn = { seqs: [], ...settlement() };
      queueMicrotask(() => this.#writeTurn());
    }
    turn.seqs.push(e.record.seq);
    return turn.promise;
  }

  /** Takes a deferred completion (see complete's `defer`), or side-table entries alone (`putKv`): sealed now, written later. */
  #defer(entry: PendingEntry | undefined, kv: Array<{ key: string; value: unknown }> | undefined): Promise<void> {
    const sealed = this.#section(
      () => (kv === undefined ? undefined : this.#sealKv(kv)),
      (_tx, prepared) => prepared,
    );
    if (entry !== undefined) this.#removePending(entry);
    let batch = this.#deferred;
    if (batch === undefined) {
      const timer = setTimeout(() => this.#flushDeferred(), DEFER_MS);
      timer.unref();
      batch = this.#deferred = { items: [], ...settlement(), timer };
    }
    batch.items.push({ entry, kv: sealed });
    return batch.promise;
  }

  /** Writes the deferred completions on their own (their timer fired, or the WAL closes). */
  #flushDeferred(): void {
    if (this.#deferred === undefined) return;
    try {
      this.#durability.assertNotFailed();
      this.#section(NOTHING, (tx) => this.#writeDeferred(tx));
    } catch (err) {
      // #writeDeferred took the batch; one that failed before reaching it is rejected here.
      const left = this.#deferred;
      this.#deferred = undefined;
      if (left) {
        clearTimeout(left.timer);
        left.reject(err);
      }
    }
  }

  /** Inside a write section: the deferred completions join this transaction. */
  #writeDeferred(tx: TransactionLock): void {
    const batch = this.#deferred;
    if (batch === undefined) return;
    this.#deferred = undefined;
    clearTimeout(batch.timer);
    let turn: Promise<void> | undefined;
    try {
      for (const { entry, kv } of batch.items) {
        if (kv !== undefined) this.#writeKv(tx, kv);
        if (entry !== undefined) turn = this.#writeCompletion(tx, entry) ?? turn;
      }
    } catch (err) {
      batch.reject(err);
      throw err;
    }
    (turn ?? this.#durability.settle(this.#storage.lastWrite)).then(batch.resolve, batch.reject);
  }

  #writeTurn(): void {
    const turn = this.#turn!;
    this.#turn = undefined;
    try {
      // Completions accepted before a close in the same turn are still written: close
      // waits for them (lmdb's close waits for every issued write).
      this.#durability.assertNotFailed();
      const key = this.#nextDoneKey++;
      const bytes =
        this.#session !== undefined
          ? sealDoneSealed(this.#session, this.#epoch, key, turn.seqs)
          : sealDone(this.#security.chain?.doneKey, this.#epoch, turn.seqs);
      this.#section(NOTHING, (tx) => this.#storage.putDone(tx, key, bytes));
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

function xor(a: Buffer, b: Buffer): Buffer {
  const out = Buffer.allocUnsafe(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i]! ^ b[i]!;
  return out;
}

/** The chain head as stored: newest seq and mac, the overflow digest, and the tag over all three. */
function chainHead(security: Security, seq: number, mac: Buffer, overflow: Buffer): ChainHead {
  const tag = security.chain!.headTag(seq, mac, overflow);
  return { seq, mac: mac.toString("hex"), overflow: overflow.toString("hex"), tag: tag.toString("hex") };
}
