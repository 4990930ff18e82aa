import { describe, expect, it } from "vitest";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { defineActor } from "../../src/actors/definition.js";
import { ActorTypeRegistry } from "../../src/actors/registry.js";
import { counterActor } from "../../src/actors/counter.js";
import { DEFAULT_SUPERVISION, retryDelayMs, supervise, supervisionFor } from "../../src/actors/supervision.js";
import { ActorErrorCode } from "../../src/actors/errors.js";

const echo = defineActor<{ n: number }>({
  type: "echo",
  initialState: () => ({ n: 0 }),
  handlers: { task_delegate: async (ctx) => ctx.message.payload },
});

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

describe("actor definitions and registry", () => {
  it("defineActor - rejects a bad type name, an unknown handler key and a bad maxAttempts, naming the field", () => {
    const bad = thrown(() => defineActor({ type: "has.dot", initialState: () => 0, handlers: {} }));
    expect(isKovaError(bad, ErrorCode.INVALID_CONFIG)).toBe(true);
    const key = thrown(() => defineActor({ type: "x", initialState: () => 0, handlers: { task_delegated: async () => 1 } as never }));
    expect((key as Error).message).toContain("x.handlers.task_delegated");
    const rpc = thrown(() => defineActor({ type: "x", initialState: () => 0, handlers: {}, rpc: { task_delegate: () => 1 } as never }));
    expect((rpc as Error).message).toContain("x.rpc.task_delegate");
    const attempts = thrown(() => defineActor({ type: "x", initialState: () => 0, handlers: {}, maxAttempts: 0 }));
    expect((attempts as Error).message).toContain("x.maxAttempts");
  });

  it("registry - holds only what it is given, finds registered types and names the known ones for an unknown type", () => {
    expect(new ActorTypeRegistry().types()).toEqual([]);
    const reg = new ActorTypeRegistry([counterActor, echo]);
    expect(reg.types()).toEqual(["counter", "echo"]);
    expect(reg.get("counter")).toBe(counterActor);
    expect(reg.has("echo")).toBe(true);
    reg.register(echo);
    const err = thrown(() => reg.get("nope"));
    expect(isKovaError(err, ActorErrorCode.UNKNOWN_ACTOR_TYPE)).toBe(true);
    expect((err as Error).message).toContain("counter, echo");
    const dup = thrown(() => reg.register(defineActor({ type: "echo", initialState: () => 1, handlers: {} })));
    expect(isKovaError(dup, ErrorCode.INVALID_CONFIG)).toBe(true);
  });

  it("counter - answers info_request on the fast path with { count, ids }", async () => {
    const info = await counterActor.rpc!.info_request!({ id: "q", from: "t", to: "c", type: "info_request", payload: null }, { count: 2, ids: ["a", "b"] });
    expect(info).toEqual({ count: 2, ids: ["a", "b"] });
    expect(counterActor.initialState()).toEqual({ count: 0, ids: [] });
  });
});

describe("supervision", () => {
  it("supervision - type settings, then maxAttempts, then defaults; host overrides win", () => {
    expect(supervisionFor(echo)).toEqual(DEFAULT_SUPERVISION);
    const t = defineActor({ type: "t", initialState: () => 0, handlers: {}, maxAttempts: 5, supervision: { baseBackoffMs: 7 } });
    expect(supervisionFor(t)).toEqual({ maxAttempts: 5, baseBackoffMs: 7, maxBackoffMs: DEFAULT_SUPERVISION.maxBackoffMs });
    expect(supervisionFor(t, { maxAttempts: 2 }).maxAttempts).toBe(2);
  });

  it("supervision - backoff grows exponentially up to the ceiling", () => {
    const p = { maxAttempts: 10, baseBackoffMs: 100, maxBackoffMs: 1_000 };
    const top = () => 1;
    expect([1, 2, 3, 4, 5, 6].map((a) => retryDelayMs(p, a, top))).toEqual([100, 200, 400, 800, 1000, 1000]);
    const low = () => 0;
    expect(retryDelayMs(p, 3, low)).toBe(200);
  });

  it("supervision - retries a crashing run with growing delays and gives up after maxAttempts", async () => {
    const delays: number[] = [];
    const retried: number[] = [];
    let runs = 0;
    const res = await supervise(
      { maxAttempts: 3, baseBackoffMs: 10, maxBackoffMs: 1_000 },
      async (attempt) => {
        runs++;
        throw new Error(`boom ${attempt}`);
      },
      { retryable: () => true, onRetry: (next) => void retried.push(next), sleep: async (ms) => void delays.push(ms) },
    );
    expect(res).toMatchObject({ ok: false, attempts: 3 });
    expect((res as { error: Error }).error.message).toBe("boom 3");
    expect(runs).toBe(3);
    expect(retried).toEqual([2, 3]);
    expect(delays[1]!).toBeGreaterThanOrEqual(delays[0]! / 2);
    expect(delays[0]!).toBeLessThanOrEqual(10);
    expect(delays[1]!).toBeGreaterThanOrEqual(10);
  });

  it("supervision - stops at once on a non-retryable error and continues a recorded attempt count", async () => {
    let runs = 0;
    const res = await supervise(
      { maxAttempts: 5, baseBackoffMs: 1, maxBackoffMs: 1 },
      async () => {
        runs++;
        throw new Error("fatal");
      },
      { retryable: () => false, onRetry: () => {}, sleep: async () => {} },
    );
    expect(res.ok).toBe(false);
    expect(runs).toBe(1);
    let attempts: number[] = [];
    const cont = await supervise(
      { maxAttempts: 3, baseBackoffMs: 1, maxBackoffMs: 1 },
      async (a) => {
        attempts.push(a);
        if (a < 3) throw new Error("again");
        return "done";
      },
      { retryable: () => true, onRetry: () => {}, sleep: async () => {} },
      2,
    );
    expect(cont).toEqual({ ok: true, value: "done", attempts: 3 });
    expect(attempts).toEqual([2, 3]);
    attempts = [];
  });
});
