import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNatsCluster, startNatsServer } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

describe("test harness", () => {
  it("harness - starts a JetStream server on a free port and restarts it on the same store", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    expect(server.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    expect(server.url).not.toBe("nats://127.0.0.1:4222");
    let nc = await connect({ servers: server.url });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "H", subjects: ["h.>"] });
    await nc.close();
    await server.kill();
    await server.restart();
    nc = await connect({ servers: server.url });
    const names = await (await jetstreamManager(nc)).streams.names().next();
    expect(names).toContain("H");
    await nc.close();
  });

  it("harness - forms a three-server JetStream cluster with a replicated stream", async () => {
    await using cluster = await startNatsCluster({ size: 3 });
    expect(new Set(cluster.urls).size).toBe(3);
    const nc = await connect({ servers: cluster.urls });
    const jsm = await jetstreamManager(nc);
    // the meta leader is not elected yet right after the servers start
    const info = await poll(() => jsm.streams.add({ name: "R3", subjects: ["r3.>"], num_replicas: 3 }), {
      timeoutMs: 20_000,
      everyMs: 200,
      retryErrors: true,
      what: "the replicated stream",
    });
    expect(info.config.num_replicas).toBe(3);
    await nc.close();
  });
});
