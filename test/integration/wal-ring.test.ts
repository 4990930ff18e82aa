import { describe, expect, it } from "vitest";
import { isKovaError, ErrorCode } from "../../src/core/errors.js";
import { Wal } from "../../src/wal/index.js";
import { walInternals } from "../../src/wal/wal.js";
import { walDirs } from "./wal-helpers.js";
import { WalErrorCode } from "../../src/wal/errors.js";

const dir = walDirs();

describe("wal ring", () => {
  it("wal - the ring wraps many laps over COMPLETE records without growing", async () => {
    const d = dir("wrap");
    const wal = await Wal.open({ dir: d, ringBits: 3, sync: "normal" });
    const { storage } = walInternals(wal);
    for (let i = 0; i < 40; i++) await wal.complete(await wal.append("step", { i }));
    expect(storage.ring.getCount()).toBe(8);
    expect(storage.overflow.getCount()).toBe(0);
    // Completion batches are compacted once the slots they name are reused.
    expect(storage.done.getCount()).toBeLessThanOrEqual(9);
    await wal.close();
    const again = await Wal.open({ dir: d });
    expect(again.recovery).toMatchObject({ complete: 8, pending: [], corrupt: [], stale: 0 });
    expect(again.nextSeq).toBe(41);
    await again.close();
  });

  it("wal - a full ring of PENDING records gives backpressure and WAL_FULL after the timeout, losing nothing", async () => {
    const d = dir("full");
    const wal = await Wal.open({ dir: d, ringBits: 3, backpressureTimeoutMs: 100 });
    const seqs: number[] = [];
    for (let i = 0; i < 8; i++) seqs.push(await wal.append("step", { i }));
    const started = Date.now();
    const err = await wal.append("step", { i: 8 }).catch((e: unknown) => e);
    expect(isKovaError(err, WalErrorCode.WAL_FULL)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(90);
    // Room appears when a record completes: a waiting append then goes through.
    const waiting = wal.append("step", { i: 9 });
    await wal.complete(seqs[0]!);
    const ninth = await waiting;
    expect(ninth).toBe(9);
    await wal.close();
    const again = await Wal.open({ dir: d });
    expect(again.recovery.pending.map((p) => p.seq)).toEqual([...seqs.slice(1), ninth]);
    await again.close();
  });

  it("wal - when a slot comes round while its record is PENDING, compaction moves it to overflow; no PENDING record is overwritten", async () => {
    const d = dir("compact");
    const wal = await Wal.open({ dir: d, ringBits: 3, maxPending: 1000 });
    const { storage } = walInternals(wal);
    const seqs: number[] = [];
    for (let i = 0; i < 30; i++) {
      const seq = await wal.append("step", { i }, { owner: "long" });
      seqs.push(seq);
      // Complete every third record: the rest stay PENDING for more than one lap.
      if (i % 3 === 0) await wal.complete(seq);
    }
    const pending = seqs.filter((_, i) => i % 3 !== 0);
    expect(storage.overflow.getCount()).toBeGreaterThan(0);
    expect(wal.pendingFor("long").map((r) => r.seq)).toEqual(pending);
    await wal.close();

    const again = await Wal.open({ dir: d, maxPending: 1000 });
    expect(again.recovery.pending.map((p) => p.seq)).toEqual(pending);
    expect(again.recovery.pending.map((p) => (p.payload as { i: number }).i)).toEqual(pending.map((s) => s - 1));
    expect(again.recovery.corrupt).toEqual([]);
    // Completing overflow records removes them (compaction of COMPLETE records).
    for (const seq of pending) await again.complete(seq);
    expect(walInternals(again).storage.overflow.getCount()).toBe(0);
    await again.close();
    const third = await Wal.open({ dir: d });
    expect(third.recovery.pending).toEqual([]);
    await third.close();
  });

  it("wal - PENDING records found by recovery are kept (moved to overflow) when the ring laps after reopen", async () => {
    const d = dir("lap-after-reopen");
    const first = await Wal.open({ dir: d, ringBits: 3, maxPending: 1000 });
    const kept = [await first.append("step", { keep: 1 }, { owner: "x" }), await first.append("step", { keep: 2 })];
    await first.close();
    const wal = await Wal.open({ dir: d, maxPending: 1000 });
    expect(wal.recovery.pending.map((p) => p.seq)).toEqual(kept);
    for (let i = 0; i < 20; i++) await wal.complete(await wal.append("step", { i }));
    expect(walInternals(wal).storage.overflow.getCount()).toBe(2);
    await wal.close();
    const again = await Wal.open({ dir: d });
    expect(again.recovery.pending).toEqual([
      { seq: kept[0], epoch: 1, kind: "step", owner: "x", payload: { keep: 1 }, status: "PENDING" },
      { seq: kept[1], epoch: 1, kind: "step", payload: { keep: 2 }, status: "PENDING" },
    ]);
    await again.close();
  });

  it("wal - replace completes the old seq and appends a new one atomically, keeping the owner", async () => {
    const d = dir("replace");
    const wal = await Wal.open({ dir: d, ringBits: 4 });
    const a = await wal.append("turn", { steps: [] as string[] }, { owner: "agent-1" });
    const b = await wal.replace(a, { steps: ["llm reply"] });
    const c = await wal.replace(b, { steps: ["llm reply", "tool result"] }, { kind: "turn-2" });
    expect([b, c]).toEqual([a + 1, a + 2]);
    expect(wal.pendingFor("agent-1")).toEqual([
      { seq: c, epoch: 1, kind: "turn-2", owner: "agent-1", payload: { steps: ["llm reply", "tool result"] }, status: "PENDING" },
    ]);
    await expect(wal.replace(a, {})).rejects.toMatchObject({ code: ErrorCode.INVALID_ID });
    await wal.close();
    const again = await Wal.open({ dir: d });
    expect(again.recovery.pending.map((p) => p.seq)).toEqual([c]);
    expect(again.recovery.complete).toBe(2);
    await again.close();
  });

  it("wal - complete writes the outcome to the kv side table in the same transaction", async () => {
    const d = dir("kv");
    const wal = await Wal.open({ dir: d, sync: "normal" });
    const seq = await wal.append("tool", { name: "search" });
    await wal.complete(seq, { kv: [{ key: `result:${seq}`, value: { hits: 3 } }] });
    expect(wal.getKv(`result:${seq}`)).toEqual({ hits: 3 });
    await wal.complete(seq, { kv: [{ key: `result:${seq}`, value: "second" }] }); // no-op: already COMPLETE
    expect(wal.getKv(`result:${seq}`)).toEqual({ hits: 3 });
    await wal.close();
    const again = await Wal.open({ dir: d });
    expect(again.getKv(`result:${seq}`)).toEqual({ hits: 3 });
    expect(again.recovery.complete).toBe(1);
    await again.close();
  });
});
