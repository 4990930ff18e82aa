import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KovaError, isTimeout } from "../../src/core/errors.js";
import { isNoResponders } from "../../src/bus/errors.js";
import { KovaClient, createEnvelope, type KovaEvent } from "../../src/bus/index.js";
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
    bus.serveRpc("sloth", () => new Promise((r) => setTimeout(() => r("late"), 1_500)));
    const started = Date.now();
    const err = await bus.request("sloth", "info_request", null, { timeoutMs: 200 }).catch((e: unknown) => e);
    expect(isTimeout(err)).toBe(true);
    expect((err as Error).message).toContain(bus.subjects.rpc("sloth"));
    // The 200 ms timeout ended it, long before the reply would have come (room for a loaded machine).
    expect(Date.now() - started).toBeLessThan(1_200);
  });

  it("rpc - a handler error comes back as a typed error with its code", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    bus.serveRpc("grumpy", async () => {
      throw new KovaError("NOT_HOSTED", "agent grumpy moved", { retryable: true, data: { node: "n2" } });
    });
    const err = await bus.request("grumpy", "info_request", null).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KovaError);
    expect((err as KovaError).code).toBe("NOT_HOSTED");
    expect((err as KovaError).retryable).toBe(true);
    expect((err as KovaError).data).toEqual({ node: "n2" });
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
});
