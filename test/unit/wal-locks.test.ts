import { describe, expect, it } from "vitest";
import { LockManager, type BufferLock, type QueueLock } from "../../src/wal/locks.js";
import { WalErrorCode } from "../../src/wal/errors.js";

const lockError = expect.objectContaining({ code: WalErrorCode.LOCK_ORDER });

describe("wal lock order", () => {
  it("locks - Buffer → Queue → Transaction in order, released in reverse, can be taken again", () => {
    const m = new LockManager();
    for (let i = 0; i < 2; i++) {
      const b = m.buffer();
      const q = m.queue(b);
      const t = m.transaction(q);
      m.assertHeld(t, 3);
      t.release();
      q.release();
      b.release();
    }
  });

  it("locks - out-of-order acquisition throws LockOrderError at run time", () => {
    const m = new LockManager();
    const b = m.buffer();
    expect(() => m.buffer()).toThrow(lockError); // Buffer again while held
    const q = m.queue(b);
    expect(() => m.queue(b)).toThrow(lockError); // Queue again
    expect(() => m.buffer()).toThrow(lockError); // Buffer after Queue
    const t = m.transaction(q);
    expect(() => m.queue(b)).toThrow(lockError); // Queue after Transaction
    t.release();
    q.release();
    b.release();
    // Tokens forged past the type system, released or from another manager are refused.
    expect(() => m.queue({} as BufferLock)).toThrow(lockError);
    expect(() => m.transaction(q)).toThrow(lockError); // released Queue token
    const other = new LockManager();
    const ob = other.buffer();
    const mb = m.buffer();
    expect(() => m.transaction(m.queue(mb) as unknown as QueueLock)).not.toThrow();
    expect(() => other.transaction(ob as unknown as QueueLock)).toThrow(lockError); // wrong level
  });

  it("locks - release out of order or twice throws", () => {
    const m = new LockManager();
    const b = m.buffer();
    const q = m.queue(b);
    expect(() => b.release()).toThrow(lockError);
    q.release();
    b.release();
    expect(() => b.release()).toThrow(lockError);
  });

  it("locks - withLocks releases on throw and refuses a promise-returning callback", () => {
    const m = new LockManager();
    expect(() =>
      m.withLocks(() => {
        throw new Error("boom");
      }),
    ).toThrow("boom");
    // @ts-expect-error the callback must be synchronous (checked at run time too)
    expect(() => m.withLocks(async () => 1)).toThrow(lockError);
    expect(m.withLocks(() => 7)).toBe(7); // nothing left held
  });

  it("locks - no lock inside an LMDB transaction callback (LMDB's lock is innermost)", () => {
    const m = new LockManager();
    expect(() => m.insideLmdbCallback(() => m.buffer())).toThrow(/inside an LMDB transaction callback/);
    expect(() => m.insideLmdbCallback(() => m.withLocks(() => 1))).toThrow(lockError);
    m.withLocks(() => 1);
  });
});
