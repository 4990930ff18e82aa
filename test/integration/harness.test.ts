import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { freePort, HarnessError, NatsPortInUseError, startNatsCluster, startNatsServer } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";
import { holdPort } from "../fixtures/ports.js";
import { SERVER_PING } from "../../src/node/nats/launcher.js";

describe("test harness", () => {
  it("harness - starts a JetStream server on a free port and restarts it on the same store", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    expect(server.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    expect(server.url).not.toBe("nats://127.0.0.1:4222");
    // The server's own view of the ping settings the launcher writes (test/unit/nats-ping.test.ts).
    const varz = (await (await fetch(`${server.monitorUrl}/varz`)).json()) as { ping_interval: number; ping_max: number };
    expect({ intervalS: varz.ping_interval / 1e9, max: varz.ping_max }).toEqual(SERVER_PING);
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

  it("harness - a cluster whose route port was taken after it was picked starts again on fresh ports", async () => {
    await using held = await holdPort();
    const picked: number[] = [];
    // The first pick is a port another listener has, as when a process takes it between pick and start.
    const pickPort = async () => {
      picked.push(picked.length === 0 ? held.port : await freePort());
      return picked.at(-1)!;
    };
    await using cluster = await startNatsCluster({ size: 3, pickPort });
    // One more attempt per taken port: at least the second succeeded (a port picked for it
    // may itself be taken by another process on a busy machine, hence "at least").
    expect(picked.length % 3).toBe(0);
    expect(picked.length).toBeGreaterThanOrEqual(6);
    expect(picked.slice(3)).not.toContain(held.port);
    expect(held.server.listening).toBe(true);
    for (const s of cluster.servers) {
      const routes = await poll(
        async () => {
          const routez = (await (await fetch(`${s.monitorUrl}/routez`)).json()) as { num_routes: number };
          return routez.num_routes >= 2 ? routez.num_routes : undefined;
        },
        { timeoutMs: 10_000, everyMs: 100, what: `${s.serverName} to route to both peers` },
      );
      expect(routes).toBe(2);
    }
  });

  it("harness - a cluster whose route ports stay taken fails after its attempts, naming the cause", async () => {
    await using held = await holdPort();
    const err = await startNatsCluster({ size: 2, pickPort: async () => held.port, attempts: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HarnessError);
    expect((err as Error).message).toContain("could not start a 2-server NATS cluster: another process took one of its ports");
    expect((err as Error).message).toContain("on each of 2 attempts");
    const cause = (err as Error).cause;
    expect(cause).toBeInstanceOf(NatsPortInUseError);
    expect((cause as NatsPortInUseError).port).toBe(held.port);
    expect((cause as Error).message).toContain(`could not listen on port ${held.port}, another process has it`);
  });
});
