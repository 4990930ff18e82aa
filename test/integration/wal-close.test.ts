import { describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import { Wal, type SyncMode } from "../../src/wal/index.js";
import { walDirs } from "./wal-helpers.js";
import { WalErrorCode } from "../../src/wal/errors.js";
import { poll } from "../fixtures/poll.js";

const dir = walDirs();

/** Fails the test instead of hanging it when `p` does not settle in time. */
function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} hung for ${ms} ms`)), ms))]);
}

describe.each(["full", "normal"] as SyncMode[])("wal close (%s)", (sync) => {
  it(`wal - close and reopen under load (${sync}): every resolved append is there, every other append rejects WAL_CLOSED`, async () => {
    const d = dir("load");
    const resolved = new Map<number, "pending" | "complete">();
    for (let round = 0; round < 3; round++) {
      const wal = await Wal.open({ dir: d, ringBits: 8, sync, maxPending: 100_000 });
      for (const p of wal.recovery.pending) expect(resolved.get(p.seq)).not.toBe("complete");
      for (const [seq, state] of resolved) {
        if (state === "pending")
          expect(
            wal.recovery.pending.some((p) => p.seq === seq),
            `seq ${seq}`,
          ).toBe(true);
      }
      let stop = false;
      const before = resolved.size;
      const rejections: unknown[] = [];
      const writers = Array.from({ length: 32 }, async (_, w) => {
        for (let i = 0; !stop; i++) {
          try {
            const seq = await wal.append("step", { w, i });
            resolved.set(seq, "pending");
            if (i % 2 === 0) {
              await wal.complete(seq);
              resolved.set(seq, "complete");
            }
          } catch (err) {
            rejections.push(err);
            return;
          }
        }
      });
      // close under load: once the writers have resolved a good number of appends
      await poll(() => resolved.size > before + 32, { timeoutMs: 5_000, what: "appends resolving under load" });
      await within(5_000, wal.close(), "close under load");
      stop = true;
      await within(5_000, Promise.all(writers), "writers after close");
      expect(rejections.length).toBeGreaterThan(0);
      for (const e of rejections) expect(isKovaError(e, WalErrorCode.WAL_CLOSED)).toBe(true);
    }
    expect(resolved.size).toBeGreaterThan(32);
  });
});

describe("wal shutdown", () => {
  it("wal - completes issued right before close (same tick) are written: their batch lands before LMDB closes", async () => {
    const d = dir("complete-close");
    const wal = await Wal.open({ dir: d, ringBits: 6 });
    const seqs: number[] = [];
    for (let i = 0; i < 10; i++) seqs.push(await wal.append("step", { i }));
    const completes = seqs.slice(0, 7).map((s) => wal.complete(s, { kv: [{ key: `out:${s}`, value: s }] }));
    const closing = wal.close();
    await Promise.all(completes);
    await within(5_000, closing, "close after completes");
    const again = await Wal.open({ dir: d });
    expect(again.recovery.pending.map((p) => p.seq)).toEqual(seqs.slice(7));
    expect(again.recovery.complete).toBe(7);
    expect(again.getKv(`out:${seqs[6]}`)).toBe(seqs[6]);
    await again.close();
  });

  it("wal - close never hangs: idle, twice, with waiters for room, and right after many writes", async () => {
    const idle = await Wal.open({ dir: dir("idle") });
    await within(2_000, Promise.all([idle.close(), idle.close()]), "double close");

    const full = await Wal.open({ dir: dir("waiters"), ringBits: 2, backpressureTimeoutMs: 60_000 });
    for (let i = 0; i < 4; i++) await full.append("step", { i });
    const waiting = full.append("step", { i: 4 }).catch((e: unknown) => e);
    await within(2_000, full.close(), "close with a waiter");
    expect(isKovaError(await waiting, WalErrorCode.WAL_CLOSED)).toBe(true);

    // The reported lmdb hang was close right after several transactionSync calls; the
    // WAL never uses the sync APIs, and close right after a burst of writes returns.
    const burst = await Wal.open({ dir: dir("burst"), sync: "normal", maxPending: 10_000 });
    const writes = Array.from({ length: 500 }, (_, i) => burst.append("step", { i }));
    await within(5_000, burst.close(), "close after a burst");
    const settled = await Promise.allSettled(writes);
    expect(settled.filter((s) => s.status === "fulfilled").length).toBe(500); // issued before close: all committed
  });
});

describe("wal disposal", () => {
  it("wal - await using closes the WAL at the end of the scope: later appends reject WAL_CLOSED and the dir reopens", async () => {
    const d = dir("dispose");
    let disposed: Wal;
    {
      await using wal = await Wal.open({ dir: d });
      await wal.append("step", { i: 0 });
      disposed = wal;
    }
    expect(isKovaError(await disposed.append("step", { i: 1 }).catch((e: unknown) => e), WalErrorCode.WAL_CLOSED)).toBe(true);
    await using again = await Wal.open({ dir: d });
    expect(again.recovery.pending).toHaveLength(1);
  });
});
