import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
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

describe("bus across a nats-server restart", () => {
  it("restart - a message acked before nats-server is killed is delivered after it restarts, and the client reconnects by itself", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const got: A2AEnvelope[] = [];
    const stored = createEnvelope({ from: "a", to: "survivor", type: "task_delegate", payload: "survives" });
    const ack = await bus.send(stored);
    expect(ack.seq).toBeGreaterThan(0);

    const statuses: string[] = [];
    void (async () => {
      for await (const s of bus.nc.status()) statuses.push(s.type);
    })();
    await server.kill();
    await server.restart();
    await poll(() => statuses.includes("reconnect"), { timeoutMs: 15_000, what: "reconnect" });

    await bus.openMailbox("survivor", async (env) => void got.push(env), { ackWaitMs: 2_000 });
    await poll(() => got.length === 1, { timeoutMs: 15_000, what: "delivery after restart" });
    expect(got[0]).toEqual(stored);

    // The same connection keeps working for new sends: no new Bus was made.
    const after = createEnvelope({ from: "a", to: "survivor", type: "task_delegate", payload: "after" });
    await bus.send(after);
    await poll(() => got.length === 2, { timeoutMs: 10_000, what: "delivery of a new message" });
    expect(got[1]!.id).toBe(after.id);
    expect(bus.nc.isClosed()).toBe(false);
  });

  it("restart - a mailbox that stays open through the restart resumes by itself", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const got: unknown[] = [];
    await bus.openMailbox("steady", async (env) => void got.push(env.payload), { ackWaitMs: 2_000 });
    await bus.send(createEnvelope({ from: "a", to: "steady", type: "task_delegate", payload: 1 }));
    await poll(() => got.length === 1, { timeoutMs: 5_000, what: "first" });
    await server.kill();
    await server.restart();
    // send retries until JetStream is back (safe: the id deduplicates).
    await bus.send(createEnvelope({ from: "a", to: "steady", type: "task_delegate", payload: 2 }), { timeoutMs: 20_000 });
    await poll(() => got.length === 2, { timeoutMs: 20_000, what: "delivery to the open mailbox" });
    expect(got).toEqual([1, 2]);
  });

  it("restart - a durable event published while nats-server is down is stored once when it is back", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    await server.kill();
    // Started while the server is down: the first attempts time out or find no
    // JetStream, as during a leader election; the publish must wait, not fail.
    const published = bus.publishEvent({ type: "probe_start", sessionId: "s1", runId: "r1", ts: Date.now(), data: { n: 1 } }, { timeoutMs: 25_000 });
    await new Promise((r) => setTimeout(r, 1500));
    await server.restart();
    await published;
    const info = await bus.jsm.streams.info(bus.subjects.streams.events);
    expect(info.state.messages).toBe(1);
  });
});
