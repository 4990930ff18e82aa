import { randomUUID } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { sleep } from "../../src/core/clock.js";
import { createLogger } from "../../src/core/logger.js";
import { Membership, type NodeRecord } from "../../src/cluster/membership.js";
import { startNatsServer } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";
import { startTcpProxy } from "../fixtures/tcp-proxy.js";
import { bucketName } from "../../src/bus/index.js";

const logger = createLogger({ level: "silent" });

describe("a heartbeat acked after a gap", () => {
  it("fence - heartbeats that were stuck in a stalled link and land when it heals do not make the node healthy; one started after the link came back does", async () => {
    const server = await startNatsServer({ allowExternal: false });
    await using _server = defer(() => server.stop());
    const target = new URL(server.url);
    await using proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
    // The node's connection goes through the proxy; the observer's does not.
    const nc = await connect({ servers: proxy.url });
    await using _nc = defer(() => nc.close());
    const observer = await connect({ servers: server.url });
    await using _observer = defer(() => observer.close());
    const cluster = `h${randomUUID().slice(0, 8)}`;
    // Healthy while the last counted write started less than 3 s ago (staleness 4 s less one beat).
    const membership = await Membership.join({
      nc,
      cluster,
      heartbeatMs: 1000,
      staleAfterMs: 4000,
      logger,
      self: { id: "a", incarnation: randomUUID(), startedAt: Date.now(), version: "t", pid: process.pid, host: "h" },
    });
    await using _membership = defer(() => membership.stop());
    await poll(() => membership.selfHealthy(), { timeoutMs: 5000, what: "healthy after the first heartbeat" });
    // Every heartbeat as it reaches the server (the bucket keeps only the newest).
    const landed: Array<{ record: NodeRecord; at: number }> = [];
    const sub = observer.subscribe(`$KV.${bucketName(cluster, "nodes")}.a`, {
      callback: (_err, m) => void landed.push({ record: m.json<NodeRecord>(), at: Date.now() }),
    });
    await observer.flush();
    await using _sub = defer(() => sub.unsubscribe());

    // 3.5 s of silence: the heartbeats started in it (at most two are in flight) wait in
    // the stalled link, well within nats.js's 5 s request timeout.
    proxy.cut("stall");
    await sleep(3500);
    expect(membership.selfHealthy()).toBe(false);
    const healedAt = Date.now();
    proxy.heal();

    await poll(() => membership.selfHealthy(), { timeoutMs: 5000, everyMs: 5, what: "healthy again after the link came back" });
    const healthyAfterMs = Date.now() - healedAt;
    // Whatever the server had stored when the node saw its ack has reached the observer
    // after one round trip: the last one is the newest heartbeat at that moment.
    await observer.flush();
    const newest = landed.at(-1)!.record;
    // The writes the stall held did land once it healed (they were acked), so the test did
    // meet the case: their start is recent, but peers saw nothing for 3.5 s and more.
    expect(
      landed.some((l) => l.at >= healedAt && l.record.heartbeatAt < healedAt),
      "a heartbeat held by the stall landed after the heal",
    ).toBe(true);
    // Counted from a held write, the node would have been healthy a few ms after the heal
    // with such a write the newest; it must wait for one started after the link came back.
    expect(newest.heartbeatAt, `the newest heartbeat when the node was healthy again (after ${healthyAfterMs} ms)`).toBeGreaterThanOrEqual(healedAt);
    expect(healthyAfterMs).toBeLessThan(3000);
  }, 30_000);
});
