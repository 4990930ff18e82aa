import { afterAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { connect, createInbox, type NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Bus, createEnvelope } from "../../src/bus/index.js";
import { sleep } from "../../src/core/clock.js";
import { createLogger } from "../../src/core/logger.js";
import type { AgentRecord } from "../../src/node/registry.js";
import { DEPLOY, startDeployNatsCluster, type DeployNatsCluster } from "../fixtures/deploy/nats-cluster.js";

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

/** `$SRV.PING.kova-node` the way `nats micro ping` sends it: every reply that arrives in `waitMs`. */
async function pingNodes(conn: NatsConnection, waitMs: number): Promise<Array<{ id: string; metadata: Record<string, string> }>> {
  const inbox = createInbox();
  const sub = conn.subscribe(inbox);
  const replies: Array<{ id: string; metadata: Record<string, string> }> = [];
  setTimeout(() => sub.unsubscribe(), waitMs);
  conn.publish("$SRV.PING.kova-node", new Uint8Array(0), { reply: inbox });
  for await (const m of sub) if (m.data.length > 0) replies.push(m.json());
  return replies;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await sleep(250);
  }
  throw new Error(`${what} not reached in ${timeoutMs} ms${last ? `: ${String(last)}` : ""}`);
}

describe("deploy Kova nodes", () => {
  it("deploy - three nodes from the example kova.toml files join the deploy NATS cluster and host the declared counters", async () => {
    expect(existsSync(resolve(BIN, "../../dist/node/cli/main.js")), "run `npm run build` first").toBe(true);
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
    const pings = await until("3 nodes answering $SRV.PING.kova-node", 40_000, async () => {
      const r = await pingNodes(conn, 500);
      return r.length === 3 ? r : undefined;
    });
    expect(pings.map((p) => p.metadata.node_id).sort()).toEqual(["kova-1", "kova-2", "kova-3"]);
    expect(new Set(pings.map((p) => p.metadata.cluster))).toEqual(new Set(["default"]));

    const kv = await new Kvm(conn).open("kova_default_agents");
    const hosted = await until("counter-1..3 hosted", 40_000, async () => {
      const records: AgentRecord[] = [];
      for (const id of ["counter-1", "counter-2", "counter-3"]) {
        const e = await kv.get(id);
        if (!e || e.length === 0) return undefined;
        const rec = e.json<AgentRecord>();
        if (!rec.node || rec.state !== "Idle") return undefined;
        records.push(rec);
      }
      return records;
    });
    for (const rec of hosted) expect(["kova-1", "kova-2", "kova-3"]).toContain(rec.node);

    bus = await Bus.connect({ servers: c.urls, cluster: "default", logger: createLogger() });
    const b = bus;
    const env = createEnvelope({ from: "deploy-test", to: "counter-2", type: "task_delegate", payload: { n: 1 } });
    await b.send(env);
    const state = await until("counter-2 to count the message", 20_000, async () => {
      const s = await b.request<{ count: number; ids: string[] }>("counter-2", "info_request", {}, { timeoutMs: 2_000 });
      return s.count === 1 ? s : undefined;
    });
    expect(state.ids).toEqual([env.id]);
  }, 90_000);
});
