import { afterAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { findNatsServerBinary, freePort } from "../../src/testing/index.js";
import { sleep } from "../../src/core/clock.js";
import { prepareNatsConfig } from "../fixtures/deploy/nats-config.js";

const DEPLOY = resolve(import.meta.dirname, "../../deploy");
const HOSTS = ["nats-1", "nats-2", "nats-3"];

interface Running {
  child: ChildProcess;
  url: string;
  monitor: string;
  stderr: () => string;
}

const children: ChildProcess[] = [];
let workDir = "";

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  if (workDir) await rm(workDir, { recursive: true, force: true });
});

async function waitHealthy(s: Running, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    if (s.child.exitCode !== null) throw new Error(`nats-server exited: ${s.stderr()}`);
    try {
      const res = await fetch(`${s.monitor}/healthz`);
      if (res.ok) return;
      last = await res.text();
    } catch (err) {
      last = String(err);
    }
    await sleep(100);
  }
  throw new Error(`not healthy in ${timeoutMs} ms: ${last} ${s.stderr()}`);
}

describe("deploy NATS cluster", () => {
  it("deploy - the 3 cluster configs form a JetStream cluster on loopback and a replicated stream survives losing one server", async () => {
    const bin = findNatsServerBinary();
    expect(bin, "nats-server binary").toBeDefined();
    workDir = await mkdtemp(join(tmpdir(), "kova-deploy-nats-"));
    const ports = await Promise.all(HOSTS.map(async () => ({ client: await freePort(), monitor: await freePort(), cluster: await freePort() })));
    const routes = Object.fromEntries(HOSTS.map((h, i) => [h, ports[i]!.cluster]));

    const servers: Running[] = [];
    for (const [i, host] of HOSTS.entries()) {
      const original = readFileSync(join(DEPLOY, "nats", `cluster-n${i + 1}.conf`), "utf8");
      expect(original).toMatch(/^\s*sync_interval: always$/m);
      expect(original).toMatch(new RegExp(`^server_name: ${host}$`, "m"));
      const conf = await prepareNatsConfig(bin!, original, { storeDir: join(workDir, host), ports: ports[i]!, routes });
      const path = join(workDir, `${host}.conf`);
      await writeFile(path, conf.text);
      let tail = "";
      const child = spawn(bin!, ["-c", path], { stdio: ["ignore", "ignore", "pipe"] });
      child.stderr!.setEncoding("utf8").on("data", (d: string) => (tail = (tail + d).slice(-3000)));
      children.push(child);
      servers.push({ child, url: `nats://127.0.0.1:${ports[i]!.client}`, monitor: `http://127.0.0.1:${ports[i]!.monitor}`, stderr: () => tail });
    }
    await Promise.all(servers.map((s) => waitHealthy(s, 20_000)));

    // all three see each other as routes
    for (const s of servers) {
      const deadline = Date.now() + 10_000;
      let routez: { num_routes: number } = { num_routes: 0 };
      while (Date.now() < deadline && routez.num_routes < 2) {
        routez = (await (await fetch(`${s.monitor}/routez`)).json()) as typeof routez;
        if (routez.num_routes < 2) await sleep(100);
      }
      expect(routez.num_routes).toBeGreaterThanOrEqual(2);
    }

    const nc = await connect({ servers: servers.map((s) => s.url), maxReconnectAttempts: -1, reconnectTimeWait: 200 });
    try {
      const jsm = await jetstreamManager(nc);
      let created = false;
      for (let i = 0; i < 100 && !created; i++) {
        try {
          await jsm.streams.add({ name: "DEPLOY_R3", subjects: ["deploy.>"], num_replicas: 3 });
          created = true;
        } catch {
          await sleep(200); // meta leader not elected yet
        }
      }
      expect(created).toBe(true);
      const js = jetstream(nc);
      for (let i = 0; i < 10; i++) await js.publish(`deploy.m${i}`, `m${i}`);
      let info = await jsm.streams.info("DEPLOY_R3");
      expect(info.config.num_replicas).toBe(3);
      expect(info.cluster?.replicas?.length).toBe(2);

      // lose the server the stream's leader is on: the other two keep a quorum
      const leaderIndex = HOSTS.indexOf(info.cluster!.leader!);
      expect(leaderIndex).toBeGreaterThanOrEqual(0);
      servers[leaderIndex]!.child.kill("SIGKILL");
      let published = false;
      for (let i = 0; i < 100 && !published; i++) {
        try {
          await js.publish("deploy.after", "after", { timeout: 1_000 });
          published = true;
        } catch {
          await sleep(200); // new stream leader being elected
        }
      }
      expect(published).toBe(true);
      info = await jsm.streams.info("DEPLOY_R3");
      expect(info.state.messages).toBe(11);
      expect(info.cluster?.leader).not.toBe(HOSTS[leaderIndex]);
    } finally {
      await nc.close();
    }
  }, 60_000);
});
