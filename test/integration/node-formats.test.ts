import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { spawnSubject, type SpawnReply } from "../../src/cluster/control.js";
import { controlRequest } from "../../src/cluster/control.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { inProcessNode } from "../fixtures/node/in-process-node.js";
import { poll } from "../fixtures/poll.js";

const golden = (name: string): Record<string, unknown> =>
  JSON.parse(readFileSync(join(import.meta.dirname, "../fixtures/node", name), "utf8")) as Record<string, unknown>;

/** Pino lines as objects. */
const parsed = (lines: string[]) => lines.map((l) => JSON.parse(l) as Record<string, unknown> & { msg?: string; key?: string; actorId?: string });

describe("registry, lease and heartbeat formats at run time", () => {
  it("formats - a node writes the golden v1 shapes, and leaves registry, lease and heartbeat entries of a newer version out of its view without overwriting them", async () => {
    const logs = captureLogs();
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([counterActor]),
      logger: logs.logger,
      extraToml: `[[actors]]\nid = "c1"\ntype = "counter"\n`,
    });
    const { node, nc, cluster } = rig;
    const kvm = new Kvm(nc);
    const [agents, leases, nodes] = await Promise.all(["agents", "leases", "nodes"].map((b) => kvm.open(`kova_${cluster}_${b}`)));
    await poll(() => node.agents().some((a) => a.id === "c1" && a.state === "Idle"), { timeoutMs: 20_000, what: "c1 hosted" });

    // What this build writes is what the golden files of today's v1 hold (same fields, v: 1).
    const shape = (v: Record<string, unknown>) => Object.keys(v).sort();
    const written = {
      agent: (await agents!.get("c1"))!.json<Record<string, unknown>>(),
      lease: (await leases!.get("c1"))!.json<Record<string, unknown>>(),
      heartbeat: (await nodes!.get("n1"))!.json<Record<string, unknown>>(),
    };
    expect(shape(written.agent)).toEqual(shape(golden("agent-record-v1-tagged.json")));
    expect(shape(written.lease)).toEqual(shape(golden("lease-record-v1-tagged.json")));
    expect(shape(written.heartbeat)).toEqual(shape(golden("node-record-v1-tagged.json")));
    expect([written.agent.v, written.lease.v, written.heartbeat.v]).toEqual([1, 1, 1]);

    // Entries a newer Kova (v 2) wrote: a registry record, the lease of an actor then
    // spawned, and a peer's heartbeat; beside them an older, unversioned heartbeat that
    // still counts (state "starting": live, but not handed actors).
    const future = (v: object) => JSON.stringify({ ...v, v: 2 });
    const registryRev = await agents!.create(
      "future1",
      future({ id: "future1", type: "counter", node: null, state: "Created", capabilities: [], desired: "running", updatedAt: 1 }),
    );
    const leaseRev = await leases!.create("c2", future({ node: "n9", incarnation: "i9", at: 1 }));
    await nodes!.put("n9", future({ ...golden("node-record-v1-tagged.json"), id: "n9", heartbeatAt: Date.now() }));
    const { v: _v, ...unversioned } = golden("node-record-v1-tagged.json");
    await nodes!.put("n8", JSON.stringify({ ...unversioned, id: "n8", state: "starting", heartbeatAt: Date.now() }));

    const ignored = () =>
      parsed(logs.lines)
        .filter((l) => l.msg === "ignoring a KV value this node cannot read")
        .map((l) => l.key);
    await poll(() => ["future1", "c2", "n9"].every((k) => ignored().includes(k)), { timeoutMs: 15_000, what: "the three v2 entries read and refused" });
    const refusal = parsed(logs.lines).find((l) => l.msg === "ignoring a KV value this node cannot read" && l.key === "n9") as {
      err?: { code?: string; message?: string };
    };
    expect(refusal.err?.code).toBe("UNSUPPORTED_FORMAT");
    expect(refusal.err?.message).toContain("heartbeat of node n9 has format version 2, but this build of Kova reads only version 1");

    // The v1 heartbeat without v is a live peer; the v2 one is not in the view.
    await poll(() => node.status().liveNodes.includes("n8"), { timeoutMs: 15_000, what: "n8's unversioned heartbeat read" });
    expect(node.status().liveNodes).not.toContain("n9");

    // A spawn of the id a newer node registered finds it taken and leaves it as it is.
    const again = await controlRequest<SpawnReply>(nc, spawnSubject(cluster), { id: "future1", type: "counter" });
    expect(again.created).toBe(false);
    // c2 is declared (a v1 record) but its lease is v2: placement tries it and does not take it.
    await controlRequest<SpawnReply>(nc, spawnSubject(cluster), { id: "c2", type: "counter" });
    await poll(() => parsed(logs.lines).some((l) => l.msg === "placement job done" && l.actorId === "c2"), {
      timeoutMs: 15_000,
      what: "a placement attempt for c2",
    });

    expect(node.agents().map((a) => a.id)).toEqual(["c1"]);
    expect((await agents!.get("future1"))?.revision).toBe(registryRev);
    expect((await leases!.get("c2"))?.revision).toBe(leaseRev);
    expect((await leases!.get("c2"))?.json<{ v: number; node: string }>()).toMatchObject({ v: 2, node: "n9" });
  }, 90_000);
});
