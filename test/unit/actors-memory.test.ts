import { describe, expect, it } from "vitest";
import { ActorMemory } from "../../src/actors/memory.js";
import { PauseGate } from "../../src/actors/pause-gate.js";
import { PROCESSED_LIMIT } from "../../src/actors/checkpoint-store.js";
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
