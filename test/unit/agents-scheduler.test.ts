import { describe, expect, it } from "vitest";
import {
  ModelCallAbortedError,
  ModelCallScheduler,
  type QueuedInfo,
  type SchedulePolicy,
  SchedulerClosedError,
  type SlotTicket,
} from "../../src/agents/model/index.js";

function scheduler(policy: SchedulePolicy, maxConcurrency = 1): ModelCallScheduler {
  return new ModelCallScheduler([["m", { maxConcurrency, policy }]]);
}

/**
 * Holds the only slot with a first call, queues `tickets` behind it, then lets each
 * granted call finish at once, and returns the order in which the queued ones started.
 */
async function startOrder(s: ModelCallScheduler, tickets: Array<Omit<SlotTicket, "model"> & { label: string }>): Promise<string[]> {
  const order: string[] = [];
  const blocker = await s.acquire({ model: "m", agentId: "blocker" });
  const calls = tickets.map(({ label, ...t }) =>
    s.acquire({ model: "m", ...t }).then((release) => {
      order.push(label);
      release();
    }),
  );
  blocker();
  await Promise.all(calls);
  return order;
}

describe("model call scheduler", () => {
  it("scheduler - never exceeds max_concurrency, and reaches it", async () => {
    const s = scheduler("round_robin", 3);
    let inFlight = 0;
    let peak = 0;
    const calls = Array.from({ length: 60 }, async (_, i) => {
      const release = await s.acquire({ model: "m", agentId: `agent-${i % 7}` });
      inFlight++;
      peak = Math.max(peak, inFlight);
      expect(s.stats()[0]!.inFlight).toBeLessThanOrEqual(3);
      await new Promise((r) => setTimeout(r, i % 4));
      inFlight--;
      release();
    });
    await Promise.all(calls);
    expect(peak).toBe(3);
    expect(s.stats()[0]).toMatchObject({ inFlight: 0, queued: 0, granted: 60 });
  });

  it("scheduler - round_robin: an agent with 5 queued calls is not starved by one with 100", async () => {
    const s = scheduler("round_robin");
    const tickets = [
      ...Array.from({ length: 100 }, (_, i) => ({ agentId: "busy", label: `busy-${i + 1}` })),
      ...Array.from({ length: 5 }, (_, i) => ({ agentId: "quiet", label: `quiet-${i + 1}` })),
    ];
    const order = await startOrder(s, tickets);

    expect(order).toHaveLength(105);
    const busy20 = order.indexOf("busy-20");
    for (let i = 1; i <= 5; i++) expect(order.indexOf(`quiet-${i}`)).toBeLessThan(busy20);
    // Each agent's own calls keep their order.
    const busy = order.filter((l) => l.startsWith("busy"));
    expect(busy).toEqual(tickets.filter((t) => t.agentId === "busy").map((t) => t.label));
    expect(order.slice(0, 4)).toEqual(["busy-1", "quiet-1", "busy-2", "quiet-2"]);
  });

  it("scheduler - priority: higher levels first, round-robin by agent within a level", async () => {
    const order = await startOrder(scheduler("priority"), [
      { agentId: "a", priority: 0, label: "low-a" },
      { agentId: "a", priority: 5, label: "high-a1" },
      { agentId: "a", priority: 5, label: "high-a2" },
      { agentId: "b", priority: 5, label: "high-b1" },
      { agentId: "c", priority: 1, label: "mid-c" },
      { agentId: "d", label: "default-d" },
    ]);
    expect(order).toEqual(["high-a1", "high-b1", "high-a2", "mid-c", "low-a", "default-d"]);
  });

  it("scheduler - fair_share: a user with 3 calls is served alongside one with 20 spread over many agents", async () => {
    const heavy = Array.from({ length: 20 }, (_, i) => ({ agentId: `support--u1-${i}`, shareKey: "user-1", label: `u1-${i + 1}` }));
    const light = Array.from({ length: 3 }, (_, i) => ({ agentId: `support--u2-${i}`, shareKey: "user-2", label: `u2-${i + 1}` }));
    const order = await startOrder(scheduler("fair_share"), [...heavy, ...light]);

    // Each of user-2's calls starts within two grants of the one before.
    expect(order.slice(0, 6)).toEqual(["u1-1", "u2-1", "u1-2", "u2-2", "u1-3", "u2-3"]);

    // The same load under round_robin (by agent) leaves user-2 behind 20 agents.
    const rr = await startOrder(scheduler("round_robin"), [...heavy, ...light]);
    expect(rr.indexOf("u2-1")).toBe(20);
  });

  it("scheduler - fair_share: a key that has not been served for longest goes first", async () => {
    const s = scheduler("fair_share");
    // user-old is served first, then user-new; then both queue again behind user-fresh, never served.
    expect(
      await startOrder(s, [
        { agentId: "x", shareKey: "user-old", label: "old" },
        { agentId: "y", shareKey: "user-new", label: "new" },
      ]),
    ).toEqual(["old", "new"]);
    const order = await startOrder(s, [
      { agentId: "y", shareKey: "user-new", label: "new" },
      { agentId: "x", shareKey: "user-old", label: "old" },
      { agentId: "z", shareKey: "user-fresh", label: "fresh" },
    ]);
    expect(order).toEqual(["fresh", "old", "new"]);
  });

  it("scheduler - deadline: earliest deadline first, calls without one last, ties in arrival order", async () => {
    const now = Date.now();
    const order = await startOrder(scheduler("deadline"), [
      { agentId: "a", label: "none-1" },
      { agentId: "b", deadline: now + 5_000, label: "in-5s" },
      { agentId: "c", deadline: now + 1_000, label: "in-1s-first" },
      { agentId: "d", label: "none-2" },
      { agentId: "e", deadline: now + 1_000, label: "in-1s-second" },
      { agentId: "f", deadline: now + 60_000, label: "in-60s" },
    ]);
    expect(order).toEqual(["in-1s-first", "in-1s-second", "in-5s", "in-60s", "none-1", "none-2"]);
  });

  for (const policy of ["round_robin", "priority", "fair_share", "deadline"] as const) {
    it(`scheduler - ${policy}: an aborted waiter leaves the queue and the slot goes to the next`, async () => {
      const s = scheduler(policy);
      const holder = await s.acquire({ model: "m", agentId: "a" });
      const controller = new AbortController();
      const aborted = s.acquire({ model: "m", agentId: "b", shareKey: "b", deadline: Date.now() + 10, priority: 9, signal: controller.signal });
      const next = s.acquire({ model: "m", agentId: "c", shareKey: "c" });
      expect(s.stats()[0]!.queued).toBe(2);

      controller.abort(new Error("user left"));
      const err = await aborted.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ModelCallAbortedError);
      expect((err as ModelCallAbortedError).phase).toBe("queued");
      expect(s.stats()[0]!.queued).toBe(1);

      holder();
      const release = await next;
      expect(s.stats()[0]).toMatchObject({ inFlight: 1, queued: 0 });
      release();
      expect(s.stats()[0]).toMatchObject({ inFlight: 0, queued: 0, granted: 2 });
    });
  }

  it("scheduler - an already aborted signal is refused without taking a slot", async () => {
    const s = scheduler("round_robin");
    const err = await s.acquire({ model: "m", agentId: "a", signal: AbortSignal.abort() }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelCallAbortedError);
    expect(s.stats()[0]).toMatchObject({ inFlight: 0, granted: 0 });
  });

  it("scheduler - releasing twice frees one slot", async () => {
    const s = scheduler("round_robin", 2);
    const r1 = await s.acquire({ model: "m", agentId: "a" });
    await s.acquire({ model: "m", agentId: "b" });
    const queued = s.acquire({ model: "m", agentId: "c" });
    const alsoQueued = s.acquire({ model: "m", agentId: "d" });
    r1();
    r1();
    await queued;
    expect(s.stats()[0]).toMatchObject({ inFlight: 2, queued: 1 });
    s.close();
    await expect(alsoQueued).rejects.toBeInstanceOf(SchedulerClosedError);
  });

  it("scheduler - onQueued fires only for a call that has to wait, with the queue it joins", async () => {
    const s = scheduler("priority", 1);
    const seen: QueuedInfo[] = [];
    const first = await s.acquire({ model: "m", agentId: "a", onQueued: (i) => seen.push(i) });
    expect(seen).toEqual([]);
    const second = s.acquire({ model: "m", agentId: "b", priority: 2, onQueued: (i) => seen.push(i) });
    const third = s.acquire({
      model: "m",
      agentId: "c",
      onQueued: () => {
        throw new Error("a broken hook does not lose the call");
      },
    });
    expect(seen).toEqual([{ model: "m", policy: "priority", statsClass: "priority_2", queued: 1, inFlight: 1, maxConcurrency: 1 }]);
    first();
    (await second)();
    (await third)();
  });

  it("scheduler - stats report wait-time percentiles per class", async () => {
    const s = scheduler("deadline", 1);
    const holder = await s.acquire({ model: "m", agentId: "a", deadline: Date.now() + 1000 });
    const waiting = s.acquire({ model: "m", agentId: "b" });
    await new Promise((r) => setTimeout(r, 60));
    holder();
    (await waiting)();
    const stats = s.stats()[0]!;
    expect(stats.classes.deadline).toMatchObject({ queued: 0, granted: 1, waitMs: { p50: 0, max: 0 } });
    expect(stats.classes.no_deadline!.granted).toBe(1);
    expect(stats.classes.no_deadline!.waitMs.max).toBeGreaterThanOrEqual(50);
  });

  it("scheduler - a raised limit lets waiters in at once; a new policy keeps arrival order", async () => {
    const s = scheduler("round_robin", 1);
    await s.acquire({ model: "m", agentId: "a" });
    const waiting = [s.acquire({ model: "m", agentId: "a" }), s.acquire({ model: "m", agentId: "b" })];
    s.setModel("m", { maxConcurrency: 3, policy: "deadline" });
    await Promise.all(waiting);
    expect(s.stats()[0]).toMatchObject({ policy: "deadline", inFlight: 3, queued: 0 });
  });

  it("scheduler - an unknown model is a clear error", async () => {
    const err = await scheduler("round_robin")
      .acquire({ model: "nope", agentId: "a" })
      .catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/no slots for model "nope": known models are m/);
  });
});
