import { afterAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Bus, createEnvelope } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import type { AgentRecord } from "../../src/cluster/registry.js";
import { requestMany, schemaProblems } from "../fixtures/deploy/micro-responses.js";
import { DEPLOY, startDeployNatsCluster, type DeployNatsCluster } from "../fixtures/deploy/nats-cluster.js";
import { poll } from "../fixtures/poll.js";

/**
 * The deploy/ files together, as docker-compose wires them: the three NATS cluster
 * configs and the three example kova.toml files, with only what cannot be the same on
 * one machine rewritten (server addresses → loopback ports, data_dir → a temp dir).
 * Child processes run the compiled CLI (`npm run build` first).
 */
const BIN = resolve(import.meta.dirname, "../../bin/kova.js");
let cluster: DeployNatsCluster | undefined;
const nodes: ChildProcess[] = [];
let nc: NatsConnection | undefined;
let bus: Bus | undefined;

afterAll(async () => {
  await bus?.close();
  await nc?.close();
  await Promise.all(
    nodes.map(async (child) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once("exit", () => r()));
      child.kill("SIGKILL");
      await exited;
    }),
  );
  await cluster?.stop();
});

/** kova-node<i>.toml with the compose host names and data_dir replaced; every rewrite must match. */
function localToml(i: number, c: DeployNatsCluster, dataDir: string): string {
  let text = readFileSync(join(DEPLOY, "kova", `kova-node${i}.toml`), "utf8");
  const sub = (from: string, to: string) => {
    if (!text.includes(from)) throw new Error(`kova-node${i}.toml: ${from} not found`);
    text = text.replaceAll(from, to);
  };
  for (const [host, url] of Object.entries(c.urlFor)) sub(`nats://${host}:4222`, url);
  sub(`data_dir = "/var/lib/kova"`, `data_dir = ${JSON.stringify(dataDir)}`);
  return text;
}

describe("deploy Kova nodes", () => {
  it("deploy - three nodes from the example kova.toml files join the deploy NATS cluster and host the declared counters", async () => {
    expect(existsSync(resolve(BIN, "../../dist/cli/main.js")), "run `npm run build` first").toBe(true);
    cluster = await startDeployNatsCluster();
    const c = cluster;
    for (const i of [1, 2, 3]) {
      const dataDir = join(c.dir, `kova-${i}`);
      await mkdir(dataDir, { recursive: true });
      const config = join(c.dir, `kova-node${i}.toml`);
      await writeFile(config, localToml(i, c, dataDir));
      const env: NodeJS.ProcessEnv = { ...process.env, KOVA_LOG_LEVEL: process.env.KOVA_LOG_LEVEL ?? "warn" };
      delete env.NATS_URL;
      const child = spawn(process.execPath, [BIN, "node", "start", "--config", config], { env, stdio: ["ignore", "ignore", "inherit"] });
      nodes.push(child);
    }

    nc = await connect({ servers: c.urls });
    const conn = nc;
    const pings = await poll(
      async () => {
        const r = await requestMany(conn, "$SRV.PING.kova-node", 3, 1_000);
        return r.length === 3 ? r : undefined;
      },
      // Bounds for a loaded machine: three node processes started at once took over 40 s to
      // answer at load 24.
      { timeoutMs: 100_000, everyMs: 250, retryErrors: true, what: "3 nodes answering $SRV.PING.kova-node" },
    );
    expect(pings.map((p) => p.metadata.node_id).sort()).toEqual(["kova-1", "kova-2", "kova-3"]);
    expect(new Set(pings.map((p) => p.metadata.cluster))).toEqual(new Set(["default"]));
    // every node, at every level, with the shapes `nats micro` validates
    const ids = pings.map((p) => p.id as string).sort();
    for (const verb of ["PING", "INFO", "STATS"] as const) {
      const kind = verb.toLowerCase() as "ping" | "info" | "stats";
      const all = (await requestMany(conn, `$SRV.${verb}`, 3)).filter((r) => r.name === "kova-node");
      const byName = await requestMany(conn, `$SRV.${verb}.kova-node`, 3);
      expect(all.map((r) => r.id).sort()).toEqual(ids);
      expect(byName.map((r) => r.id).sort()).toEqual(ids);
      for (const id of ids) {
        const one = await requestMany(conn, `$SRV.${verb}.kova-node.${id}`, 1);
        expect(one.map((r) => r.id)).toEqual([id]);
        expect(schemaProblems(kind, one[0])).toEqual([]);
      }
      for (const r of [...all, ...byName]) expect(schemaProblems(kind, r)).toEqual([]);
      if (verb === "INFO") {
        for (const r of byName)
          expect(r.endpoints.map((e: { name: string }) => e.name).sort()).toEqual([
            "activate",
            "agents",
            "approve",
            "eval",
            "schedules",
            "signal",
            "spawn",
            "status",
            "tools",
          ]);
      }
    }

    const kv = await new Kvm(conn).open("kova_default_agents");
    const hosted = await poll(
      async () => {
        const records: AgentRecord[] = [];
        for (const id of ["counter-1", "counter-2", "counter-3"]) {
          const e = await kv.get(id);
          if (!e || e.length === 0) return undefined;
          const rec = e.json<AgentRecord>();
          if (!rec.node || rec.state !== "Idle") return undefined;
          records.push(rec);
        }
        return records;
      },
      { timeoutMs: 40_000, everyMs: 250, retryErrors: true, what: "counter-1..3 hosted" },
    );
    for (const rec of hosted) expect(["kova-1", "kova-2", "kova-3"]).toContain(rec.node);

    bus = await Bus.connect({ servers: c.urls, cluster: "default", logger: createLogger() });
    const b = bus;
    const env = createEnvelope({ from: "deploy-test", to: "counter-2", type: "task_delegate", payload: { n: 1 } });
    await b.send(env);
    const state = await poll(
      async () => {
        const s = await b.request<{ count: number; ids: string[] }>("counter-2", "info_request", {}, { timeoutMs: 2_000 });
        return s.count === 1 ? s : undefined;
      },
      { timeoutMs: 20_000, everyMs: 250, retryErrors: true, what: "counter-2 to count the message" },
    );
    expect(state.ids).toEqual([env.id]);
  }, 180_000);
});
