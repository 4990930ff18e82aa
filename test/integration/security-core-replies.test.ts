import { Kvm, type KV } from "@nats-io/kv";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { ActorTypeRegistry, counterActor, type CounterState } from "../../src/actors/index.js";
import { readCheckpoint, type Checkpoint } from "../../src/actors/checkpoint-store.js";
import { createEnvelope, encodeEnvelope, KovaClient, bucketName } from "../../src/bus/index.js";
import { approveSubject, controlRequest, nodeSubject, schedulesSubject, spawnSubject, type NodeStatusView } from "../../src/cluster/control.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { inProcessNode } from "../fixtures/node/in-process-node.js";
import { poll } from "../fixtures/poll.js";

const utf8 = new TextEncoder();

// A core NATS request carries a reply subject its requester chose, and nats-server checks
// a publish's subject against permissions, never its reply subject. A node that answered
// every request wherever it said would write its answer into Kova's buckets (or a
// JetStream API subject) for anyone in the nodes' account who may send a request at all.
describe("security: reply subjects of core requests", () => {
  it("core replies - rpc, activate, status, agents, tools, spawn, signal, schedules, approve and $SRV requests whose reply names a bucket or the JetStream API are dropped unanswered and change nothing", async () => {
    const logs = captureLogs();
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([counterActor]),
      templates: [{ name: "support", type: "counter", config: {} }],
      extraToml: `[[actors]]\nid = "c1"\ntype = "counter"`,
      logger: logs.logger,
    });
    const { cluster, nc } = rig;
    await using kc = await KovaClient.connect({ servers: rig.server.url, cluster });
    await kc.send("c1", "task_delegate", {});
    await poll(async () => (await kc.request<CounterState>("c1", "info_request", {})).count === 1, {
      timeoutMs: 15_000,
      retryErrors: true,
      what: "c1 counted its first message",
    });
    const upper = cluster.toUpperCase();
    // A message nobody will take (no such agent), so a forged purge of the A2A stream would show.
    await kc.bus.js.publish(`kova.${cluster}.a2a.parked`, utf8.encode("{}"));
    const kvm = new Kvm(nc);
    const buckets = {
      agents: { bucket: `kova_${cluster}_agents`, key: "c1", valid: (v: unknown) => isObject(v) && v.id === "c1" && v.type === "counter" },
      leases: { bucket: `kova_${cluster}_leases`, key: "c1", valid: (v: unknown) => isObject(v) && typeof v.incarnation === "string" },
      nodes: { bucket: `kova_${cluster}_nodes`, key: "n1", valid: (v: unknown) => isObject(v) && v.id === "n1" && typeof v.incarnation === "string" },
      checkpoints: {
        bucket: bucketName(cluster, "checkpoints"),
        key: "c1",
        valid: (v: unknown) => readCheckpoint("checkpoint of c1", v as Checkpoint).processed.length > 0,
      },
    };
    const kvs = new Map<string, KV>();
    for (const b of Object.values(buckets)) kvs.set(b.bucket, await kvm.open(b.bucket));
    const revisionBefore = new Map<string, number>();
    for (const b of Object.values(buckets)) revisionBefore.set(b.bucket, (await kvs.get(b.bucket)!.get(b.key))!.revision);
    const streamsBefore = new Map<string, number>();
    for (const s of ["A2A", "EVENTS", "DLQ", "JOURNAL"]) streamsBefore.set(s, (await kc.bus.jsm.streams.info(`KOVA_${upper}_${s}`)).state.messages);

    const targets = [
      ...Object.values(buckets).map((b) => `$KV.${b.bucket}.${b.key}`),
      `$JS.API.STREAM.PURGE.KOVA_${upper}_A2A`,
      `$JS.API.STREAM.PURGE.KOVA_${upper}_EVENTS`,
      `$JS.API.STREAM.DELETE.KOVA_${upper}_DLQ`,
      `$JS.API.STREAM.DELETE.KOVA_${upper}_JOURNAL`,
    ];
    const json = (body: unknown) => utf8.encode(JSON.stringify(body));
    const jsonHeaders = natsHeaders();
    jsonHeaders.set("Content-Type", "application/json");
    const routes: Array<{ subject: string; body: Uint8Array; json?: boolean }> = [
      { subject: `kova.${cluster}.rpc.c1`, body: encodeEnvelope(createEnvelope({ from: "x", to: "c1", type: "info_request", payload: {} }), "msgpack") },
      {
        subject: `kova.${cluster}.rpc.c1`,
        body: encodeEnvelope(createEnvelope({ from: "x", to: "c1", type: "info_request", payload: {} }), "json"),
        json: true,
      },
      { subject: `kova.${cluster}.control.activate`, body: json({ id: "support--forged" }) },
      { subject: nodeSubject(cluster, "n1", "status"), body: json({}) },
      { subject: nodeSubject(cluster, "n1", "agents"), body: json({}) },
      { subject: nodeSubject(cluster, "n1", "tools"), body: json({}) },
      { subject: spawnSubject(cluster), body: json({ id: "forged", type: "counter" }) },
      { subject: nodeSubject(cluster, "n1", "signal"), body: json({ actorId: "c1", signal: "pause" }) },
      { subject: schedulesSubject(cluster), body: json({ op: "ls" }) },
      { subject: approveSubject(cluster), body: json({ runId: "r1", approvalId: "ap-000000000000", approved: true }) },
      { subject: "$SRV.PING", body: new Uint8Array() },
      { subject: "$SRV.INFO.kova-node", body: new Uint8Array() },
      { subject: "$SRV.STATS", body: new Uint8Array() },
    ];
    for (const route of routes) {
      for (const reply of targets) nc.publish(route.subject, route.body, { reply, ...(route.json ? { headers: jsonHeaders } : {}) });
    }
    await nc.flush();

    // The same connection's next requests on every route are answered: the node has seen
    // (and judged) every forged one before them, since it reads one connection in order.
    expect((await kc.request<CounterState>("c1", "info_request", {})).count).toBe(1);
    const status = await controlRequest<NodeStatusView>(nc, nodeSubject(cluster, "n1", "status"), {});
    expect(status.nodeId).toBe("n1");
    expect(await controlRequest<{ tools: unknown[] }>(nc, nodeSubject(cluster, "n1", "tools"), {})).toEqual({ node: "n1", tools: [] });
    const pong = await nc.request("$SRV.PING.kova-node", new Uint8Array(), { timeout: 5000 });
    expect(pong.json<{ name: string }>().name).toBe("kova-node");

    // Nothing the forged replies named changed: every write since is the node's own record.
    for (const b of Object.values(buckets)) {
      const written = await history(kvs.get(b.bucket)!, b.key, revisionBefore.get(b.bucket)!);
      for (const value of written) expect(b.valid(value), `${b.bucket}: ${JSON.stringify(value)}`).toBe(true);
    }
    for (const [s, before] of streamsBefore) {
      expect((await kc.bus.jsm.streams.info(`KOVA_${upper}_${s}`)).state.messages, s).toBeGreaterThanOrEqual(before);
    }
    // The forged spawn, signal and activation did not act either: refused before their handlers.
    const agents = kvs.get(buckets.agents.bucket)!;
    expect(await agents.get("forged")).toBeNull();
    expect(await agents.get("support--forged")).toBeNull();
    expect(rig.node.agents().find((a) => a.id === "c1")?.state).toBe("Idle");
    // One warning for the whole flood (rate-limited), naming the rule.
    const warnings = logs.lines.filter((l) => l.includes("request dropped unanswered"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("reply inbox");
  }, 60_000);
});

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The values stored under `key` after revision `after`, each parsed as JSON (or the raw text when it is not JSON). */
async function history(kv: KV, key: string, after: number): Promise<unknown[]> {
  const values: unknown[] = [];
  const it = await kv.history({ key });
  for await (const e of it) {
    if (e.revision <= after || e.operation !== "PUT") continue;
    const text = e.string();
    try {
      values.push(JSON.parse(text));
    } catch {
      values.push(text);
    }
  }
  return values;
}
