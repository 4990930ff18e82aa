import { afterAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { DEPLOY, NATS_HOSTS, startDeployNatsCluster, type DeployNatsCluster } from "../fixtures/deploy/nats-cluster.js";
import { poll } from "../fixtures/poll.js";
import { SERVER_PING } from "../../src/node/nats/launcher.js";

let cluster: DeployNatsCluster | undefined;

afterAll(async () => {
  await cluster?.stop();
});

/** Leaders are elected (meta, then stream) a moment after the servers start or one dies. */
const ELECTION = { timeoutMs: 20_000, everyMs: 200, retryErrors: true } as const;

describe("deploy NATS cluster", () => {
  it("deploy - the 3 cluster configs form a JetStream cluster on loopback and a replicated stream survives losing one server", async () => {
    for (const [i, host] of NATS_HOSTS.entries()) {
      const original = readFileSync(join(DEPLOY, "nats", `cluster-n${i + 1}.conf`), "utf8");
      expect(original).toMatch(/^\s*sync_interval: always$/m);
      expect(original).toMatch(new RegExp(`^server_name: ${host}$`, "m"));
    }
    cluster = await startDeployNatsCluster();
    const { servers } = cluster;
    for (const s of servers) {
      // The shipped ping settings as the server applied them (test/unit/nats-ping.test.ts).
      const varz = (await (await fetch(`${s.monitor}/varz`)).json()) as { ping_interval: number; ping_max: number };
      expect({ intervalS: varz.ping_interval / 1e9, max: varz.ping_max }, s.host).toEqual(SERVER_PING);
    }

    // all three see each other as routes
    for (const s of servers) {
      const routes = await poll(
        async () => {
          const routez = (await (await fetch(`${s.monitor}/routez`)).json()) as { num_routes: number };
          if (routez.num_routes < 2) throw new Error(`${s.host}: ${routez.num_routes} routes`);
          return routez.num_routes;
        },
        { ...ELECTION, timeoutMs: 10_000, what: `${s.host} to route to both peers` },
      );
      expect(routes).toBeGreaterThanOrEqual(2);
    }

    await using nc = await connect({ servers: cluster.urls, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
    const jsm = await jetstreamManager(nc);
    await poll(() => jsm.streams.add({ name: "DEPLOY_R3", subjects: ["deploy.>"], num_replicas: 3 }), { ...ELECTION, what: "the R3 stream" });
    const js = jetstream(nc);
    for (let i = 0; i < 10; i++) await js.publish(`deploy.m${i}`, `m${i}`);
    let info = await jsm.streams.info("DEPLOY_R3");
    expect(info.config.num_replicas).toBe(3);
    expect(info.cluster?.replicas?.length).toBe(2);

    // lose the server the stream's leader is on: the other two keep a quorum
    const leaderIndex = NATS_HOSTS.indexOf(info.cluster!.leader! as (typeof NATS_HOSTS)[number]);
    expect(leaderIndex).toBeGreaterThanOrEqual(0);
    servers[leaderIndex]!.child.kill("SIGKILL");
    await poll(() => js.publish("deploy.after", "after", { timeout: 1_000 }), { ...ELECTION, what: "a publish after the leader died" });
    info = await jsm.streams.info("DEPLOY_R3");
    expect(info.state.messages).toBe(11);
    expect(info.cluster?.leader).not.toBe(NATS_HOSTS[leaderIndex]);
  }, 60_000);
});
