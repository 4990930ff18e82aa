import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { randomUUID } from "node:crypto";
import { startNatsCluster, startNatsServer, type NatsClusterHandle } from "../../src/testing/index.js";
import { createLogger } from "../../src/core/logger.js";
import { LEASE_RECORD_VERSION, LeaseTable } from "../../src/cluster/lease.js";
import { KvMirror } from "../../src/cluster/kv-mirror.js";
import { AgentRegistry } from "../../src/cluster/registry.js";
import { poll } from "../fixtures/poll.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { defer } from "../fixtures/disposable.js";
import { bucketName } from "../../src/bus/index.js";

const logger = createLogger();
const timing = { checkMs: 200, stallMs: 1000, idleCheckMs: 500 };
const conns: NatsConnection[] = [];

async function nc(servers: string | string[]): Promise<NatsConnection> {
  const c = await connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  conns.push(c);
  return c;
}

/** A lease written by "someone else", straight into the bucket (no mirror of its own). */
async function writeLease(kv: KV, actorId: string, node: string | null): Promise<number> {
  const value = JSON.stringify({ v: LEASE_RECORD_VERSION, node, incarnation: node ? `i-${node}` : null, at: Date.now() });
  // A write can time out while the bucket's stream elects a leader: retried, like a node would.
  return poll(() => kv.put(actorId, value), { timeoutMs: 20_000, what: `lease write of ${actorId}`, everyMs: 250, retryErrors: true });
}

/**
 * 400 ms of writes, 20 in flight on one connection: values, and purges of 15 % of random
 * keys (what makes a KV watch skip entries on nats-server < 2.10.11). Returns the count.
 */
async function purgingBurst(writer: KV, keys: string[]): Promise<number> {
  let written = 0;
  const until = performance.now() + 400;
  while (performance.now() < until) {
    await Promise.all(
      Array.from({ length: 20 }, () => {
        const key = keys[Math.floor(Math.random() * keys.length)]!;
        written++;
        return Math.random() < 0.15 ? writer.purge(key) : writer.put(key, JSON.stringify(written));
      }),
    );
  }
  return written;
}

afterAll(async () => {
  for (const c of conns) await c.close().catch(() => undefined);
});

describe("kv mirror watch", () => {
  let cluster: NatsClusterHandle;
  beforeAll(async () => {
    cluster = await startNatsCluster({ size: 3 });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it("kv mirror - a watch whose consumer dies with its NATS server is restarted, and later lease changes are seen", async () => {
    const c = `m${randomUUID().slice(0, 8)}`;
    const open = (conn: NatsConnection) =>
      poll(() => LeaseTable.open({ nc: conn, cluster: c, nodeId: "a", incarnation: "ia", replicas: 3, logger, timing }), {
        timeoutMs: 30_000,
        what: "lease bucket",
        everyMs: 500,
        retryErrors: true,
      });
    const bootstrap = await nc(cluster.urls);
    (await open(bootstrap)).stop();
    const jsm = await jetstreamManager(bootstrap);
    const stream = `KV_${bucketName(c, "leases")}`;
    // The watch's consumer has one replica, on one server: that server is the one to kill.
    // It must lead neither the JetStream meta group nor the bucket's stream, nor carry the
    // reader's connection (the reader connects to the stream leader), so that the kill
    // costs no election and no reconnect and the time measured is the watch's recovery
    // alone (with the stock nats.js watch: two missed 5 s idle heartbeats, then a new
    // consumer).
    const streamLeader = (await jsm.streams.info(stream)).cluster?.leader;
    const meta = ((await (await fetch(`${cluster.servers[0]!.monitorUrl}/jsz`)).json()) as { meta_cluster?: { leader?: string } }).meta_cluster?.leader;
    const reader = await nc(cluster.servers.find((s) => s.serverName === streamLeader)!.url);
    let leases: LeaseTable | undefined;
    let victim: (typeof cluster.servers)[number] | undefined;
    for (let attempt = 1; victim === undefined; attempt++) {
      expect(attempt, "a watch consumer on a server that leads nothing").toBeLessThanOrEqual(30);
      leases?.stop();
      leases = await open(reader);
      const consumers = (await jsm.consumers.list(stream).next()).filter((ci) => ci.config.deliver_subject !== undefined);
      const newest = consumers.sort((a, b) => Date.parse(b.created) - Date.parse(a.created))[0];
      const host = newest?.cluster?.leader;
      if (host !== undefined && host !== streamLeader && host !== meta) victim = cluster.servers.find((s) => s.serverName === host);
    }
    const lt = leases!;
    await using _lt = defer(() => lt.stop());
    const survivors = cluster.servers.filter((s) => s !== victim).map((s) => s.url);
    const writer = await new Kvm(await nc(survivors)).open(bucketName(c, "leases"));

    await writeLease(writer, "before", "b");
    await poll(() => lt.get("before")?.value.node === "b", { timeoutMs: 5000, what: "a change before the kill" });

    await victim!.kill();
    // The stock watch notices after two missed 5 s idle heartbeats: 10-15 s after the
    // kill. Ours: a check (idle) → overdue for `stallMs` → a new watch; 1.4-6.4 s measured.
    await writeLease(writer, "x", "b");
    const t0 = performance.now();
    // 20 s: the figure is the measured time printed below. Until nats-server marks the
    // killed peer offline it may place the new watch's consumer there, and each such
    // create times out (2 s); on a loaded 2-core CI machine that took 7 s and more.
    await poll(() => lt.get("x")?.value.node === "b", { timeoutMs: 20_000, what: "a lease change after the watch's server died" });
    const seenAfterMs = Math.round(performance.now() - t0);
    await poll(() => lt.healthy(), { timeoutMs: 5000, what: "the mirror healthy again" });

    await victim!.restart();
    await writeLease(writer, "x", null);
    await poll(() => lt.get("x")?.value.node === null, { timeoutMs: 8000, what: "a lease change after the server came back" });
    console.info(`lease change seen ${seenAfterMs} ms after its write, with the watch's server dead`);
  }, 120_000);
});

describe("kv mirror health", () => {
  it("kv mirror - while NATS is down the lease view is unhealthy and vouches for no lease; after a restart it is current again", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    const c = `h${randomUUID().slice(0, 8)}`;
    const a = await LeaseTable.open({ nc: await nc(server.url), cluster: c, nodeId: "a", incarnation: "ia", logger, timing });
    await using _a = defer(() => a.stop());
    const writer = await new Kvm(await nc(server.url)).open(bucketName(c, "leases"));
    expect(await a.acquire("mine", () => false)).toBe(true);
    expect(a.holds("mine")).toBe(true);
    await server.kill();
    await poll(() => !a.healthy(), { timeoutMs: 10_000, what: "the lease view reported unhealthy after the disconnect" });
    expect(a.holds("mine")).toBe(false);
    await server.restart();
    await poll(() => a.healthy(), { timeoutMs: 15_000, what: "the lease view healthy after the restart" });
    expect(a.holds("mine")).toBe(true);
    await writeLease(writer, "mine", "b");
    await poll(() => a.get("mine")?.value.node === "b", { timeoutMs: 5000, what: "a takeover seen after the restart" });
    expect(a.holds("mine")).toBe(false);
  }, 60_000);
});

describe("kv mirror removals", () => {
  let server: Awaited<ReturnType<typeof startNatsServer>>;
  beforeAll(async () => {
    server = await startNatsServer({ allowExternal: false });
  }, 30_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("kv mirror - forgetting a removed key keeps a newer write the watch delivered first, and ignores the removed value delivered late", async () => {
    const conn = await nc(server.url);
    const kv = await new Kvm(conn).create(`r${randomUUID().slice(0, 8)}`, { history: 1 });
    const other = await new Kvm(await nc(server.url)).open((await kv.status()).bucket);
    const mirror = await KvMirror.start<string>(kv, logger, { nc: conn, ...timing });
    await using _mirror = defer(() => mirror.stop());
    const first = await kv.put("k", JSON.stringify("first"));
    await poll(() => mirror.get("k")?.revision === first, { timeoutMs: 5000, what: "the first write in the mirror" });
    await kv.purge("k", { previousSeq: first });
    // Another writer creates the key again, and the watch delivers it before this
    // node's code gets back to the mirror after its purge.
    const again = await other.create("k", JSON.stringify("again"));
    await poll(() => mirror.get("k")?.revision === again, { timeoutMs: 5000, what: "the re-creation in the mirror" });
    mirror.forget("k", first);
    expect(mirror.get("k")?.value).toBe("again");

    // The other order: the removed value is delivered after the forget (the watch was
    // behind). Simulated by forgetting a revision the next write will get: that write is
    // ignored like a late delivery, and the write after it shows again.
    const seen: (string | undefined)[] = [];
    mirror.onChange((key, e) => key === "late" && seen.push(e?.value));
    const last = (await kv.status()).streamInfo.state.last_seq;
    mirror.forget("late", last + 1);
    expect(await kv.put("late", JSON.stringify("removed"))).toBe(last + 1);
    await poll(() => mirror.watchedRevision >= last + 1, { timeoutMs: 5000, what: "the watch past the removed value" });
    expect(mirror.get("late")).toBeUndefined();
    const next = await kv.put("late", JSON.stringify("newer"));
    await poll(() => mirror.get("late")?.revision === next, { timeoutMs: 5000, what: "the newer write in the mirror" });
    expect(seen).toEqual(["newer"]);
  }, 30_000);

  it("kv mirror - a readable value overwritten with one this node cannot read (a newer Kova's) leaves the view, and listeners hear it as a removal", async () => {
    const conn = await nc(server.url);
    const kv = await new Kvm(conn).create(`u${randomUUID().slice(0, 8)}`, { history: 1 });
    const decode = (_k: string, v: unknown) => {
      if ((v as { v?: number }).v !== 1) throw new Error("a format this build does not read");
      return v as { v: number; n: number };
    };
    const mirror = await KvMirror.start(kv, createLogger({ level: "silent" }), { nc: conn, decode, ...timing });
    await using _mirror = defer(() => mirror.stop());
    const seen: Array<number | undefined> = [];
    mirror.onChange((key, e) => key === "k" && seen.push(e?.value.n));
    const first = await kv.put("k", JSON.stringify({ v: 1, n: 1 }));
    await poll(() => mirror.get("k")?.revision === first, { timeoutMs: 5000, what: "the readable write in the mirror" });
    const newer = await kv.put("k", JSON.stringify({ v: 2, n: 2 }));
    await poll(() => mirror.watchedRevision >= newer, { timeoutMs: 5000, what: "the watch past the unreadable write" });
    expect(mirror.get("k")).toBeUndefined();
    expect(seen).toEqual([1, undefined]);
  }, 30_000);

  it("kv mirror - a registry removal that races another node's declaration of the same instance keeps the declaration", async () => {
    const c = `g${randomUUID().slice(0, 8)}`;
    const a = await AgentRegistry.open({ nc: await nc(server.url), cluster: c, logger, timing });
    await using _a = defer(() => a.stop());
    const b = await AgentRegistry.open({ nc: await nc(server.url), cluster: c, logger, timing });
    await using _b = defer(() => b.stop());
    const id = "support--user-1";
    expect(await a.declare({ id, type: "agent", template: "support" })).toBe(true);
    await poll(() => b.get(id) !== undefined, { timeoutMs: 5000, what: "the declaration on b" });
    // Node a passivates the instance; between its delete's reply and its next step, node
    // b declares the instance again (a message arrived for it) and a's watch delivers it.
    const remove = a.store.kv.delete.bind(a.store.kv);
    a.store.kv.delete = async (key, opts) => {
      await remove(key, opts);
      await poll(async () => b.declare({ id, type: "agent", template: "support" }), { timeoutMs: 5000, what: "b's new declaration" });
      await poll(() => a.get(id) !== undefined, { timeoutMs: 5000, what: "b's declaration seen by a's watch" });
    };
    expect(await a.remove(id, () => true)).toBe(true);
    expect(a.get(id)?.template).toBe("support");
    await expect(a.declare({ id, type: "agent", template: "support" })).resolves.toBe(false);
  }, 30_000);

  it("kv mirror - a purge by someone else while the watch is behind (nats-server < 2.10.11 moves it past other keys' writes): the mirror ends equal to the bucket", async () => {
    const logs = captureLogs();
    const conn = await nc(server.url);
    const kv = await new Kvm(conn).create(`p${randomUUID().slice(0, 8)}`, { history: 1 });
    const writer = await new Kvm(await nc(server.url)).open((await kv.status()).bucket);
    const mirror = await KvMirror.start<number>(kv, logs.logger, { nc: conn, ...timing });
    await using _mirror = defer(() => mirror.stop());
    const keys = Array.from({ length: 100 }, (_, i) => `k${i}`);
    let differing = "";
    for (let round = 0; round < 3; round++) {
      const written = await purgingBurst(writer, keys);
      await poll(
        async () => {
          const wrong: string[] = [];
          for (const key of keys) {
            const e = await kv.get(key);
            const want = e?.operation === "PUT" ? e.revision : undefined;
            if (mirror.get(key)?.revision !== want) wrong.push(`${key} server ${want ?? "none"} mirror ${mirror.get(key)?.revision ?? "none"}`);
          }
          differing = `${wrong.length} keys: ${wrong.slice(0, 5).join(", ")}`;
          return wrong.length === 0;
        },
        {
          timeoutMs: 15_000,
          everyMs: 250,
          what: () =>
            `the mirror equal to the bucket after round ${round} (${written} writes; differing ${differing}); the mirror's last log lines: ${logs.lines
              .filter((l) => !l.includes('"level":10'))
              .slice(-40)
              .join("")}`,
        },
      );
      expect(mirror.healthy()).toBe(true);
    }
    // The server in this suite (2.9.10) has the bug: the watch was skipped and resumed.
    // On a fixed server the check finds nothing skipped and never resumes.
    const resumed = logs.lines.filter((l) => l.includes("the kv watch skipped entries")).length;
    const [major = 0, minor = 0, patch = 0] = (conn.info?.version ?? "0.0.0").split(".").map(Number);
    // Without a skip to catch, the rounds above would not have tested the gap checks.
    if (major * 1e6 + minor * 1e3 + patch < 2_010_011) expect(resumed, `nats-server ${conn.info?.version}`).toBeGreaterThan(0);
    expect(logs.lines.filter((l) => l.includes("could not check a gap in the kv watch"))).toEqual([]);
  }, 90_000);

  it("kv mirror - a user who may not read the bucket's messages gets one error naming the permission, and the watch goes on without gap checks", async () => {
    const users = [
      `{ user: "all", password: "all" }`,
      `{ user: "nogap", password: "nogap", permissions: { publish: { allow: [">"], deny: ["$JS.API.STREAM.MSG.GET.>"] }, subscribe: { allow: [">"] } } }`,
    ];
    await using limited = await startNatsServer({ allowExternal: false, extraConfig: `authorization { users = [ ${users.join(", ")} ] }` });
    const logs = captureLogs();
    const as = async (user: string) => {
      const c = await connect({ servers: limited.url, user, pass: user });
      conns.push(c);
      return c;
    };
    const bucket = `n${randomUUID().slice(0, 8)}`;
    const writer = await new Kvm(await as("all")).create(bucket, { history: 1 });
    const watcher = await as("nogap");
    const mirror = await KvMirror.start<number>(await new Kvm(watcher).open(bucket), logs.logger, { nc: watcher, ...timing });
    await using _mirror = defer(() => mirror.stop());
    const refused = () => logs.lines.filter((l) => l.includes("gap checks are off")).length;
    const keys = Array.from({ length: 100 }, (_, i) => `k${i}`);
    const burst = () => purgingBurst(writer, keys);
    await burst();
    await poll(() => refused() > 0, { timeoutMs: 10_000, what: "the error that gap checks are off" });
    await burst();
    await poll(async () => mirror.watchedRevision >= (await writer.status()).streamInfo.state.last_seq, {
      timeoutMs: 10_000,
      what: "the watch at the end",
    });
    expect(refused()).toBe(1);
    expect(logs.text()).toContain(`$JS.API.STREAM.MSG.GET.KV_${bucket}`);
    expect(logs.lines.filter((l) => l.includes("kv watch restarted"))).toEqual([]);
    expect(mirror.healthy()).toBe(true);
  }, 60_000);
});
