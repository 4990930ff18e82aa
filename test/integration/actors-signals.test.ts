import { describe, expect, it } from "vitest";
import { createEnvelope, type KovaEvent } from "../../src/bus/index.js";
import { isKovaError, isTimeout } from "../../src/core/errors.js";
import { defineActor, LeaseLostError, type CounterState } from "../../src/actors/index.js";
import { fileServer, startRig, uniqueCluster } from "../fixtures/actors/helpers.js";
import { waitForConsumer } from "../fixtures/bus/helpers.js";
import { BusErrorCode } from "../../src/bus/errors.js";
import { ActorErrorCode } from "../../src/actors/errors.js";
import { poll } from "../fixtures/poll.js";
import type { Wal } from "../../src/wal/index.js";

const server = fileServer();

const task = (to: string, payload: unknown = null) => createEnvelope({ from: "tester", to, type: "task_delegate", payload });

/** A handler the test steers: it records its progress and waits where told. */
function steerable() {
  const log: string[] = [];
  /** Where turns got to past their waits: a positive signal that a turn reached its next step. */
  const reached: string[] = [];
  let release: () => void = () => {};
  const released = new Promise<void>((r) => (release = r));
  const def = defineActor<{ done: string[] }>({
    type: "steer",
    initialState: () => ({ done: [] }),
    handlers: {
      task_delegate: async (ctx) => {
        const mode = ctx.message.payload as string;
        log.push(`start:${mode}`);
        await ctx.step("first", () => log.push(`first:${mode}`), { idempotent: true });
        if (mode === "hold") {
          await released;
          // In the same synchronous run that asks the pause gate for the second step.
          reached.push(`released:${mode}`);
        }
        if (mode === "block") {
          // The signal may have fired already (between the first step and here).
          await new Promise((_, reject) => {
            if (ctx.signal.aborted) reject(ctx.signal.reason);
            ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true });
          });
        }
        await ctx.step("second", () => log.push(`second:${mode}`), { idempotent: true });
        ctx.state.done.push(mode);
        return ctx.state.done.length;
      },
    },
  });
  return {
    def,
    log,
    reached,
    release: () => release(),
  };
}

function collect(stream: AsyncIterable<KovaEvent>): KovaEvent[] {
  const out: KovaEvent[] = [];
  void (async () => {
    for await (const e of stream) out.push(e);
  })();
  return out;
}

describe("actor signals", () => {
  it("pause - holds a running turn at its next step and new messages until resume", async () => {
    const s = steerable();
    await using rig = await startRig(server.url, uniqueCluster(), [s.def]);
    await rig.host.start("p1", "steer");
    await rig.bus.send(task("p1", "hold"));
    await poll(() => s.log.includes("first:hold"), { timeoutMs: 5_000, what: "first step" });
    expect(rig.host.status("p1")?.state).toBe("Running");
    await rig.host.signal("p1", "pause");
    expect(rig.host.status("p1")?.state).toBe("Paused");
    await rig.bus.send(task("p1", "next"));
    s.release();
    // Positive signals: the held turn has reached the gate of its second step, and the next
    // message waits on the server behind the unacked one (max_ack_pending 1).
    await poll(() => s.reached.includes("released:hold"), { timeoutMs: 5_000, what: "the held turn to reach its second step" });
    await waitForConsumer(rig.bus, "p1", "to hold the next message behind the running turn", (ci) => ci.num_pending === 1 && ci.num_ack_pending === 1);
    expect(s.log).toEqual(["start:hold", "first:hold"]);
    expect(rig.host.status("p1")).toMatchObject({ state: "Paused", inFlight: 1 });
    await rig.host.signal("p1", "resume");
    await poll(() => s.log.includes("second:next"), { timeoutMs: 5_000, what: "both turns after resume" });
    expect(s.log).toEqual(["start:hold", "first:hold", "second:hold", "start:next", "first:next", "second:next"]);
    await poll(() => rig.host.status("p1")?.state === "Idle", { timeoutMs: 5_000, what: "Idle" });
    const states = rig.states.filter(([, , info]) => !(info as { turn?: boolean })?.turn).map(([, st]) => st);
    expect(states).toEqual(["Idle", "Paused", "Running"]);
  });

  it("stop - a turn held by pause is cut, stays pending in the WAL and is resumed with its recorded steps when this host starts the actor again", async () => {
    const s = steerable();
    await using rig = await startRig(server.url, uniqueCluster(), [s.def]);
    await rig.host.start("p2", "steer");
    await rig.bus.send(task("p2", "hold"));
    await poll(() => s.log.includes("first:hold"), { timeoutMs: 5_000, what: "first step" });
    await rig.host.signal("p2", "pause");
    s.release();
    await rig.host.stop("p2", { reason: "moved" });
    expect(rig.states.at(-1)).toEqual(["p2", "Completed", { reason: "moved" }]);
    expect(rig.wal.pendingFor("p2")).toHaveLength(1);
    expect(rig.host.pendingActors()).toEqual(["p2"]);
    await rig.host.start("p2", "steer");
    expect(rig.states.slice(-2).map(([, st]) => st)).toEqual(["Recovering", "Idle"]);
    expect(s.log).toEqual(["start:hold", "first:hold", "start:hold", "second:hold"]);
    expect(rig.wal.pendingFor("p2")).toEqual([]);
    // The redelivered message finds its turn done.
    await rig.bus.send(task("p2", "later"));
    await poll(() => s.log.includes("second:later"), { timeoutMs: 5_000, what: "next message" });
    expect(s.log.filter((l) => l === "second:hold")).toHaveLength(1);
  });

  it("interrupt - aborts the running turn, consumes its message without a dead letter, and the actor goes on", async () => {
    const s = steerable();
    await using rig = await startRig(server.url, uniqueCluster(), [s.def]);
    const events = collect(rig.bus.subscribeEvents({ sessionId: "actors" }));
    await rig.host.start("i1", "steer");
    const blocked = task("i1", "block");
    await rig.bus.send(blocked);
    await poll(() => s.log.includes("first:block"), { timeoutMs: 5_000, what: "first step" });
    await rig.host.signal("i1", "interrupt");
    await rig.bus.send(task("i1", "after"));
    await poll(() => s.log.includes("second:after"), { timeoutMs: 5_000, what: "next message" });
    expect(s.log).not.toContain("second:block");
    const ev = await poll(() => events.find((e) => e.type === "actor_turn_interrupted"), { timeoutMs: 5_000, what: "event" });
    expect(ev.data).toMatchObject({ envelopeId: blocked.id, by: "interrupt" });
    expect(await rig.bus.listDlq()).toEqual([]);
    await poll(() => rig.host.status("i1")?.handled === 2, { timeoutMs: 5_000, what: "second turn committed" });
    expect(rig.host.status("i1")).toMatchObject({ state: "Idle", handled: 2 });
  });

  it("interrupt - a handler that catches the interruption and returns ends its turn normally, with its state", async () => {
    let started = false;
    const agent = defineActor<{ summary?: string }>({
      type: "wrapper",
      initialState: () => ({}),
      handlers: {
        task_delegate: async (ctx) => {
          started = true;
          try {
            await ctx.step(
              "long-llm-call",
              () =>
                new Promise((_, reject) => {
                  if (ctx.signal.aborted) reject(ctx.signal.reason);
                  ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true });
                }),
              { idempotent: true },
            );
          } catch (err) {
            ctx.state.summary = `wrapped up after ${(err as Error).name}`;
          }
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    await using rig = await startRig(server.url, uniqueCluster(), [agent]);
    await rig.host.start("w1", "wrapper");
    await rig.bus.send(task("w1"));
    await poll(() => started && rig.host.status("w1")?.state === "Running", { timeoutMs: 5_000, what: "turn running" });
    await rig.host.signal("w1", "interrupt");
    await poll(() => rig.host.status("w1")?.handled === 1, { timeoutMs: 5_000, what: "turn ended" });
    expect(await rig.bus.request("w1", "info_request", null)).toEqual({ summary: "wrapped up after TurnInterruptedError" });
  });

  it("kill - aborts the running turn, dead-letters its message, ends Completed and stops answering rpc", async () => {
    const s = steerable();
    await using rig = await startRig(server.url, uniqueCluster(), [s.def]);
    await rig.host.start("k2", "steer");
    const blocked = task("k2", "block");
    await rig.bus.send(blocked);
    await poll(() => s.log.includes("first:block"), { timeoutMs: 5_000, what: "first step" });
    await rig.host.signal("k2", "kill");
    expect(rig.host.status("k2")).toBeUndefined();
    expect(rig.states.at(-1)).toEqual(["k2", "Completed", { reason: "killed" }]);
    const dead = await poll(async () => (await rig.bus.listDlq({ reason: "killed" }))[0], { timeoutMs: 5_000, what: "dead letter", retryErrors: true });
    expect(dead.headers["Kova-Dlq-Msg-Id"]).toBe(blocked.id);
    const err = await rig.bus.request("k2", "info_request", null, { timeoutMs: 1_000 }).catch((e: unknown) => e);
    expect(isKovaError(err, BusErrorCode.NO_RESPONDERS)).toBe(true);
    const signalErr = await rig.host.signal("k2", "resume").catch((e: unknown) => e);
    expect(isKovaError(signalErr, ActorErrorCode.NOT_HOSTED)).toBe(true);
  });

  it("fence - a node that lost the lease journals nothing more, leaves the actor, and the next host handles the message", async () => {
    const cluster = uniqueCluster();
    let leaseHeld = true;
    const env = task("f1");
    {
      await using a = await startRig(server.url, cluster, [], {
        nodeId: "na",
        host: {
          fence: (id) => {
            if (!leaseHeld) throw new LeaseLostError(id);
          },
        },
      });
      await a.host.start("f1", "counter");
      leaseHeld = false;
      await a.bus.send(env);
      await poll(() => a.host.status("f1") === undefined, { timeoutMs: 5_000, what: "actor to leave" });
      expect(a.states.at(-1)).toEqual(["f1", "Completed", { reason: "lease_lost" }]);
      expect(a.wal.pendingFor("f1")).toEqual([]);
    }
    await using b = await startRig(server.url, cluster, [], { nodeId: "nb" });
    await b.host.start("f1", "counter");
    const info = await poll(
      async () => {
        const i = await b.bus.request<CounterState>("f1", "info_request", null);
        return i.count === 1 ? i : undefined;
      },
      { timeoutMs: 10_000, what: "redelivered message on the new host", retryErrors: true },
    );
    expect(info.ids).toEqual([env.id]);
  });

  it("fence - a lease lost while a step's function runs (journal local): the result reaches only this node's WAL, the fence before the checkpoint ends the turn lease_lost, its record is abandoned, and the next host runs the message", async () => {
    const cluster = uniqueCluster();
    let leaseHeld = true;
    const calls: string[] = [];
    const local: { wal?: Wal; seen?: unknown[] } = {};
    const probe = (node: string) =>
      defineActor<{ by: string[] }>({
        type: "probe",
        initialState: () => ({ by: [] }),
        handlers: {
          task_delegate: async (ctx) => {
            const by = await ctx.step("work", () => {
              calls.push(node);
              // The lease goes while the step's function runs (a freeze, a partition).
              if (node === "na") leaseHeld = false;
              return node;
            });
            // The step's `done` was written without a fence after the function: to this WAL only.
            if (node === "na") local.seen = local.wal?.pendingFor("p1").map((r) => (r.payload as { steps: unknown[] }).steps);
            ctx.state.by.push(by);
          },
        },
        rpc: { info_request: (_env, state) => state },
      });
    const env = task("p1");
    {
      await using a = await startRig(server.url, cluster, [probe("na")], {
        nodeId: "na",
        host: {
          stepJournal: "local",
          fence: (id) => {
            if (!leaseHeld) throw new LeaseLostError(id);
          },
        },
      });
      local.wal = a.wal;
      await a.host.start("p1", "probe");
      await a.bus.send(env);
      await poll(() => a.host.status("p1") === undefined, { timeoutMs: 5_000, what: "p1 to leave na" });
      expect(a.states.at(-1)).toEqual(["p1", "Completed", { reason: "lease_lost" }]);
      expect(local.seen).toEqual([[{ name: "work", status: "done", idempotent: false, result: "na" }]]);
      expect(a.wal.pendingFor("p1")).toEqual([]);
    }
    await using b = await startRig(server.url, cluster, [probe("nb")], { nodeId: "nb", host: { stepJournal: "local" } });
    await b.host.start("p1", "probe");
    const state = await poll(
      async () => {
        const s = await b.bus.request<{ by: string[] }>("p1", "info_request", null);
        return s.by.length > 0 ? s : undefined;
      },
      { timeoutMs: 10_000, what: "the message handled on nb", retryErrors: true },
    );
    // Nothing of na's turn was committed: nb's is the only one, on the state from before it.
    expect(state).toEqual({ by: ["nb"] });
    // Without the step journal on NATS a takeover runs the step again (docs/actors.md); na's result never reached nb.
    expect(calls).toEqual(["na", "nb"]);
  });

  it("fence - a host that cannot prove it holds the lease stays silent on the fast path, also when it loses it mid-answer; the host that holds it answers every request", async () => {
    const cluster = uniqueCluster();
    let aHolds = true;
    let aAsked = 0;
    let gate: Promise<void> | undefined;
    let entered: (() => void) | undefined;
    const who = (node: string) =>
      defineActor<Record<string, never>>({
        type: "who",
        initialState: () => ({}),
        handlers: {},
        rpc: {
          info_request: async () => {
            entered?.();
            await gate;
            return node;
          },
        },
      });
    await using a = await startRig(server.url, cluster, [who("na")], {
      nodeId: "na",
      host: {
        fenceNow: (id) => {
          aAsked++;
          if (!aHolds) throw new LeaseLostError(id, { data: { holder: "nb" } });
        },
      },
    });
    await using b = await startRig(server.url, cluster, [who("nb")], { nodeId: "nb" });
    await a.host.start("w1", "who");
    await b.host.start("w1", "who");
    const ask = (timeoutMs = 2_000) => a.bus.request<string>("w1", "info_request", null, { timeoutMs }).catch((e: unknown) => e);
    const askMany = () => Promise.all(Array.from({ length: 40 }, () => ask()));

    // na lost the lease to nb but is still subscribed (it has not noticed yet): no queue
    // group, so both get every request; na says nothing, nb answers each one.
    aHolds = false;
    expect(await askMany()).toEqual(Array.from({ length: 40 }, () => "nb"));
    expect(aAsked).toBeGreaterThanOrEqual(40);

    // Lost while the answer was being computed (an async rpc handler waited across a
    // freeze): nothing goes out, and with nobody else to answer the caller's deadline ends it.
    await b.host.stop("w1");
    aHolds = true;
    let open!: () => void;
    gate = new Promise<void>((r) => (open = r));
    const started = new Promise<void>((r) => (entered = r));
    const pending = ask(800);
    await started;
    aHolds = false;
    open();
    const err = await pending;
    expect(isTimeout(err), String(err)).toBe(true);
  });

  it("send - a handler's ctx.send reaches another actor with a recorded id; emit and stream publish events", async () => {
    const relay = defineActor<{ sent: string[] }>({
      type: "relay",
      initialState: () => ({ sent: [] }),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("think", () => ctx.stream("model_delta", { text: "hel" }));
          const id = await ctx.send({ to: "c9", type: "task_delegate", payload: ctx.message.payload });
          ctx.state.sent.push(id);
          await ctx.emit("relayed", { id });
        },
      },
    });
    await using rig = await startRig(server.url, uniqueCluster(), [relay]);
    const events = collect(rig.bus.subscribeEvents({ sessionId: "actors" }));
    await rig.host.start("r9", "relay");
    await rig.host.start("c9", "counter");
    await rig.bus.send(task("r9", "hello"));
    const info = await poll(
      async () => {
        const i = await rig.bus.request<CounterState>("c9", "info_request", null);
        return i.count === 1 ? i : undefined;
      },
      { timeoutMs: 10_000, what: "relayed message", retryErrors: true },
    );
    const relayed = await poll(() => events.find((e) => e.type === "relayed"), { timeoutMs: 5_000, what: "relayed event" });
    expect(relayed).toMatchObject({ runId: "r9", data: { id: info.ids[0] } });
    expect(events.find((e) => e.type === "model_delta")).toMatchObject({ runId: "r9", data: { text: "hel" } });
  });
});
