import { LockOrderError } from "./errors.js";

/**
 * The WAL's three application locks, always taken in the order
 * Buffer → Queue → Transaction and released in reverse:
 *
 * - Buffer: seq assignment, chain head and record encoding/sealing;
 * - Queue: the pending table, ring occupancy and backpressure accounting;
 * - Transaction: issuing LMDB writes, so puts reach LMDB in seq order.
 *
 * LMDB's own write lock is innermost: it is taken by LMDB's writer after we issue the
 * puts, and no application lock may be taken inside an LMDB transaction callback.
 *
 * The order is enforced twice. At compile time: a Queue lock can only be acquired
 * with a live Buffer token, a Transaction lock only with a Queue token, and storage
 * writes demand a Transaction token; tokens are nominal (private fields) and cannot be
 * constructed outside this module. At run time: out-of-order acquisition or release,
 * a released or foreign token, or any acquisition inside an LMDB callback throws
 * LockOrderError. Locks are held only inside synchronous sections (`withLocks` refuses
 * a callback that returns a promise), so no lock is ever held across a commit or
 * flush await: JavaScript's run-to-completion makes the section atomic.
 */
const MINT = Symbol("mint");

const Level = { None: 0, Buffer: 1, Queue: 2, Transaction: 3 } as const;
type Level = (typeof Level)[keyof typeof Level];
const NAME = ["no", "Buffer", "Queue", "Transaction"] as const;

abstract class LockToken {
  #released = false;
  protected constructor(
    protected readonly manager: LockManager,
    readonly level: Level,
  ) {}
  get live(): boolean {
    return !this.#released;
  }
  /** @throws LockOrderError when a later lock is still held or the token was released */
  release(): void {
    if (this.#released) throw new LockOrderError(`${this.name} lock released twice`);
    this.manager[MINT](this, "release");
    this.#released = true;
  }
  abstract readonly name: string;
}

export class BufferLock extends LockToken {
  readonly #brand = "buffer";
  readonly name = "Buffer";
  private constructor(m: LockManager) {
    super(m, Level.Buffer);
  }
  static [MINT](m: LockManager): BufferLock {
    return new BufferLock(m);
  }
  get brand(): string {
    return this.#brand;
  }
}

export class QueueLock extends LockToken {
  readonly #brand = "queue";
  readonly name = "Queue";
  private constructor(m: LockManager) {
    super(m, Level.Queue);
  }
  static [MINT](m: LockManager): QueueLock {
    return new QueueLock(m);
  }
  get brand(): string {
    return this.#brand;
  }
}

export class TransactionLock extends LockToken {
  readonly #brand = "transaction";
  readonly name = "Transaction";
  private constructor(m: LockManager) {
    super(m, Level.Transaction);
  }
  static [MINT](m: LockManager): TransactionLock {
    return new TransactionLock(m);
  }
  get brand(): string {
    return this.#brand;
  }
}

/** Callbacks that hold locks must be synchronous: a promise here is a type error. */
export type SyncResult<T> = T extends PromiseLike<unknown> ? never : T;

export class LockManager {
  #held: Level = Level.None;
  #inLmdbCallback = false;

  /** @throws LockOrderError when any WAL lock is already held or inside an LMDB callback */
  buffer(): BufferLock {
    this.#check(Level.Buffer, undefined);
    return BufferLock[MINT](this);
  }

  /** @throws LockOrderError unless `buffer` is the live Buffer token and nothing later is held */
  queue(buffer: BufferLock): QueueLock {
    this.#check(Level.Queue, buffer);
    return QueueLock[MINT](this);
  }

  /** @throws LockOrderError unless `queue` is the live Queue token and nothing later is held */
  transaction(queue: QueueLock): TransactionLock {
    this.#check(Level.Transaction, queue);
    return TransactionLock[MINT](this);
  }

  /**
   * Runs `fn` holding all three locks in order, releasing them in reverse even when it
   * throws. `fn` must be synchronous.
   * @throws LockOrderError when `fn` returns a promise, or on any order violation
   */
  withLocks<T>(fn: (tx: TransactionLock, queue: QueueLock, buffer: BufferLock) => SyncResult<T>): SyncResult<T> {
    const b = this.buffer();
    let q: QueueLock | undefined;
    let t: TransactionLock | undefined;
    try {
      q = this.queue(b);
      t = this.transaction(q);
      const result = fn(t, q, b);
      if (typeof (result as { then?: unknown } | null)?.then === "function") {
        throw new LockOrderError("WAL locks are held only in synchronous sections; the callback returned a promise");
      }
      return result;
    } finally {
      t?.release();
      q?.release();
      b.release();
    }
  }

  /**
   * Marks code that runs inside an LMDB transaction callback (LMDB's write lock is
   * innermost): any WAL lock acquired while it runs throws LockOrderError.
   */
  insideLmdbCallback<T>(fn: () => T): T {
    const prev = this.#inLmdbCallback;
    this.#inLmdbCallback = true;
    try {
      return fn();
    } finally {
      this.#inLmdbCallback = prev;
    }
  }

  /** @throws LockOrderError when `token` is not a live token of this manager at `level` */
  assertHeld(token: LockToken, level: 1 | 2 | 3): void {
    if (!(token instanceof LockToken) || !token.live || token.level !== level || this.#held < level) {
      throw new LockOrderError(`operation needs the live ${NAME[level]} lock`);
    }
  }

  #check(level: Level, prior: LockToken | undefined): void {
    if (this.#inLmdbCallback) {
      throw new LockOrderError(`${NAME[level]} lock requested inside an LMDB transaction callback (LMDB's lock is innermost)`);
    }
    if (this.#held !== level - 1) {
      throw new LockOrderError(
        `${NAME[level]} lock requested while holding ${this.#held === Level.None ? "no lock" : `the ${NAME[this.#held]} lock`}; order is Buffer → Queue → Transaction`,
      );
    }
    if (prior !== undefined && (!(prior instanceof LockToken) || !prior.live || prior.level !== level - 1)) {
      throw new LockOrderError(`${NAME[level]} lock needs the live ${NAME[level - 1]} token`);
    }
    this.#held = level;
  }

  /** @internal release bookkeeping, reachable only through the module-private symbol */
  [MINT](token: LockToken, _op: "release"): void {
    if (this.#held !== token.level) {
      throw new LockOrderError(`${token.name} lock released while the ${NAME[this.#held]} lock is held; release in reverse order`);
    }
    this.#held = (token.level - 1) as Level;
  }
}
