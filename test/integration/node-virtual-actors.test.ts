import { Kvm } from "@nats-io/kv";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { ActorTypeRegistry, defineActor, type TemplateBinding } from "../../src/actors/index.js";
import { createEnvelope, encodeEnvelope, KovaClient } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { poll } from "../fixtures/poll.js";
import { inProcessNode } from "../fixtures/node/in-process-node.js";

interface SessionState {
  template: string | null;
  key: string | null;
  greeting: string | null;
  count: number;
  history: string[];
}

/** A conversation-like actor: remembers every line it was told, in order. */
const sessionActor = defineActor<SessionState>({
  type: "session",
  initialState: (t?: TemplateBinding) => ({
    template: t?.name ?? null,
    key: t?.key ?? null,
    greeting: typeof t?.config.greeting === "string" ? t.config.greeting : null,
    count: 0,
    history: [],
  }),
  handlers: {
    task_delegate: async (ctx) => {
      const line = String((ctx.message.payload as { line?: unknown } | null)?.line ?? "");
      ctx.state.history.push(line);
      ctx.state.count += 1;
      return { count: ctx.state.count, history: ctx.state.history, key: ctx.template?.key, greeting: ctx.template?.config.greeting };
    },
  },
  rpc: { info_request: (_env, state) => state },
});

const TEMPLATE = { name: "support", type: "session", config: { greeting: "hello" } };
const task = (line: string) => ({ line });

describe("virtual actors (templates, activation, passivation)", () => {
  it("virtual actors - a plain NATS publish to a never-seen instance activates it; ask --key style addressing activates before sending; the template's config and key reach the instance", async () => {
    // The sweep of unknown mailboxes runs once a minute here: only the core-NATS activation
    // listener can place the raw publish's instance within the time asserted below.
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([sessionActor]),
      templates: [{ ...TEMPLATE, idleAfterMs: 0 }],
      cluster: ["activation_sweep_ms = 60000"],
    });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });

    // Raw NATS, as `nats pub kova.<c>.a2a.support--raw-1 '{...}' -H Content-Type:application/json` would.
    const env = createEnvelope({ from: "raw", to: "support--raw-1", type: "task_delegate", payload: task("first") });
    const h = natsHeaders();
    h.set("Content-Type", "application/json");
    const t0 = performance.now();
    rig.nc.publish(client.bus.subjects.a2a("support--raw-1"), encodeEnvelope(env, "json"), { headers: h });
    const state = await poll(
      async () => {
        const s = await client.request<SessionState>("support--raw-1", "info_request", {}, { timeoutMs: 500 });
        return s.count === 1 ? s : undefined;
      },
      { timeoutMs: 15_000, retryErrors: true, what: "the raw-NATS message handled by the activated instance" },
    );
    const activationMs = performance.now() - t0;
    expect(state).toEqual({ template: "support", key: "raw-1", greeting: "hello", count: 1, history: ["first"] });
    expect(rig.events.some((e) => e.type === "agent_activated" && (e.data as { id: string }).id === "support--raw-1")).toBe(true);
    // Through the core-NATS listener, not the sweep (a minute away).
    expect(activationMs).toBeLessThan(5_000);

    // ask: the registry does not know the id, so the client activates it first.
    const reply = await client.ask<{ count: number; key: string; greeting: string }>("support--user-42", "task_delegate", task("hi"), { timeoutMs: 15_000 });
    expect(reply.payload).toMatchObject({ count: 1, key: "user-42", greeting: "hello" });
    expect(rig.node.agents().find((a) => a.id === "support--user-42")).toMatchObject({ template: "support", type: "session" });
    // besides every node's experiment templates (docs/evals.md)
    expect(rig.node.status().virtual.templates).toEqual([
      { name: "eval", type: "eval", idleAfterMs: 120_000, hosted: 0 },
      { name: "eval-subject", type: "eval-subject", idleAfterMs: 60_000, hosted: 0 },
      { name: "support", type: "session", idleAfterMs: 0, hosted: 2 },
    ]);
    expect(rig.node.status().virtual.activations).toBe(2);

    // A template nobody registered: ask fails at once, naming the templates there are.
    const t1 = Date.now();
    const err = await client.ask("nosuch--x", "task_delegate", null, { timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(isKovaError(err, "UNKNOWN_AGENT")).toBe(true);
    expect((err as Error).message).toContain("templates: eval, eval-subject, support");
    expect(Date.now() - t1).toBeLessThan(5_000);
    // An invalid key never reaches NATS.
    const bad = await client.activate("support--has.dot").catch((e: unknown) => e);
    expect(isKovaError(bad, "INVALID_ID")).toBe(true);
  });

  it("virtual actors - with activation_listener = false a plain NATS publish to a never-seen instance is activated by the sweep within one activation_sweep_ms, and handled", async () => {
    const sweepMs = 1000;
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([sessionActor]),
      templates: [{ ...TEMPLATE, idleAfterMs: 0 }],
      cluster: ["activation_listener = false", `activation_sweep_ms = ${sweepMs}`],
    });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
    const id = "support--swept-1";
    const env = createEnvelope({ from: "raw", to: id, type: "task_delegate", payload: task("stored") });
    const h = natsHeaders();
    h.set("Content-Type", "application/json");
    // Stored by the stream (its ack), with no subscriber on the node to see it go by.
    const ack = await client.bus.js.publish(client.bus.subjects.a2a(id), encodeEnvelope(env, "json"), { headers: h, msgID: env.id });
    const storedAt = Date.now();
    expect(ack.duplicate).toBe(false);
    const state = await poll(
      async () => {
        const s = await client.request<SessionState>(id, "info_request", {}, { timeoutMs: 500 });
        return s.count === 1 ? s : undefined;
      },
      { timeoutMs: 20_000, retryErrors: true, what: "the stored message handled by the swept instance" },
    );
    expect(state.history).toEqual(["stored"]);
    const activated = rig.events.find((e) => e.type === "agent_activated" && (e.data as { id: string }).id === id)!;
    expect(activated.data).toMatchObject({ id, template: "support", via: "sweep" });
    // The documented bound: one sweep interval (plus the sweep's own read of the stream).
    expect(activated.ts - storedAt).toBeLessThan(sweepMs + 1000);
  });

  it("virtual actors - a schedule to a template instance (to = support--k1) activates it and delivers every tick, also after the instance was passivated between ticks", async () => {
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([sessionActor]),
      templates: [{ ...TEMPLATE, idleAfterMs: 200 }],
      // Not the sweep (a minute away): a schedule's send is a publish like any other, which the listener sees.
      cluster: ["activation_sweep_ms = 60000"],
      extraToml: [`[[schedules]]`, `id = "nudge"`, `every = 1500`, `to = "support--k1"`, `payload = { line = "tick" }`].join("\n"),
    });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
    const of = (type: string) => rig.events.filter((e) => e.type === type && ((e.data as { id?: string }).id === "support--k1" || e.runId === "nudge"));
    // Three ticks handled, each by an instance activated for it: passivated in between.
    await poll(() => of("agent_passivated").length >= 2 && of("schedule_fired").length >= 3, {
      timeoutMs: 30_000,
      what: () => `three ticks with passivations between (fired ${of("schedule_fired").length}, passivated ${of("agent_passivated").length})`,
    });
    // The checkpoint holds every tick the instance handled: as many as were fired, each once.
    const kv = await new Kvm(client.bus.js).open(`kova_${rig.cluster}_checkpoints`);
    const cp = await poll(
      async () => {
        const state = (await kv.get("support--k1"))?.json<{ state: SessionState }>().state;
        const fired = new Set(of("schedule_fired").map((e) => (e.data as { tick: number }).tick)).size;
        return state && state.count === fired ? state : undefined;
      },
      { timeoutMs: 10_000, what: "the instance's checkpoint to count every fired tick" },
    );
    expect(cp.count).toBeGreaterThanOrEqual(3);
    expect(cp.history).toEqual(Array.from({ length: cp.count }, () => "tick"));
    expect(cp).toMatchObject({ template: "support", key: "k1" });
    const activations = of("agent_activated").map((e) => (e.data as { via: string }).via);
    expect(activations.length).toBeGreaterThanOrEqual(3);
    expect(activations.every((via) => via === "listener" || via === "passivation")).toBe(true);
  });

  it("virtual actors - an idle instance is passivated (consumer, lease and registry entry gone, checkpoint kept) and its next message re-activates it with its memory intact", async () => {
    await using rig = await inProcessNode({ types: new ActorTypeRegistry([sessionActor]), templates: [{ ...TEMPLATE, idleAfterMs: 600 }] });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
    const id = "support--s-1";
    for (const line of ["one", "two", "three"]) await client.ask(id, "task_delegate", task(line), { timeoutMs: 15_000 });

    await poll(() => rig.events.some((e) => e.type === "agent_passivated" && (e.data as { id: string }).id === id), {
      timeoutMs: 15_000,
      what: "agent_passivated",
    });
    const { jsm, subjects } = client.bus;
    expect(rig.node.agents().find((a) => a.id === id)).toBeUndefined();
    expect(await jsm.consumers.info(subjects.streams.a2a, subjects.consumer(id)).catch((e: unknown) => e)).toBeInstanceOf(Error);
    const kv = (name: string) => new Kvm(client.bus.js).open(`kova_${rig.cluster}_${name}`);
    // Deleted, not purged: a purge makes other nodes' KV watches skip entries on NATS < 2.10.11.
    expect(await (await kv("agents")).get(id)).toMatchObject({ operation: "DEL" });
    expect(await (await kv("leases")).get(id)).toMatchObject({ operation: "DEL" });
    const cp = await (await kv("checkpoints")).get(id);
    expect(cp?.json<{ state: SessionState }>().state.history).toEqual(["one", "two", "three"]);
    expect(rig.node.status().virtual.passivations).toBe(1);

    // Addressed again: activated, with the conversation so far.
    const reply = await client.ask<{ count: number; history: string[] }>(id, "task_delegate", task("four"), { timeoutMs: 15_000 });
    expect(reply.payload).toMatchObject({ count: 4, history: ["one", "two", "three", "four"] });
    expect(rig.node.status().virtual.activations).toBe(2);
  });

  it("virtual actors - a node passivates many idle instances at once: a freed place is refilled at once, not at the next check", async () => {
    // idle_after 8 s: the node looks for idle instances every 2 s and passivates at most 32
    // at a time. Before the refill, 100 instances idle together took 4 checks (6 s past the
    // first); now the whole set goes within the first check's pass.
    const idleAfterMs = 8_000;
    const checkMs = idleAfterMs / 4;
    await using rig = await inProcessNode({ types: new ActorTypeRegistry([sessionActor]), templates: [{ ...TEMPLATE, idleAfterMs }] });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
    const ids = Array.from({ length: 100 }, (_, i) => `support--bulk-${i}`);
    await Promise.all(ids.map((id) => client.ask(id, "task_delegate", task("once"), { timeoutMs: 30_000 })));
    // Every instance's last activity is before this moment: all are idle by lastActive + idle_after.
    const lastActive = performance.now();
    const passivatedAt = new Map<string, number>();
    await poll(
      () => {
        for (const e of rig.events)
          if (e.type === "agent_passivated") {
            const id = (e.data as { id: string }).id;
            if (!passivatedAt.has(id)) passivatedAt.set(id, performance.now());
          }
        return passivatedAt.size === ids.length;
      },
      { timeoutMs: 40_000, everyMs: 50, what: () => `all 100 passivated (${passivatedAt.size} so far)` },
    );
    const last = Math.max(...passivatedAt.values()) - lastActive;
    // Idle by idle_after, found within one check, then one pass of 100 passivations (each a
    // few KV and consumer round trips, 32 at a time): well under the 3 more checks the
    // unrefilled passes took.
    expect(last, `the last instance passivated ${Math.round(last)} ms after the last activity`).toBeLessThan(idleAfterMs + checkMs + 1_500);
    expect(rig.node.status().virtual.passivations).toBe(ids.length);
  }, 60_000);

  it("virtual actors - activations respect [cluster] max_actors: past it ask fails with QUOTA_EXCEEDED, and a message sent meanwhile waits until a passivation frees room", async () => {
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([sessionActor]),
      templates: [{ ...TEMPLATE, idleAfterMs: 1500 }],
      cluster: ["max_actors = 2"],
    });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
    await client.ask("support--q1", "task_delegate", task("a"), { timeoutMs: 15_000 });
    await client.ask("support--q2", "task_delegate", task("b"), { timeoutMs: 15_000 });
    const refused = await client.ask("support--q3", "task_delegate", task("c"), { timeoutMs: 15_000 }).catch((e: unknown) => e);
    expect(isKovaError(refused, "QUOTA_EXCEEDED")).toBe(true);
    expect((refused as Error).message).toContain("[cluster] max_actors is 2");
    // A plain send is stored all the same; the instance is activated once q1 and q2 are passivated.
    await client.send("support--q3", "task_delegate", task("c"));
    const done = await poll(
      async () => {
        const s = await client.request<SessionState>("support--q3", "info_request", {}, { timeoutMs: 500 }).catch(() => undefined);
        return s?.count === 1 ? s : undefined;
      },
      {
        timeoutMs: 20_000,
        what: () =>
          `q3 activated after the others were passivated ${JSON.stringify(rig.events.map((e) => [e.type, (e.data as { id?: string; actorId?: string }).id ?? (e.data as { actorId?: string }).actorId, (e.data as { via?: string }).via]))}`,
      },
    );
    expect(done.history).toEqual(["c"]);
    expect(rig.events.some((e) => e.type === "activation_refused")).toBe(true);
    expect(rig.node.status().virtual.refused).toBeGreaterThan(0);
  });
});
