// Lock-order misuse that must NOT compile. Checked by test/unit/wal-typecheck.test.ts,
// which runs `tsc --noEmit` on this file: every `@ts-expect-error` line must be a type
// error (tsc fails on an unused directive), and without the directives tsc must report
// exactly one error per marked line.
import { BufferLock, type LockManager, type QueueLock, TransactionLock } from "../../src/wal/locks.js";
import type { WalStorage } from "../../src/wal/storage.js";

declare const m: LockManager;
declare const storage: WalStorage;
const b = m.buffer();
const q = m.queue(b);
const t = m.transaction(q);

// @ts-expect-error a Queue lock cannot be reached without the Buffer token
m.queue();
// @ts-expect-error a Transaction lock needs the Queue token, not the Buffer token
m.transaction(b);
// @ts-expect-error tokens are nominal: a look-alike object is not a Buffer token
m.queue({ live: true, level: 1, name: "Buffer", release() {} });
// @ts-expect-error tokens cannot be made outside the lock module
new BufferLock(m);
// @ts-expect-error tokens cannot be made outside the lock module
new TransactionLock(m);
// @ts-expect-error storage writes demand the Transaction token; the Queue token is not enough
storage.putSlot(q, 0, Buffer.alloc(0));
// @ts-expect-error a Queue token is not a Transaction token
const wrong: TransactionLock = q;
// @ts-expect-error locks are never held across an await: withLocks refuses async callbacks
m.withLocks(async () => storage.putSlot(t, 0, Buffer.alloc(0)));

// Correct use compiles.
storage.putSlot(t, 0, Buffer.alloc(0));
const ok: QueueLock = q;
void [wrong, ok];
