import { describe, expect, it } from "vitest";
import { Bus } from "../../src/bus/index.js";
import { startNatsCluster } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

// A replicated stream that loses its quorum has no leader until servers come back, and a
// publish to it meets "no responders" all that time, as a publish to a missing stream does.
// A durable publish (an event a turn waits for, a durable send) must wait for the leader,
// not fail its run once the missing-stream grace (5 s) has passed.
describe("acked publish during a stream leader election", () => {
  it("publish - an event published while two of three NATS servers are down for 8 s is stored once they are back, not failed as a missing stream", async () => {
    await using cluster = await startNatsCluster({ size: 3 });
    // Connected to the server that stays up, so the publish reaches NATS all along.
    await using bus = await Bus.connect({ servers: [cluster.urls[0]!], cluster: `c${Date.now().toString(36)}` });
    await poll(() => bus.ensureStreams({ replicas: 3 }).then(() => true), { timeoutMs: 30_000, everyMs: 500, retryErrors: true, what: "the R3 streams" });
    const event = (n: number) => ({ type: "run_started", sessionId: "s1", runId: `r${n}`, ts: Date.now(), data: { n } });
    await bus.publishEvent(event(1), { msgId: "e1" });
    await cluster.servers[1]!.kill();
    await cluster.servers[2]!.kill();
    const t0 = Date.now();
    const outcome = bus.publishEvent(event(2), { msgId: "e2", timeoutMs: 60_000 }).then(
      () => ({ ok: true as const, at: Date.now() }),
      (err: unknown) => ({ ok: false as const, err }),
    );
    await new Promise((r) => setTimeout(r, 8_000));
    await Promise.all([cluster.servers[1]!.restart({ jetStreamOnly: true }), cluster.servers[2]!.restart({ jetStreamOnly: true })]);
    const result = await outcome;
    expect(result).toMatchObject({ ok: true });
    // It waited through the outage: past the grace after which a missing stream fails.
    expect((result as { at: number }).at - t0).toBeGreaterThan(5_000);
    const stream = bus.subjects.streams.events;
    const stored = await poll(
      async () => {
        const info = await bus.jsm.streams.info(stream);
        return info.state.messages >= 2 ? info.state.messages : undefined;
      },
      { timeoutMs: 30_000, everyMs: 250, retryErrors: true, what: "both events in the EVENTS stream" },
    );
    expect(stored).toBe(2);
  }, 120_000);

  it("publish - a subject no stream captures still fails with NO_RESPONDERS after the grace, when JetStream says so", async () => {
    await using cluster = await startNatsCluster({ size: 3 });
    await using bus = await Bus.connect({ servers: cluster.urls, cluster: `c${Date.now().toString(36)}` });
    // No ensureStreams: JetStream runs, but nothing captures the events subject.
    await poll(() => bus.jsm.streams.list().next(), { timeoutMs: 30_000, everyMs: 500, retryErrors: true, what: "the JetStream API" });
    const err = await bus
      .publishEvent({ type: "run_started", sessionId: "s1", runId: "r1", ts: Date.now(), data: {} }, { msgId: "x1", timeoutMs: 30_000 })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "NO_RESPONDERS" });
  }, 60_000);
});
