import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KovaError, isKovaError, isTimeout } from "../../src/core/errors.js";
import { isNoResponders } from "../../src/bus/errors.js";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { Header, KovaClient, RpcDeclined, createEnvelope, firstDelivery, type KovaEvent } from "../../src/bus/index.js";
import { decodeValue, encodeValue } from "../../src/bus/codec.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

let server: NatsServerHandle;
beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  await server?.stop();
});

describe("bus rpc, ask and events", () => {
  it("rpc - answers info_request on the fast path, in msgpack and in JSON", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    bus.serveRpc("oracle", async (env) => ({ echo: env.payload, type: env.type, from: env.from }));
    const r = await bus.request<{ echo: unknown; type: string; from: string }>("oracle", "info_request", { q: 1 }, { from: "asker" });
    expect(r).toEqual({ echo: { q: 1 }, type: "info_request", from: "asker" });
    const j = await bus.request<{ echo: unknown }>("oracle", "capability_query", ["x"], { encoding: "json" });
    expect(j.echo).toEqual(["x"]);
  });

  it("rpc - no responders is a NO_RESPONDERS error naming the subject", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const err = await bus.request("nobody", "info_request", null).catch((e: unknown) => e);
    expect(isNoResponders(err)).toBe(true);
    expect((err as Error).message).toContain(bus.subjects.rpc("nobody"));
  });

  it("rpc - a slow responder is a TIMEOUT error naming the subject", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    // The handler answers only once the caller has given up, so only the caller's timeout can
    // end the request. The caller asks in short tries: every try's handler is released.
    let released = false;
    const waiting: Array<(v: string) => void> = [];
    bus.serveRpc("sloth", () => new Promise<string>((r) => (released ? r("late") : waiting.push(r))));
    const err = await bus.request("sloth", "info_request", null, { timeoutMs: 200 }).catch((e: unknown) => e);
    released = true;
    for (const answer of waiting) answer("late");
    expect(isTimeout(err)).toBe(true);
    expect((err as Error).message).toContain(bus.subjects.rpc("sloth"));
  });

  it("rpc - a handler error comes back as a typed error with its code", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    bus.serveRpc("grumpy", async () => {
      throw new KovaError("BAD_MOOD", "agent grumpy will not say", { data: { node: "n2" } });
    });
    const err = await bus.request("grumpy", "info_request", null).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KovaError);
    expect((err as KovaError).code).toBe("BAD_MOOD");
    expect((err as KovaError).retryable).toBe(false);
    expect((err as KovaError).data).toEqual({ node: "n2" });
  });

  it("rpc - every subscriber gets each request (no queue group): a host that never answers beside the real one costs nothing; the reply names the node that answered", async () => {
    const cluster = uniqueCluster();
    await using host = await connectBus(server.url, cluster);
    await using caller = await connectBus(server.url, cluster);
    host.serveRpc("moved", async () => "from the new host", { node: "n2" });
    // The node the agent left, frozen: subscribed, never answering. With a queue group the
    // server gave it about half of the requests, and each of those waited for a timeout.
    await using frozen = await connectBus(server.url, cluster);
    let swallowed = 0;
    let thaw!: () => void;
    const thawed = new Promise<string>((r) => (thaw = () => r("stale, after the thaw")));
    frozen.serveRpc("moved", () => {
      swallowed++;
      return thawed;
    });
    await frozen.nc.flush();
    const answers = await Promise.all(Array.from({ length: 40 }, () => caller.request<string>("moved", "info_request", null, { timeoutMs: 5_000 })));
    expect(answers).toEqual(Array.from({ length: 40 }, () => "from the new host"));
    // Each was sent once: none waited for a try to time out and went out again.
    expect(swallowed).toBe(40);
    // A plain NATS caller sees who answered.
    const raw = await caller.nc.request(
      caller.subjects.rpc("moved"),
      encodeValue(createEnvelope({ from: "x", to: "moved", type: "info_request", payload: null }), "msgpack"),
    );
    expect(decodeValue(raw.data, "msgpack")).toEqual({ ok: true, result: "from the new host", node: "n2" });
    thaw();
  });

  it("rpc - a handler that declines sends nothing; tries go out within the deadline until one is answered, and a silent subscriber alone ends in a TIMEOUT", async () => {
    const cluster = uniqueCluster();
    await using silent = await connectBus(server.url, cluster);
    await using caller = await connectBus(server.url, cluster);
    let asked = 0;
    silent.serveRpc("mute", async () => {
      asked++;
      throw new RpcDeclined("cannot prove the lease");
    });
    const started = performance.now();
    const err = await caller.request("mute", "info_request", null, { timeoutMs: 1_200 }).catch((e: unknown) => e);
    expect(isTimeout(err), String(err)).toBe(true);
    expect((err as Error).message).toContain(caller.subjects.rpc("mute"));
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_100);
    // 300 ms tries, the gap doubling: 0, ~0.3, ~0.9 s (jittered).
    expect(asked).toBeGreaterThanOrEqual(2);

    // The host appears while the caller is already waiting: a later try reaches it.
    const pending = caller.request<string>("mute2", "info_request", null, { timeoutMs: 4_000 });
    await using late = await connectBus(server.url, cluster);
    let lateAsked = 0;
    silent.serveRpc("mute2", async () => {
      throw new RpcDeclined("not mine");
    });
    await new Promise((r) => setTimeout(r, 100));
    late.serveRpc("mute2", async () => {
      lateAsked++;
      return "here now";
    });
    expect(await pending).toBe("here now");
    expect(lateAsked).toBe(1);
  });

  it("rpc - a retryable refusal (NOT_HOSTED) is asked again at once; refused until the deadline, the caller gets the refusal", async () => {
    const cluster = uniqueCluster();
    await using host = await connectBus(server.url, cluster);
    await using caller = await connectBus(server.url, cluster);
    let asked = 0;
    host.serveRpc("flaky", async () => {
      if (++asked < 3) throw new KovaError("NOT_HOSTED", "agent flaky is starting here", { retryable: true });
      return "ok now";
    });
    expect(await caller.request<string>("flaky", "info_request", null, { timeoutMs: 5_000 })).toBe("ok now");
    expect(asked).toBe(3);

    host.serveRpc("never", async () => {
      throw new KovaError("NOT_HOSTED", "agent never is not hosted here", { retryable: true, data: { node: "n1" } });
    });
    const err = await caller.request("never", "info_request", null, { timeoutMs: 600 }).catch((e: unknown) => e);
    expect(isKovaError(err, "NOT_HOSTED"), String(err)).toBe(true);
    expect(err).toMatchObject({ retryable: true, data: { node: "n1" } });
  });

  it("rpc - no responders is retried for half a second: an agent that is being placed answers", async () => {
    const cluster = uniqueCluster();
    await using host = await connectBus(server.url, cluster);
    await using caller = await connectBus(server.url, cluster);
    const pending = caller.request<string>("arriving", "info_request", null, { timeoutMs: 5_000 });
    await new Promise((r) => setTimeout(r, 150));
    host.serveRpc("arriving", async () => "placed");
    expect(await pending).toBe("placed");
  });

  it("ask - durable send and the result_notify comes back on the reply inbox; KovaClient does the same", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    await using client = await KovaClient.connect({ servers: server.url, cluster, id: "frontend" });
    await bus.openMailbox("summarizer", async (env) => {
      if (env.payload === "fail") await bus.respond(env, null, { error: new KovaError("ACTOR_FAILED", "model refused") });
      else await bus.respond(env, { summary: `short ${String(env.payload)}` });
    });
    const req = createEnvelope({ from: "coordinator", to: "summarizer", type: "task_delegate", payload: "text" });
    const reply = await bus.ask<{ summary: string }>(req, { timeoutMs: 5_000 });
    expect(reply.type).toBe("result_notify");
    expect(reply.correlationId).toBe(req.id);
    expect(reply.from).toBe("summarizer");
    expect(reply.payload).toEqual({ summary: "short text" });

    const viaClient = await client.ask<{ summary: string }>("summarizer", "task_delegate", "doc", { timeoutMs: 5_000 });
    expect(viaClient.payload.summary).toBe("short doc");
    expect(viaClient.to).toBe("frontend");
    const failed = await client.ask("summarizer", "task_delegate", "fail", { timeoutMs: 5_000 }).catch((e: unknown) => e);
    expect((failed as KovaError).code).toBe("ACTOR_FAILED");

    const timedOut = await client.ask("absent", "task_delegate", 1, { timeoutMs: 200 }).catch((e: unknown) => e);
    expect(isTimeout(timedOut)).toBe(true);
    expect((timedOut as Error).message).toContain(bus.subjects.a2a("absent"));
  });

  it("events - published JSON events reach a session subscriber and are stored in the EVENTS stream", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    await using client = await KovaClient.connect({ servers: server.url, cluster });
    const stream = client.events({ sessionId: "s1" });
    const got: KovaEvent[] = [];
    const reading = (async () => {
      for await (const e of stream) got.push(e);
    })();
    await client.bus.nc.flush();
    const e1: KovaEvent = { type: "run_started", sessionId: "s1", runId: "r1", ts: Date.now() };
    const other: KovaEvent = { type: "run_started", sessionId: "s2", runId: "r9", ts: Date.now() };
    const e2: KovaEvent = { type: "run_stream_end", sessionId: "s1", runId: "r1", parentRunId: "r0", ts: Date.now(), data: { ok: true } };
    await bus.publishEvent(e1);
    await bus.publishEvent(other);
    await bus.publishEvent(e2);
    await poll(() => got.length === 2, { timeoutMs: 5_000, what: "events" });
    stream.stop();
    await reading;
    expect(got).toEqual([e1, e2]);
    const info = await bus.jsm.streams.info(bus.subjects.streams.events);
    expect(info.state.messages).toBe(3);
    const stored = await bus.jsm.streams.getMessage(bus.subjects.streams.events, { seq: 1 });
    expect(stored!.subject).toBe(`kova.${cluster}.events.s1.r1`);
    expect(stored!.json()).toEqual(e1);
    await expect(bus.publishEvent({ ...e1, sessionId: "bad.id" })).rejects.toThrow(/sessionId/);
  });

  it("events - an event published again under the same Nats-Msg-Id (a retry after a slow ack) reaches a live follower once", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    const stream = bus.subscribeEvents({ sessionId: "s1" });
    const got: KovaEvent[] = [];
    const reading = (async () => {
      for await (const e of stream) got.push(e);
    })();
    await bus.nc.flush();
    const subject = bus.subjects.events("s1", "r1");
    const send = (e: KovaEvent, msgId?: string) => {
      const h = natsHeaders();
      if (msgId) h.set(Header.MsgId, msgId);
      bus.nc.publish(subject, JSON.stringify(e), { headers: h });
    };
    const delta = (text: string): KovaEvent => ({ type: "model_delta", sessionId: "s1", runId: "r1", ts: 1, data: { text } });
    send(delta("a"), "m1");
    send(delta("a"), "m1"); // the retry: the stream keeps one, and so does the follower
    send(delta("b"), "m2");
    send(delta("c")); // a plain publish has no id and always passes
    send(delta("c"));
    send({ type: "run_stream_end", sessionId: "s1", runId: "r1", ts: 2 }, "m3");
    await poll(() => got.some((e) => e.type === "run_stream_end"), { timeoutMs: 5_000, what: "the end event" });
    stream.stop();
    await reading;
    expect(got.map((e) => (e.data as { text?: string } | undefined)?.text ?? e.type)).toEqual(["a", "b", "c", "c", "run_stream_end"]);
  });

  it("events - firstDelivery remembers the last ids up to its bound", () => {
    const isFirst = firstDelivery(2);
    const h = (id: string) => {
      const x = natsHeaders();
      x.set(Header.MsgId, id);
      return x;
    };
    expect([isFirst(h("a")), isFirst(h("a")), isFirst(h("b")), isFirst(h("c")), isFirst(h("a")), isFirst(h("c"))]).toEqual([
      true,
      false,
      true,
      true,
      true,
      false,
    ]);
  });
});
