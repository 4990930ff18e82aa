import { describe, expect, it } from "vitest";
import { ActorMemory } from "../../src/actors/memory.js";
import { PauseGate } from "../../src/actors/pause-gate.js";
import {
  CHECKPOINT_RECENT_IDS,
  checkpointJson,
  localCheckpoint,
  localWindow,
  PROCESSED_LIMIT,
  readCheckpoint,
  readWindow,
  windowJson,
  type Checkpoint,
} from "../../src/actors/checkpoint-store.js";
import { CorruptProcessedIdsError, extendIds, packIds, unpackIds } from "../../src/actors/processed-ids.js";
import { newId } from "../../src/core/ids.js";

describe("actor memory", () => {
  it("memory - starts from the newer of the shared and the local checkpoint, else the initial state", () => {
    const shared = { state: { n: 5 }, processed: ["a"], revision: 5 };
    const local = { state: { n: 6 }, processed: ["a", "b"], revision: 6 };
    expect(ActorMemory.from(shared, local, () => ({ n: 0 })).state).toEqual({ n: 6 });
    expect(ActorMemory.from({ ...shared, revision: 7 }, local, () => ({ n: 0 })).state).toEqual({ n: 5 });
    const fresh = ActorMemory.from(undefined, undefined, () => ({ n: 0 }));
    expect([fresh.state, fresh.revision, fresh.processed]).toEqual([{ n: 0 }, 0, []]);
  });

  it("memory - next() proposes without changing; apply() commits and keeps only the newest processed ids", () => {
    const mem = ActorMemory.from(undefined, undefined, () => 0);
    const cp = mem.next(1, "m1", { type: "t", nodeId: "n", ts: 1 });
    expect(mem.has("m1")).toBe(false);
    mem.apply(cp);
    expect([mem.state, mem.revision, mem.has("m1")]).toEqual([1, 1, true]);
    for (let i = 0; i < PROCESSED_LIMIT + 5; i++) mem.apply(mem.next(i, `x${i}`, { type: "t", nodeId: "n", ts: 1 }));
    expect(mem.processed).toHaveLength(PROCESSED_LIMIT);
    expect(mem.has("m1")).toBe(false);
    expect(mem.has(`x${PROCESSED_LIMIT + 4}`)).toBe(true);
    expect(mem.next(0, "y", { type: "t", nodeId: "n", ts: 1 }).processed).toHaveLength(PROCESSED_LIMIT);
    // A checkpoint other than the last proposal (a retried commit) is applied all the same.
    const first = mem.next(1, "p1", { type: "t", nodeId: "n", ts: 1 });
    mem.next(2, "p2", { type: "t", nodeId: "n", ts: 1 });
    mem.apply(first);
    expect([mem.has("p1"), mem.has("p2"), mem.has(`x${PROCESSED_LIMIT + 4}`), mem.has("x5"), mem.has("x6")]).toEqual([true, false, true, false, true]);
    expect(mem.processed).toHaveLength(PROCESSED_LIMIT);
  });
});

describe("actor memory: the window stored split", () => {
  const meta = { type: "t", nodeId: "n", ts: 1 };
  /** Two stores as they keep a checkpoint: NATS (JSON, the window under its own key) and the WAL (bytes, its own entry). */
  function stores() {
    const nats: { cp?: string; window?: string } = {};
    const wal: { cp?: ReturnType<typeof localCheckpoint>; window?: ReturnType<typeof localWindow> } = {};
    return {
      save(cp: Checkpoint) {
        if (cp.split?.ids) {
          nats.window = windowJson(cp.split.base, cp.split.ids);
          wal.window = localWindow(cp.split.base, cp.split.ids);
        }
        nats.cp = checkpointJson(cp);
        wal.cp = localCheckpoint(cp);
      },
      loadNats: () => readCheckpoint("c1", JSON.parse(nats.cp!), nats.window ? readWindow("w", JSON.parse(nats.window)) : undefined),
      loadWal: () => readCheckpoint("c1", wal.cp!, wal.window ? readWindow("w", wal.window) : undefined),
      natsBytes: () => nats.cp!.length,
    };
  }

  it("split - a busy actor's checkpoint carries at most CHECKPOINT_RECENT_IDS ids, its window is stored apart every CHECKPOINT_RECENT_IDS turns, and both stores read back the exact window", () => {
    let mem = ActorMemory.from(undefined, undefined, () => 0);
    const s = stores();
    const seals: number[] = [];
    let largest = 0;
    for (let i = 1; i <= 2_600; i++) {
      const cp = mem.next(i, newId(), meta);
      if (cp.split?.ids) seals.push(cp.revision);
      s.save(cp);
      mem.apply(cp);
      if (i > CHECKPOINT_RECENT_IDS) largest = Math.max(largest, s.natsBytes());
      if (i % 97 === 0 || i > 2_590) {
        for (const loaded of [s.loadNats(), s.loadWal()]) {
          const back = ActorMemory.from(loaded, undefined, () => 0);
          expect(back.processed).toEqual(mem.processed);
          expect(back.revision).toBe(i);
        }
      }
      // A restart now: the memory loaded from the stores goes on, and its first turn stores the window again.
      if (i === 1_500) mem = ActorMemory.from(s.loadNats(), s.loadWal(), () => 0);
    }
    expect(mem.processed).toHaveLength(PROCESSED_LIMIT);
    // Whole while the actor's history fits; split from then on, stored again every CHECKPOINT_RECENT_IDS turns and after the restart.
    expect(seals[0]).toBe(CHECKPOINT_RECENT_IDS + 1);
    expect(seals).toContain(1_501);
    for (let k = 1; k < seals.length; k++) expect(seals[k]! - seals[k - 1]!).toBeLessThanOrEqual(CHECKPOINT_RECENT_IDS);
    // 1,000 ids whole are ~23 KB of base64; split, at most 64 of them.
    expect(largest).toBeLessThan(CHECKPOINT_RECENT_IDS * 23 + 200);
    expect(windowJson(1, mem.processed).length).toBeGreaterThan(22_000);
  });

  it("split - a window stored by a turn whose checkpoint did not land (or by a deposed host) is newer than the one the checkpoint names: the window read is the same", () => {
    const mem = ActorMemory.from(undefined, undefined, () => 0);
    let saved: Checkpoint | undefined;
    // Stored by turns 65, 129, 193 (the windows of 64, 128, 192): the turn after 256 stores it again.
    const last = 4 * CHECKPOINT_RECENT_IDS;
    for (let i = 1; i <= last; i++) {
      const cp = mem.next(i, `m${i}`, meta);
      mem.apply(cp);
      saved = cp;
    }
    expect(saved!.split).toEqual({ base: 3 * CHECKPOINT_RECENT_IDS });
    const stored = JSON.parse(checkpointJson(saved!));
    // The next turn's window (of revision 256) written, its checkpoint (257) lost.
    const next = mem.next(last + 1, `m${last + 1}`, meta);
    expect(next.split?.ids ? next.split.base : undefined).toBe(last);
    const window = readWindow("w", JSON.parse(windowJson(next.split!.base, next.split!.ids!)));
    expect(readCheckpoint("c1", stored, window).processed).toEqual(mem.processed);
  });

  it("split - a checkpoint whose stored window is missing, older than its base, newer than itself, or whose ids do not match its revisions is damaged, not an empty window", () => {
    const mem = ActorMemory.from(undefined, undefined, () => 0);
    let cp: Checkpoint | undefined;
    for (let i = 1; i <= 100; i++) {
      cp = mem.next(i, `m${i}`, meta);
      mem.apply(cp);
    }
    const raw = JSON.parse(checkpointJson(cp!));
    const base = raw.base as number;
    const window = (revision: number) => ({ revision, ids: mem.processed.slice(0, revision) });
    expect(readCheckpoint("c1", raw, window(base)).processed).toEqual(mem.processed);
    for (const [stored, w] of [
      [raw, undefined],
      [raw, window(base - 1)],
      [raw, window(101)],
      [{ ...raw, revision: 101 }, window(base)],
      [{ ...raw, base: -1 }, window(base)],
    ] as const) {
      expect(() => readCheckpoint("checkpoint of actor c1", stored, w)).toThrow(/checkpoint of actor c1: its processed ids cannot be read/);
    }
  });

  it("split - a window of at most CHECKPOINT_RECENT_IDS ids is never split: its checkpoints stay version 2", () => {
    const mem = ActorMemory.from(undefined, undefined, () => 0, CHECKPOINT_RECENT_IDS);
    for (let i = 1; i <= 300; i++) {
      const cp = mem.next(i, `m${i}`, meta);
      expect([cp.split, cp.v]).toEqual([undefined, 2]);
      mem.apply(cp);
    }
  });
});

describe("processed ids, packed", () => {
  it("packed - UUIDs take 17 bytes, any other id its length plus one, and every id reads back as it was", () => {
    const uuids = Array.from({ length: 1000 }, () => newId());
    expect(packIds(uuids)).toHaveLength(17_000);
    const odd = ["a", "client-id_7", "3F2C9A1E-8B7D-4C6E-9F01-23456789ABCD", "x".repeat(128), "3f2c9a1e8b7d4c6e9f0123456789abcd", "-_-"];
    const mixed = [...odd, uuids[0]!];
    const bytes = packIds(mixed);
    expect(bytes).toHaveLength(odd.reduce((n, id) => n + 1 + id.length, 0) + 17);
    expect(unpackIds(new Uint8Array(bytes), "c1")).toEqual(mixed);
  });

  it("packed - a window extended id by id has the bytes of the same window packed from scratch", () => {
    let window: readonly string[] = [];
    for (let i = 0; i < 2_500; i++) {
      window = extendIds(window, i % 3 === 0 ? `m${i}` : newId(), 1000);
      if (i % 250 === 0 || i > 2_490) {
        expect(window).toHaveLength(Math.min(i + 1, 1000));
        expect(packIds(window).equals(packIds([...window]))).toBe(true);
        expect(unpackIds(packIds(window), "c1")).toEqual(window);
      }
    }
  });

  it("packed - damaged bytes are refused with an error naming the checkpoint", () => {
    const good = packIds(["abc", newId()]);
    for (const bad of [good.subarray(0, good.length - 3), Buffer.from([200, 97]), Buffer.from([2, 97, 0x2e]), Buffer.from([0, 1, 2])]) {
      const err = (() => {
        try {
          unpackIds(bad, "checkpoint of actor c1");
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(err).toBeInstanceOf(CorruptProcessedIdsError);
      expect((err as Error).message).toContain("checkpoint of actor c1");
    }
  });
});

describe("pause gate", () => {
  it("gate - passes when open, holds while paused until resume, and rejects a waiter on abort", async () => {
    const gate = new PauseGate();
    await gate.wait();
    gate.pause();
    let passed = false;
    const held = gate.wait().then(() => (passed = true));
    const ac = new AbortController();
    const aborted = gate.wait(ac.signal).catch((e: unknown) => e);
    // The aborted waiter settles only after the gate has had every chance to release the
    // held one (both are promise chains on the same gate): then the held one must still wait.
    ac.abort(new Error("interrupted"));
    expect(((await aborted) as Error).message).toBe("interrupted");
    expect(passed).toBe(false);
    gate.resume();
    await held;
    expect(passed).toBe(true);
  });
});
