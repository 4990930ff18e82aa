import { describe, expect, it } from "vitest";
import { ActorMemory } from "../../src/actors/memory.js";
import { PauseGate } from "../../src/actors/pause-gate.js";
import { PROCESSED_LIMIT } from "../../src/actors/checkpoint-store.js";

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
