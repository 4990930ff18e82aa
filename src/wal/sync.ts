import { WalClosedError, WalFailedError } from "./errors.js";
import type { WalStorage } from "./storage.js";
import type { SyncMode } from "./types.js";

/**
 * When a write counts as done, and what happens when it cannot be done.
 *
 * `normal`: resolve at commit (survives a process crash; the OS flushes later).
 * `full`: resolve after the flush. Group commit comes from lmdb itself: every write
 * issued in one event turn shares one transaction, and every waiter of `env.flushed`
 * shares the flush of the newest commit, so 256 concurrent appends cost one fsync.
 * No application lock is held here (locks live only in synchronous sections).
 *
 * A failed commit or flush is fatal: fsync errors cannot be retried safely (the
 * kernel may already have dropped the dirty pages), so the first failure is kept and
 * every later write is refused with WAL_FAILED.
 */
export class Durability {
  #failure: unknown;
  #failed = false;
  #closed = false;
  #onFailure!: (err: WalFailedError) => void;
  /** Resolves at the first failure (never on a healthy WAL). */
  readonly failure = new Promise<WalFailedError>((resolve) => (this.#onFailure = resolve));

  constructor(
    private readonly storage: WalStorage,
    readonly mode: SyncMode,
  ) {}

  get failed(): boolean {
    return this.#failed;
  }

  /** @throws WalClosedError after close; WalFailedError after a commit or flush failure */
  assertWritable(): void {
    if (this.#failed) throw new WalFailedError(this.#failure);
    if (this.#closed) throw new WalClosedError();
  }

  /** @throws WalFailedError after a commit or flush failure (a close does not matter here) */
  assertNotFailed(): void {
    if (this.#failed) throw new WalFailedError(this.#failure);
  }

  markClosed(): void {
    this.#closed = true;
  }

  /** Records a failure; the first one wins and is kept as the cause. */
  fail(err: unknown): WalFailedError {
    // lmdb attaches the underlying error as a rejected promise (`commitError`); observe
    // it so that it is not an unhandled rejection that kills the process.
    const detail = (err as { commitError?: unknown } | null)?.commitError;
    if (detail instanceof Promise) detail.catch(() => undefined);
    // lmdb also rejects the commit promise of its own event-turn batch marker, which
    // nobody waits on; observe it (now and after the current turn) for the same reason.
    this.storage.observeCommitFailures();
    if (!this.#failed) {
      this.#failed = true;
      this.#failure = err;
      this.#onFailure(new WalFailedError(err));
    }
    return new WalFailedError(this.#failure);
  }

  #lastWrite: Promise<unknown> | undefined;
  #lastSettled: Promise<void> | undefined;

  /**
   * Resolves once `write` is durable per the sync mode. Every write of one event turn
   * shares lmdb's commit promise, so they share one settle promise too (one flush wait
   * per batch, not per append).
   * @throws WalFailedError when the commit or the flush fails
   */
  settle(write: Promise<unknown>): Promise<void> {
    if (write === this.#lastWrite) return this.#lastSettled!;
    const settled = write
      .then(() => (this.mode === "full" ? this.storage.flushed() : undefined))
      .then(
        () => undefined,
        (err: unknown) => {
          throw this.fail(err);
        },
      );
    this.#lastWrite = write;
    this.#lastSettled = settled;
    return settled;
  }
}
