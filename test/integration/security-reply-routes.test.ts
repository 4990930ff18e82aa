import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ActorTypeRegistry, counterActor, type CounterState } from "../../src/actors/index.js";
import { createEnvelope, encodeEnvelope, KovaClient } from "../../src/bus/index.js";
import { parseConfig } from "../../src/node/config.js";
import { nodeSubject, schedulesSubject } from "../../src/cluster/control.js";
import { KovaNode } from "../../src/node/node.js";
import type { NatsServerHandle } from "../../src/testing/index.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { tempDir, type TempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";
import { connectAs, natsToml, role, startAccountsServer, type Role } from "../fixtures/security/accounts.js";

// A request's reply subject is chosen by its sender and nats-server never checks it
// against permissions, so within one account a sender could have JetStream (a publish
// ack, a direct get, any JetStream API answer) or a node (rpc, control, $SRV) write its
// answer into Kova's buckets or a stream's purge. deploy/nats/accounts.conf puts every
// role but the nodes in an account of its own that imports its services: every answer
// goes back into the sender's account. Here each role tries every reply route it has.
const utf8 = new TextEncoder();
const json = (body: unknown) => utf8.encode(JSON.stringify(body));

/** Where a forged reply would land in KOVA: the node's buckets, and the JetStream API of every stream. */
const TARGETS = [
  "$KV.kova_default_agents.c1",
  "$KV.kova_default_leases.c1",
  "$KV.kova_default_checkpoints.c1",
  "$KV.kova_default_nodes.n1",
  "$JS.API.STREAM.PURGE.KOVA_DEFAULT_A2A",
  "$JS.API.STREAM.DELETE.KOVA_DEFAULT_EVENTS",
  "$JS.API.STREAM.PURGE.KOVA_DEFAULT_DLQ",
  "$JS.API.STREAM.DELETE.KOVA_DEFAULT_JOURNAL",
  "$JS.API.STREAM.DELETE.KV_kova_default_agents",
];
const STREAMS = ["KOVA_DEFAULT_A2A", "KOVA_DEFAULT_EVENTS", "KOVA_DEFAULT_DLQ", "KOVA_DEFAULT_JOURNAL", "KV_kova_default_agents", "KV_kova_default_leases"];

interface Route {
  what: string;
  subject: string;
  body: Uint8Array;
}

const a2aSend: Route = {
  what: "a2a publish ack (JetStream)",
  // An id nobody declared: its message stays in the A2A stream and starts no turn.
  subject: "kova.default.a2a.parked",
  body: encodeEnvelope(createEnvelope({ from: "x", to: "parked", type: "task_delegate", payload: null }), "msgpack"),
};
const rpc: Route = {
  what: "rpc (node)",
  subject: "kova.default.rpc.c1",
  body: encodeEnvelope(createEnvelope({ from: "x", to: "c1", type: "info_request", payload: {} }), "msgpack"),
};
const directGet: Route = {
  what: "registry direct get (JetStream)",
  subject: "$JS.API.DIRECT.GET.KV_kova_default_agents",
  body: json({ last_by_subj: "$KV.kova_default_agents.c1" }),
};
const activate: Route = { what: "activate (node)", subject: "kova.default.control.activate", body: json({ id: "nobody" }) };
const signal: Route = { what: "signal (node)", subject: nodeSubject("default", "n1", "signal"), body: json({ actorId: "nobody", signal: "pause" }) };
const eventsInfo: Route = { what: "stream info (JetStream API)", subject: "$JS.API.STREAM.INFO.KOVA_DEFAULT_EVENTS", body: new Uint8Array() };
const registryMsgGet: Route = {
  what: "stream msg get (JetStream API)",
  subject: "$JS.API.STREAM.MSG.GET.KV_kova_default_agents",
  body: json({ last_by_subj: "$KV.kova_default_agents.c1" }),
};

const ROUTES: Record<Exclude<Role, "node">, Route[]> = {
  // (a client reads no registry: it is a principal of its own, docs/security.md)
  client: [a2aSend, rpc, activate],
  operator: [
    a2aSend,
    rpc,
    directGet,
    activate,
    signal,
    eventsInfo,
    registryMsgGet,
    { what: "status (node)", subject: nodeSubject("default", "n1", "status"), body: json({}) },
    { what: "agents (node)", subject: nodeSubject("default", "n1", "agents"), body: json({}) },
    { what: "schedules (node)", subject: schedulesSubject("default"), body: json({ op: "ls" }) },
    { what: "$SRV ping (every node)", subject: "$SRV.PING", body: new Uint8Array() },
    { what: "$SRV info (every node)", subject: "$SRV.INFO.kova-node", body: new Uint8Array() },
    { what: "API key write ack (JetStream)", subject: "$KV.kova_default_gateway_keys.forged", body: json({ forged: true }) },
  ],
  gateway: [
    a2aSend,
    rpc,
    activate,
    signal,
    eventsInfo,
    registryMsgGet,
    { what: "mailbox consumer info (JetStream API)", subject: "$JS.API.CONSUMER.INFO.KOVA_DEFAULT_A2A.agent_c1", body: new Uint8Array() },
    { what: "task write ack (JetStream)", subject: "$KV.kova_default_gateway_tasks.forged", body: json({ forged: true }) },
  ],
};

let server: NatsServerHandle;
let node: KovaNode;
let dir: TempDir;
let admin: NatsConnection;
const logs = captureLogs();

beforeAll(async () => {
  dir = await tempDir("kova-routes-");
  server = await startAccountsServer(dir.path);
  const config = parseConfig(
    `[node]\nid = "n1"\ndata_dir = "${join(dir.path, "node")}"\n[nats]\nurls = ["${server.url}"]\n${natsToml("node")}\n` +
      `[wal]\nsync = "normal"\n[[actors]]\nid = "c1"\ntype = "counter"\n`,
    { env: process.env },
  );
  node = await KovaNode.start({ config, logger: logs.logger, types: new ActorTypeRegistry([counterActor]) });
  admin = await connectAs(server, "node");
  // The gateway's buckets, as `kova gateway start` makes them, so its and the operator's writes have somewhere to go.
  const kvm = new Kvm(admin);
  await kvm.create("kova_default_gateway_tasks");
  await kvm.create("kova_default_gateway_keys");
  await using kc = await KovaClient.connect({ servers: server.url, security: role("client"), ensureStreams: false });
  await kc.send("c1", "task_delegate", {});
  await poll(async () => (await kc.request<CounterState>("c1", "info_request", {})).count === 1, {
    timeoutMs: 20_000,
    retryErrors: true,
    what: "c1 hosted and counted once (it has a checkpoint)",
  });
}, 60_000);

afterAll(async () => {
  await admin?.close();
  await node?.stop();
  await server?.stop();
  await dir?.[Symbol.asyncDispose]();
});

describe("security: reply routes across accounts (deploy/nats/accounts.conf)", () => {
  for (const r of ["client", "operator", "gateway"] as const) {
    it(`reply routes - a ${r} whose requests name Kova's buckets or streams as their reply changes none of them, on every route it has`, async () => {
      const kvm = new Kvm(admin);
      const kvs = new Map<string, KV>();
      for (const b of ["agents", "leases", "checkpoints", "nodes"]) kvs.set(b, await kvm.open(`kova_default_${b}`));
      const key = (b: string) => (b === "nodes" ? "n1" : "c1");
      const revisions = new Map<string, number>();
      for (const [b, kv] of kvs) revisions.set(b, (await kv.get(key(b)))!.revision);
      const jsm = await jetstreamManager(admin);
      const counts = new Map<string, number>();
      for (const s of STREAMS) counts.set(s, (await jsm.streams.info(s)).state.messages);

      {
        // Closed before the checks below, as the role's session ends.
        await using nc = await connectAs(server, r);
        for (const route of ROUTES[r]) for (const reply of TARGETS) nc.publish(route.subject, route.body, { reply });
        // The same connection's next request on every route is answered, so each forged
        // one before it was taken and answered (into the role's own account) or refused.
        for (const route of ROUTES[r]) {
          const answer = await nc.request(route.subject, route.body, { timeout: 10_000 });
          expect(answer.subject, route.what).toMatch(new RegExp(`^_INBOX_${r}\\.`));
        }
      }

      // Every bucket key is as it was: not one write since (the nodes bucket's heartbeats
      // aside, each of which is the node's own record).
      for (const b of ["agents", "leases", "checkpoints"]) expect((await kvs.get(b)!.get(key(b)))!.revision, b).toBe(revisions.get(b));
      const nodes = kvs.get("nodes")!;
      for await (const e of await nodes.history({ key: "n1" })) {
        if (e.revision <= revisions.get("nodes")!) continue;
        expect(JSON.parse(e.string()), `a write to nodes.n1 since: ${e.string()}`).toMatchObject({ id: "n1" });
      }
      // No stream lost a message or was deleted (the forged sends to `parked` add to A2A).
      for (const s of STREAMS) expect((await jsm.streams.info(s)).state.messages, s).toBeGreaterThanOrEqual(counts.get(s)!);
      // The nodes never saw a forged reply subject: requests reach KOVA through service
      // imports, with the server's own reply (its guard, which drops a forged one, had nothing to do).
      expect(logs.lines.filter((l) => l.includes("request dropped unanswered"))).toEqual([]);
    }, 60_000);
  }
});
