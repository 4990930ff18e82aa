import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { listKvKeys } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { controlRequest, spawnSubject } from "../../src/cluster/control.js";
import { CLUSTER_EVENTS_SESSION, KovaNode } from "../../src/node/node.js";
import { startNatsServer } from "../../src/testing/index.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

describe("quotas", () => {
  it("quotas - spawns past [cluster] max_actors are QUOTA_EXCEEDED; a node hosts at most max_actors_per_node and says why the rest wait", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    await using dir = await tempDir("kova-quota-");
    const cluster = `q${process.pid}`;
    let node: KovaNode | undefined;
    await using _node = defer(() => node?.stop());
    await using nc = await connect({ servers: server.url });
    const events: Array<{ type: string; data?: { waiting?: number; hosted?: number } }> = [];
    nc.subscribe(`kova.${cluster}.events.${CLUSTER_EVENTS_SESSION}.>`, { callback: (_e, m) => void events.push(m.json()) });
    const capped = (waiting: number) => events.some((e) => e.type === "placement_capped" && e.data?.waiting === waiting);
    const config = parseConfig(
      `[node]\nid = "q1"\ndata_dir = "${dir.path}"\n[cluster]\nname = "${cluster}"\nmax_actors = 4\nmax_actors_per_node = 2\nreconcile_ms = 200\n` +
        `[nats]\nurls = ["${server.url}"]\n[wal]\nsync = "normal"\n[[actors]]\nid = "a1"\ntype = "counter"\n[[actors]]\nid = "a2"\ntype = "counter"\n[[actors]]\nid = "a3"\ntype = "counter"\n`,
      { env: {} },
    );
    node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
    // Three declared, two hosted: the cap holds and the node says so.
    await poll(async () => capped(1), { timeoutMs: 15_000, what: "placement_capped event, one waiting" });
    await poll(async () => node!.agents().length === 2, { timeoutMs: 15_000, what: `two hosted (have ${JSON.stringify(node!.agents())})` });
    expect(node.agents().length).toBe(2);

    const spawn = (id: string) => controlRequest<{ created: boolean }>(nc, spawnSubject(cluster), { id, type: "counter" });
    expect((await spawn("a4")).created).toBe(true);
    const refused = await spawn("a5").catch((err: unknown) => err);
    expect(isKovaError(refused, "QUOTA_EXCEEDED")).toBe(true);
    expect((refused as Error).message).toContain("[cluster] max_actors is 4");
    // Re-declaring an existing actor is not a new one.
    expect((await spawn("a4")).created).toBe(false);
    // Still capped once placement has seen the spawn (a pass that counts a3 and a4 waiting): two hosted.
    await poll(async () => capped(2), { timeoutMs: 15_000, what: "placement_capped event, two waiting" });
    expect(node.agents().length).toBe(2);
    expect(events.filter((e) => e.type === "placement_capped").every((e) => (e.data?.hosted ?? 0) <= 2)).toBe(true);
  });
});

/** Two nodes of one cluster in this process, sharing `max_actors` and a `session` template of counters. */
async function twoNodes(serverUrl: string, cluster: string, maxActors: number): Promise<{ nodes: KovaNode[] } & AsyncDisposable> {
  const dirs: string[] = [];
  const nodes: KovaNode[] = [];
  const dispose = async () => {
    for (const n of nodes) await n.stop().catch(() => undefined);
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  };
  try {
    for (const id of ["f1", "f2"]) {
      const dir = await mkdtemp(join(tmpdir(), `kova-flood-${id}-`));
      dirs.push(dir);
      const config = parseConfig(
        `[node]\nid = "${id}"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\nmax_actors = ${maxActors}\nreconcile_ms = 200\n` +
          `[nats]\nurls = ["${serverUrl}"]\n[wal]\nsync = "normal"\n`,
        { env: {} },
      );
      nodes.push(
        await KovaNode.start({
          config,
          logger: createLogger({ level: "silent" }),
          types: new ActorTypeRegistry([counterActor]),
          templates: [{ name: "session", type: "counter", config: {} }],
        }),
      );
    }
    // Both answer: each is in the other's view, so spawns and activations reach both.
    await poll(() => nodes.every((n) => n.status().liveNodes.length === 2), { timeoutMs: 20_000, what: "both nodes live" });
  } catch (err) {
    await dispose();
    throw err;
  }
  return { nodes, [Symbol.asyncDispose]: dispose };
}

describe("quotas under a flood", () => {
  for (const kind of ["spawn", "activate"] as const) {
    it(`quotas - 200 parallel ${kind} requests across two nodes against max_actors = 5 register exactly 5; every other answer is QUOTA_EXCEEDED`, async () => {
      await using server = await startNatsServer({ allowExternal: false });
      const cluster = `fl${kind}${process.pid}`;
      await using _nodes = await twoNodes(server.url, cluster, 5);
      await using nc = await connect({ servers: server.url });
      const subject = kind === "spawn" ? spawnSubject(cluster) : `kova.${cluster}.control.activate`;
      const body = (i: number) => (kind === "spawn" ? { id: `s${i}`, type: "counter" } : { id: `session--k${i}` });
      const answers = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          controlRequest<{ created: boolean; id: string }>(nc, subject, body(i), 60_000).then(
            (r) => ({ ok: r }),
            (err: unknown) => ({ err }),
          ),
        ),
      );
      const created = answers.flatMap((a) => ("ok" in a && a.ok.created ? [a.ok] : []));
      const refused = answers.flatMap((a) => ("err" in a ? [a.err] : []));
      expect(created).toHaveLength(5);
      expect(refused).toHaveLength(195);
      for (const err of refused) expect(isKovaError(err, "QUOTA_EXCEEDED"), String(err)).toBe(true);
      // Both nodes took requests (the queue group spreads them), so the cap held across nodes.
      const taken: number[] = [];
      for await (const m of await nc.requestMany("$SRV.STATS.kova-node", new Uint8Array(), { strategy: "count", maxMessages: 2, maxWait: 5000 })) {
        taken.push(m.json<{ endpoints: Array<{ name: string; num_requests: number }> }>().endpoints.find((e) => e.name === kind)!.num_requests);
      }
      expect(taken).toHaveLength(2);
      expect(taken.reduce((a, b) => a + b, 0)).toBe(200);
      expect(Math.min(...taken)).toBeGreaterThan(0);
      expect((await listKvKeys(nc, `kova_${cluster}_agents`)).sort()).toEqual(created.map((c) => c.id).sort());
    }, 120_000);
  }
});
