import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNatsCluster, startNatsServer } from "../../src/testing/index.js";

describe("test harness", () => {
  it("harness - starts a JetStream server on a free port and restarts it on the same store", async () => {
    const server = await startNatsServer({ allowExternal: false });
    try {
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
    } finally {
      await server.stop();
    }
  });

  it("harness - forms a three-server JetStream cluster with a replicated stream", async () => {
    const cluster = await startNatsCluster({ size: 3 });
    try {
      expect(new Set(cluster.urls).size).toBe(3);
      const nc = await connect({ servers: cluster.urls });
      const jsm = await jetstreamManager(nc);
      let info;
      for (let i = 0; i < 100; i++) {
        try {
          info = await jsm.streams.add({ name: "R3", subjects: ["r3.>"], num_replicas: 3 });
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 200)); // meta leader not elected yet
        }
      }
      expect(info?.config.num_replicas).toBe(3);
      await nc.close();
    } finally {
      await cluster.stop();
    }
  });
});
