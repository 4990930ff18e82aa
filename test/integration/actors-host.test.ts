import { describe, expect, it } from "vitest";
import { createEnvelope, encodeEnvelope, type KovaEvent } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { defineActor, NatsCheckpointStore, type CounterState } from "../../src/actors/index.js";
import { windowJson } from "../../src/actors/checkpoint-store.js";
import { fileServer, startRig, uniqueCluster } from "../fixtures/actors/helpers.js";
import { waitForConsumer } from "../fixtures/bus/helpers.js";
import { defer } from "../fixtures/disposable.js";
import { BusErrorCode } from "../../src/bus/errors.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();

const task = (to: string, payload: unknown = null) => createEnvelope({ from: "tester", to, type: "task_delegate", payload });

describe("actor host", () => {
  it("counter - counts each task_delegate once, ignores a redelivered id, and answers info_request on the fast path", async () => {
    await using rig = await startRig(server.url, uniqueCluster());
    await rig.host.start("c1", "counter");
    expect(rig.host.status("c1")?.state).toBe("Idle");
    const sent = [task("c1"), task("c1"), task("c1")];
    for (const env of sent) await rig.bus.send(env);
    // Same envelope id under another Nats-Msg-Id: JetStream stores it, the actor must not count it.
    await rig.bus.js.publish(rig.bus.subjects.a2a("c1"), encodeEnvelope(sent[1]!, "msgpack"), { msgID: "other-id" });
    const last = task("c1");
    await rig.bus.send(last);
    const info = await poll(
      async () => {
        const i = await rig.bus.request<CounterState>("c1", "info_request", null);
        return i.ids.includes(last.id) ? i : undefined;
      },
      { timeoutMs: 10_000, what: "counter to see the last message", retryErrors: true },
    );
    expect(info).toEqual({ count: 4, ids: [...sent.map((e) => e.id), last.id] });
    const caps = await rig.bus.request<{ capabilities: string[] }>("c1", "capability_query", null);
    expect(caps.capabilities).toEqual(["count"]);
    // The state is readable once the checkpoint is saved; the turn ends after its WAL completion.
    await poll(() => rig.host.status("c1")?.handled === 4, { timeoutMs: 5_000, what: "the last turn ended" });
    expect(rig.host.status("c1")).toMatchObject({ inFlight: 0, handled: 4 });
    const turnStates = rig.states.filter(([, , info]) => (info as { turn?: boolean })?.turn).map(([, s]) => s);
    expect(turnStates.slice(0, 2)).toEqual(["Running", "Idle"]);
  });

  it("checkpoint - state is checkpointed to NATS KV after each message and a host on another WAL resumes from it", async () => {
    const cluster = uniqueCluster();
    const first = [task("c2"), task("c2")];
    {
      await using a = await startRig(server.url, cluster, [], { nodeId: "na" });
      await a.host.start("c2", "counter");
      for (const env of first) await a.bus.send(env);
      await poll(async () => (await a.bus.request<CounterState>("c2", "info_request", null)).count === 2, {
        timeoutMs: 10_000,
        what: "two counted",
        retryErrors: true,
      });
      const store = await NatsCheckpointStore.open({ js: a.bus.js, cluster });
      const cp = await store.load("c2");
      expect(cp).toMatchObject({ state: { count: 2, ids: first.map((e) => e.id) }, revision: 2, nodeId: "na" });
      expect(cp!.processed).toEqual(first.map((e) => e.id));
      await a.host.stop("c2", { reason: "moved" });
      expect(a.states.at(-1)).toEqual(["c2", "Completed", { reason: "moved" }]);
    }
    await using b = await startRig(server.url, cluster, [], { nodeId: "nb" });
    await b.host.start("c2", "counter");
    const third = task("c2");
    await b.bus.send(third);
    const info = await poll(
      async () => {
        const i = await b.bus.request<CounterState>("c2", "info_request", null);
        return i.count === 3 ? i : undefined;
      },
      { timeoutMs: 10_000, what: "third counted on the new host", retryErrors: true },
    );
    expect(info.ids).toEqual([...first.map((e) => e.id), third.id]);
  });

  it("checkpoint - a save through the bus's request mux is a compare-and-set on the key's revision, as kv.update is", async () => {
    const cluster = uniqueCluster();
    await using rig = await startRig(server.url, cluster);
    const mine = await NatsCheckpointStore.open({ js: rig.bus.js, cluster, bus: rig.bus });
    const theirs = await NatsCheckpointStore.open({ js: rig.bus.js, cluster });
    const cp = (n: number, nodeId: string) => ({ state: { count: n, ids: [] }, processed: [`m${n}`], revision: n, nodeId });
    await mine.load("cas1");
    await mine.save("cas1", cp(1, "n1")); // create
    await mine.save("cas1", cp(2, "n1")); // update through the mux
    const entry = await mine.store.kv.get("cas1");
    expect(entry?.revision).toBeGreaterThan(1);
    expect((await theirs.load("cas1"))?.revision).toBe(2);
    await theirs.save("cas1", cp(3, "n2"));
    const err = await mine.save("cas1", cp(3, "n1")).catch((e: unknown) => e);
    expect(isKovaError(err, "LEASE_LOST")).toBe(true);
    expect((err as Error).name).toBe("CheckpointConflictError");
    expect((await theirs.load("cas1"))?.nodeId).toBe("n2");
    // Reloaded, it writes on top of the other's revision.
    await mine.load("cas1");
    await mine.save("cas1", cp(4, "n1"));
    expect((await theirs.load("cas1"))?.processed).toEqual(["m4"]);
  });

  it("checkpoint - a busy actor's window (processed_window 100) is stored apart every 64 turns: its checkpoints stay small, and a host on another WAL or a restart on the same WAL resumes with the exact window", async () => {
    const cluster = uniqueCluster();
    const tally = defineActor<{ n: number }>({
      type: "tally",
      initialState: () => ({ n: 0 }),
      handlers: {
        task_delegate: async (ctx) => {
          ctx.state.n += 1;
          return ctx.state.n;
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    const host = { processedWindow: 100 };
    const sent = Array.from({ length: 300 }, () => task("t1"));
    // The same envelope again under another Nats-Msg-Id (past JetStream's duplicate window): the window must drop it.
    const resend = (b: typeof a, env: (typeof sent)[0]) =>
      b.bus.js.publish(b.bus.subjects.a2a("t1"), encodeEnvelope(env, "msgpack"), { msgID: `again-${env.id}` });
    // The tally the fast path answers: the committed state.
    const tallied = (r: { bus: typeof a.bus }, n: number) =>
      poll(async () => (await r.bus.request<{ n: number }>("t1", "info_request", null)).n === n, {
        timeoutMs: 20_000,
        what: `t1 to have counted ${n}`,
        retryErrors: true,
      });
    await using a = await startRig(server.url, cluster, [tally], { nodeId: "na", host });
    await a.host.start("t1", "tally");
    for (const env of sent) await a.bus.send(env);
    await tallied(a, 300);
    const kv = (await NatsCheckpointStore.open({ js: a.bus.js, cluster })).store.kv;
    const raw = (await kv.get("t1"))!;
    const window = (await kv.get(NatsCheckpointStore.windowKey("t1")))!.json<{ v: number; revision: number }>();
    // Stored by turns 65, 129, 193, 257 (the windows of 64, 128, 192, 256); the checkpoint carries the 44 ids after 256.
    expect(raw.json<{ v: number; base: number; revision: number }>()).toMatchObject({ v: 4, base: 256, revision: 300 });
    expect(window).toMatchObject({ v: 1, revision: 256 });
    expect(raw.value.length).toBeLessThan(44 * 23 + 300);
    const loaded = await (await NatsCheckpointStore.open({ js: a.bus.js, cluster })).load("t1");
    expect(loaded!.processed.slice(-100)).toEqual(sent.slice(-100).map((e) => e.id));
    await a.host.stop("t1", { reason: "moved" });

    // Another host, another WAL: every one of the last 100 ids is a duplicate.
    {
      await using b = await startRig(server.url, cluster, [tally], { nodeId: "nb", host });
      await b.host.start("t1", "tally");
      await resend(b, sent[200]!);
      await resend(b, sent[299]!);
      // Sent after the resends: once it is counted, they have had their turns.
      const fresh = task("t1");
      await b.bus.send(fresh);
      await tallied(b, 301);
      expect(b.host.status("t1")?.handled).toBe(1);
      sent.push(fresh);
      await b.host.stop("t1", { reason: "moved" });
    }
    // Back on the first WAL (its local copy is older: NATS's is newer and wins), then 100 more turns.
    await a.host.start("t1", "tally");
    for (const env of Array.from({ length: 100 }, () => task("t1"))) {
      sent.push(env);
      await a.bus.send(env);
    }
    await resend(a, sent[350]!);
    const last = task("t1");
    sent.push(last);
    await a.bus.send(last);
    await tallied(a, 402);
    const after = await (await NatsCheckpointStore.open({ js: a.bus.js, cluster })).load("t1");
    expect(after!.processed.slice(-100)).toEqual(sent.slice(-100).map((e) => e.id));
  });

  it("checkpoint - a window is stored compare-and-set as its checkpoint is: a host that lost the actor cannot store its window over the new owner's, and a window stored by a turn whose checkpoint did not land reads as the same window", async () => {
    const cluster = uniqueCluster();
    await using rig = await startRig(server.url, cluster);
    const old = await NatsCheckpointStore.open({ js: rig.bus.js, cluster, bus: rig.bus });
    const ids = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `m${from + i}`);
    const cp = (revision: number, base: number | undefined, stored?: readonly string[]) => ({
      state: { n: revision },
      processed: ids(Math.max(1, revision - 99), revision),
      revision,
      ...(base === undefined ? {} : { split: { base, ...(stored ? { ids: stored } : {}) } }),
    });
    await old.load("w1");
    await old.save("w1", cp(64, undefined));
    await old.save("w1", cp(65, 64, ids(1, 64)));
    await old.save("w1", cp(70, 64));
    // The actor moves: the new owner stores its window anew at its first turn.
    const owner = await NatsCheckpointStore.open({ js: rig.bus.js, cluster, bus: rig.bus });
    expect((await owner.load("w1"))!.processed).toEqual(ids(1, 70));
    await owner.save("w1", cp(71, 70, ids(1, 70)));
    // The old host, which has not noticed, stores its window of 70 at its next turn: refused.
    const err = await old.save("w1", cp(71, 70, ids(1, 70))).catch((e: unknown) => e);
    expect((err as Error).name).toBe("CheckpointConflictError");
    // A turn that stored the window of 71 and whose checkpoint (72) was lost: 71's checkpoint still reads exactly.
    await owner.store.kv.put(NatsCheckpointStore.windowKey("w1"), windowJson(71, ids(1, 71)));
    const reader = await NatsCheckpointStore.open({ js: rig.bus.js, cluster });
    expect((await reader.load("w1"))!.processed).toEqual(ids(1, 71));
  });

  it("checkpoint - a host whose checkpoint was written by another node meanwhile reloads it instead of overwriting it (compare-and-set)", async () => {
    const cluster = uniqueCluster();
    await using rig = await startRig(server.url, cluster);
    await rig.host.start("z1", "counter");
    // Another node (one that had not yet noticed losing the actor) commits three turns.
    const other = await NatsCheckpointStore.open({ js: rig.bus.js, cluster });
    await other.load("z1");
    const theirs = ["t1", "t2", "t3"];
    await other.save("z1", { state: { count: 3, ids: theirs }, processed: theirs, revision: 3, nodeId: "other" });
    const mine = task("z1");
    await rig.bus.send(mine);
    const cp = await poll(
      async () => {
        const c = await other.load("z1");
        return (c?.state as CounterState | undefined)?.count === 4 ? c : undefined;
      },
      { timeoutMs: 10_000, what: "the turn committed on top of the other node's state", retryErrors: true },
    );
    expect(cp.state).toEqual({ count: 4, ids: [...theirs, mine.id] });
    expect(cp).toMatchObject({ revision: 4, nodeId: "n1" });
    // The rpc path serves the committed memory, applied right after the checkpoint.
    await poll(async () => (await rig.bus.request<CounterState>("z1", "info_request", null)).count === 4, {
      timeoutMs: 5_000,
      what: "memory",
      retryErrors: true,
    });
    expect(await rig.bus.request<CounterState>("z1", "info_request", null)).toEqual(cp.state);
    // Memory is applied at the commit; the turn ends (Idle) after its WAL completion, which a busy disk delays.
    await poll(() => rig.host.status("z1")?.state === "Idle", { timeoutMs: 5_000, what: "z1 idle after its turn" });
  });

  it("unhandled - a message type without a handler goes to the DLQ with reason unhandled and an asker gets a clear error", async () => {
    await using rig = await startRig(server.url, uniqueCluster());
    await rig.host.start("c3", "counter");
    const stray = createEnvelope({ from: "tester", to: "c3", type: "result_notify", payload: { x: 1 } });
    await rig.bus.send(stray);
    const dead = await poll(async () => (await rig.bus.listDlq({ reason: "unhandled" }))[0], { timeoutMs: 10_000, what: "dead letter", retryErrors: true });
    expect(dead.headers["Kova-Dlq-Msg-Id"]).toBe(stray.id);
    expect(dead.headers["Kova-Dlq-Error-Code"]).toBe(BusErrorCode.UNKNOWN_MESSAGE_TYPE);
    const err = await rig.bus
      .ask(createEnvelope({ from: "tester", to: "c3", type: "capability_reply", payload: null }), { timeoutMs: 5_000 })
      .catch((e: unknown) => e);
    expect(isKovaError(err, BusErrorCode.UNKNOWN_MESSAGE_TYPE)).toBe(true);
    expect((err as Error).message).toContain("no handler for capability_reply");
    // The actor goes on with the next message.
    await rig.bus.send(task("c3"));
    await poll(async () => (await rig.bus.request<CounterState>("c3", "info_request", null)).count === 1, {
      timeoutMs: 10_000,
      what: "count",
      retryErrors: true,
    });
  });

  it("protocol - an actor takes a namespaced type its handler names; a type nobody registered goes to the DLQ as unknown_type", async () => {
    const pinger = defineActor<{ pings: number }>({
      type: "pinger",
      initialState: () => ({ pings: 0 }),
      handlers: {
        "hosttest.ping": async (ctx) => {
          ctx.state.pings++;
          return { pong: ctx.state.pings };
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    await using rig = await startRig(server.url, uniqueCluster(), [pinger]);
    await rig.host.start("p1", "pinger");
    const reply = await rig.bus.ask(createEnvelope({ from: "tester", to: "p1", type: "hosttest.ping", payload: null }), { timeoutMs: 10_000 });
    expect(reply.payload).toEqual({ pong: 1 });
    const stray = createEnvelope({ from: "tester", to: "p1", type: "hosttest.not_registered", payload: null });
    await rig.bus.send(stray);
    const dead = await poll(async () => (await rig.bus.listDlq({ reason: "unknown_type" })).find((d) => d.headers["Kova-Dlq-Msg-Id"] === stray.id), {
      timeoutMs: 10_000,
      what: "dead letter",
      retryErrors: true,
    });
    expect(dead.headers["Kova-Dlq-Error-Code"]).toBe(BusErrorCode.UNKNOWN_MESSAGE_TYPE);
    // The actor goes on with the next message.
    await rig.bus.send(createEnvelope({ from: "tester", to: "p1", type: "hosttest.ping", payload: null }));
    await poll(async () => (await rig.bus.request<{ pings: number }>("p1", "info_request", null)).pings === 2, {
      timeoutMs: 10_000,
      what: "second ping",
      retryErrors: true,
    });
  });

  it("supervision - a retried turn starts from the state before it and reuses the steps its failed attempts recorded", async () => {
    const ran: string[] = [];
    const flaky = defineActor<{ notes: string[] }>({
      type: "flaky",
      maxAttempts: 3,
      initialState: () => ({ notes: [] }),
      handlers: {
        task_delegate: async (ctx) => {
          ctx.state.notes.push(`attempt ${ctx.attempt}`);
          const key = await ctx.step("charge", (info) => {
            ran.push(info.key);
            return info.key;
          });
          if (ctx.attempt < 3) throw new Error("transient");
          ctx.state.notes.push(`charged ${key}`);
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    await using rig = await startRig(server.url, uniqueCluster(), [flaky]);
    await rig.host.start("fl", "flaky");
    const env = task("fl");
    await rig.bus.send(env);
    const state = await poll(
      async () => {
        const st = await rig.bus.request<{ notes: string[] }>("fl", "info_request", null);
        return st.notes.length > 0 ? st : undefined;
      },
      { timeoutMs: 10_000, what: "third attempt committed", retryErrors: true },
    );
    expect(ran).toEqual([`fl.${env.id}.0`]);
    expect(state.notes).toEqual(["attempt 3", `charged fl.${env.id}.0`]);
    // The state is readable once the checkpoint is saved; the turn ends after its reply and WAL completion.
    await poll(() => rig.host.status("fl")?.state === "Idle", { timeoutMs: 5_000, what: "turn ended" });
    expect(rig.host.status("fl")).toMatchObject({ state: "Idle", handled: 1 });
  });

  it("supervision - a crashing handler is retried with backoff, then the actor is Failed, the failure is an event and the message is dead-lettered", async () => {
    let calls = 0;
    const crashy = defineActor<{ ok: number }>({
      type: "crashy",
      maxAttempts: 3,
      initialState: () => ({ ok: 0 }),
      handlers: {
        task_delegate: async (ctx) => {
          calls++;
          if (ctx.message.payload === "boom") throw new Error(`crash on attempt ${ctx.attempt}`);
          ctx.state.ok++;
          return ctx.state.ok;
        },
      },
    });
    const cluster = uniqueCluster();
    await using rig = await startRig(server.url, cluster, [crashy]);
    const events: KovaEvent[] = [];
    const stream = rig.bus.subscribeEvents({ sessionId: "actors" });
    await using _events = defer(() => stream.stop());
    void (async () => {
      for await (const e of stream) events.push(e);
    })();
    await rig.host.start("k1", "crashy");
    const bad = task("k1", "boom");
    await rig.bus.send(bad);
    await poll(() => rig.host.status("k1")?.state === "Failed", { timeoutMs: 10_000, what: "Failed" });
    expect(rig.states.filter(([id]) => id === "k1").map(([, st]) => st)).toEqual(["Idle", "Running", "Failed"]);
    expect(calls).toBe(3);
    const failed = await poll(() => events.find((e) => e.type === "actor_failed"), { timeoutMs: 5_000, what: "actor_failed event" });
    expect(failed).toMatchObject({ runId: "k1", data: { envelopeId: bad.id, attempts: 3, error: { message: "crash on attempt 3" } } });
    expect(events.filter((e) => e.type === "actor_turn_retry").map((e) => (e.data as { attempt: number }).attempt)).toEqual([2, 3]);
    const dead = await poll(async () => (await rig.bus.listDlq({ reason: "handler_failed" }))[0], { timeoutMs: 5_000, what: "dead letter", retryErrors: true });
    expect(dead.headers["Kova-Dlq-Msg-Id"]).toBe(bad.id);
    // Failed takes no messages until resumed: the server holds the next one with nobody
    // pulling for k1, so no handler can run (a leftover pull would hand it back at once).
    const good = task("k1", "fine");
    await rig.bus.send(good);
    await waitForConsumer(
      rig.bus,
      "k1",
      "to hold the next message with no pull waiting",
      (ci) => ci.num_pending + ci.num_redelivered === 1 && ci.num_ack_pending === 0 && ci.num_waiting === 0,
    );
    expect(calls).toBe(3);
    await rig.host.signal("k1", "resume");
    await poll(() => calls === 4 && rig.host.status("k1")?.state === "Idle", { timeoutMs: 10_000, what: "resumed actor handles the next message" });
    expect(rig.host.status("k1")?.handled).toBe(2);
  });
});
