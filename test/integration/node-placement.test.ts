import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { createLogger } from "../../src/core/logger.js";
import { LeaseTable } from "../../src/cluster/lease.js";
import { Membership } from "../../src/cluster/membership.js";
import { AgentRegistry } from "../../src/cluster/registry.js";
import { PlacementController, type HostPort } from "../../src/node/placement/controller.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const logger = createLogger();
let server: NatsServerHandle;
const conns: NatsConnection[] = [];

beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  for (const c of conns) await c.close().catch(() => undefined);
  await server.stop();
});

/** A host that records what placement asks of it; `running` is shared to catch double hosting. */
class RecordingHost implements HostPort {
  readonly actors = new Set<string>();
  constructor(
    readonly nodeId: string,
    private readonly running: Map<string, string>,
    readonly doubles: string[],
  ) {}
  readonly takeovers: string[] = [];
  async start(id: string, _type: string, _record: unknown, opts: { takeover: boolean }): Promise<void> {
    if (opts.takeover) this.takeovers.push(id);
    const other = this.running.get(id);
    if (other !== undefined && other !== this.nodeId) this.doubles.push(`${id}@${other}+${this.nodeId}`);
    this.running.set(id, this.nodeId);
    this.actors.add(id);
  }
  /** Actors whose drain takes this long (a long LLM turn in flight). */
  readonly slowDrain = new Map<string, number>();
  async stop(id: string): Promise<void> {
    await new Promise((r) => setTimeout(r, this.slowDrain.get(id) ?? 5)); // a turn draining
    if (this.running.get(id) === this.nodeId) this.running.delete(id);
    this.actors.delete(id);
  }
  hosted(): string[] {
    return [...this.actors];
  }
  hosts(id: string): boolean {
    return this.actors.has(id);
  }
  /** No turns run on this host: an actor is never busy, and its mailbox never has a backlog. */
  busy(): boolean {
    return false;
  }
  turnsEnded(): number {
    return 0;
  }
  async backlog(): Promise<number> {
    return 0;
  }
  /** Placement asks once per reconcile pass: counts the passes. */
  passes = 0;
  hostedCount(): number {
    this.passes++;
    return this.actors.size;
  }
}

interface TestNode {
  id: string;
  membership: Membership;
  leases: LeaseTable;
  registry: AgentRegistry;
  host: RecordingHost;
  placement: PlacementController;
}

async function startNode(cluster: string, id: string, running: Map<string, string>, doubles: string[], types?: string[]): Promise<TestNode> {
  const nc = await connect({ servers: server.url });
  conns.push(nc);
  const incarnation = randomUUID();
  const membership = await Membership.join({
    nc,
    cluster,
    heartbeatMs: 150,
    staleAfterMs: 1200,
    logger,
    self: { id, incarnation, startedAt: Date.now(), version: "t", pid: process.pid, host: "h", ...(types ? { types } : {}) },
  });
  const leases = await LeaseTable.open({ nc, cluster, nodeId: id, incarnation, logger });
  const registry = await AgentRegistry.open({ nc, cluster, logger });
  const host = new RecordingHost(id, running, doubles);
  const placement = new PlacementController({ nodeId: id, membership, leases, registry, host, logger, reconcileMs: 200 });
  placement.start();
  await membership.markUp();
  return { id, membership, leases, registry, host, placement };
}

function hostedOnce(nodes: TestNode[], ids: string[]): boolean {
  const count = new Map<string, number>();
  for (const n of nodes) for (const a of n.host.hosted()) count.set(a, (count.get(a) ?? 0) + 1);
  return ids.every((a) => count.get(a) === 1);
}

describe("placement over live nodes", () => {
  it("placement - a burst of registrations is placed in few passes: the registry and lease changes that arrive together share one (each pass visits every actor)", async () => {
    const cluster = `p${randomUUID().slice(0, 8)}`;
    const n1 = await startNode(cluster, "n1", new Map(), []);
    let changes = 0;
    const offs = [n1.registry.onChange(() => void changes++), n1.leases.onChange(() => void changes++)];
    const ids = Array.from({ length: 300 }, (_, i) => `b${i}`);
    const before = n1.host.passes;
    await Promise.all(ids.map((id) => n1.registry.declare({ id, type: "counter" })));
    await poll(() => hostedOnce([n1], ids), { timeoutMs: 10_000, what: "all 300 hosted" });
    await n1.placement.idle();
    for (const off of offs) off();
    const passes = n1.host.passes - before;
    // Each registration and each lease it takes is a change, and each change asks for a pass;
    // the changes that arrive together share one.
    expect(changes).toBeGreaterThanOrEqual(600);
    expect(passes).toBeLessThan(changes / 10);
  });

  it("placement - hosts each actor exactly once, spread over nodes, and takes over a dead node's actors", async () => {
    const cluster = `p${randomUUID().slice(0, 8)}`;
    const running = new Map<string, string>();
    const doubles: string[] = [];
    const nodes = [
      await startNode(cluster, "n1", running, doubles),
      await startNode(cluster, "n2", running, doubles),
      await startNode(cluster, "n3", running, doubles),
    ];
    const ids = Array.from({ length: 60 }, (_, i) => `a${i}`);
    for (const id of ids) await nodes[0]!.registry.declare({ id, type: "counter" });
    await poll(() => hostedOnce(nodes, ids), { timeoutMs: 5000, what: "all actors hosted once" });
    for (const n of nodes) expect(n.host.hosted().length).toBeGreaterThan(5);
    // leases agree with hosting
    for (const n of nodes) for (const a of n.host.hosted()) expect(nodes[0]!.leases.get(a)?.value.node ?? n.id).toBe(n.id);

    // n2 dies without a word (no leave, no release)
    const dead = nodes[1]!;
    const orphaned = dead.host.hosted();
    await dead.placement.stop();
    dead.membership.stop();
    dead.host.actors.clear();
    for (const a of orphaned) running.delete(a);
    const survivors = [nodes[0]!, nodes[2]!];
    const diedAt = performance.now();
    await poll(() => hostedOnce(survivors, ids), { timeoutMs: 5000, what: "takeover" });
    const took = performance.now() - diedAt;
    // The staleness window (1.2 s) and a reconcile pass, with room for a loaded machine.
    expect(took).toBeLessThan(4500);
    // the dead node's actors are taken over (their consumers get reset), none was a first start
    const takeovers = [...nodes[0]!.host.takeovers, ...nodes[2]!.host.takeovers];
    for (const a of orphaned) expect(takeovers).toContain(a);
    expect(takeovers.length).toBe(orphaned.length);

    // n4 joins: rebalance moves about a third of the actors to it, each still hosted once
    const n4 = await startNode(cluster, "n4", running, doubles);
    const all = [...survivors, n4];
    await poll(() => n4.host.hosted().length > 5 && hostedOnce(all, ids), { timeoutMs: 5000, what: "rebalance to n4" });
    expect(doubles).toEqual([]);

    // graceful release: n1 gives up everything, the others take it at once
    await nodes[0]!.placement.stop();
    await nodes[0]!.placement.releaseAll("shutdown");
    await nodes[0]!.membership.leave();
    await poll(() => hostedOnce([nodes[2]!, n4], ids), { timeoutMs: 3000, what: "graceful move" });
    expect(doubles).toEqual([]);
    for (const n of [nodes[2]!, n4]) {
      await n.placement.stop();
      n.membership.stop();
    }
  }, 60000);

  it("placement - an actor goes only to nodes that registered its type", async () => {
    const cluster = `p${randomUUID().slice(0, 8)}`;
    const running = new Map<string, string>();
    const doubles: string[] = [];
    const plain = await startNode(cluster, "plain", running, doubles, ["counter"]);
    const gpu = await startNode(cluster, "gpu", running, doubles, ["counter", "llm"]);
    const ids = Array.from({ length: 20 }, (_, i) => `m${i}`);
    for (const id of ids) await plain.registry.declare({ id, type: "llm" });
    await poll(() => gpu.host.hosted().length === 20, { timeoutMs: 5000, what: "llm actors on the gpu node" });
    expect(plain.host.hosted()).toEqual([]);
    for (const n of [plain, gpu]) {
      await n.placement.stop();
      n.membership.stop();
    }
  }, 60000);

  it("placement - a long drain on one actor does not delay the takeover of a dead node's actors", async () => {
    const cluster = `p${randomUUID().slice(0, 8)}`;
    const running = new Map<string, string>();
    const doubles: string[] = [];
    const [n1, n2] = [await startNode(cluster, "n1", running, doubles), await startNode(cluster, "n2", running, doubles)];
    const ids = Array.from({ length: 40 }, (_, i) => `d${i}`);
    for (const id of ids) await n1.registry.declare({ id, type: "counter" });
    await poll(() => hostedOnce([n1, n2], ids), { timeoutMs: 5000, what: "initial placement" });
    // every actor of n1 takes 20 s to drain, so the rebalance to n3 hangs on them
    for (const id of n1.host.hosted()) n1.host.slowDrain.set(id, 20_000);
    const n3 = await startNode(cluster, "n3", running, doubles);
    await poll(() => n3.host.hosted().length > 0, { timeoutMs: 5000, what: "n3 gets n2's share" });
    // now n2 dies: n1 must take its actors although its own drains are still running
    const orphaned = n2.host.hosted();
    await n2.placement.stop();
    n2.membership.stop();
    n2.host.actors.clear();
    for (const a of orphaned) running.delete(a);
    const diedAt = performance.now();
    await poll(() => orphaned.every((a) => n1.host.hosted().includes(a) || n3.host.hosted().includes(a)), { timeoutMs: 5000, what: "takeover during drains" });
    const took = performance.now() - diedAt;
    // Not held up by n1's own 20 s drains.
    expect(took).toBeLessThan(4500);
    for (const n of [n1, n3]) {
      n.host.slowDrain.clear();
      n.membership.stop();
    }
  }, 60000);

  it("placement - a NATS server restart longer than the staleness window moves no actor", async () => {
    await using own = await startNatsServer({ allowExternal: false });
    const saved = server;
    server = own; // startNode connects to `server`
    await using _restore = defer(() => (server = saved));
    const cluster = `p${randomUUID().slice(0, 8)}`;
    const running = new Map<string, string>();
    const doubles: string[] = [];
    const [a, b] = [await startNode(cluster, "a", running, doubles), await startNode(cluster, "b", running, doubles)];
    const ids = Array.from({ length: 20 }, (_, i) => `r${i}`);
    for (const id of ids) await a.registry.declare({ id, type: "counter" });
    await poll(() => hostedOnce([a, b], ids) && a.host.hosted().length > 0 && b.host.hosted().length > 0, { timeoutMs: 5000, what: "placed" });
    const before = new Map(ids.map((id) => [id, a.leases.get(id)!.revision]));
    await own.kill();
    await new Promise((r) => setTimeout(r, 2500)); // an outage longer than staleAfterMs (1.2 s)
    await own.restart();
    await poll(() => a.membership.selfHealthy() && b.membership.selfHealthy(), { timeoutMs: 15_000, what: "heartbeats resume" });
    // Placement has had its chance to move actors once both nodes see each other live again
    // and the actors declared after the restart are placed (the KV watches came back too).
    const fresh = Array.from({ length: 6 }, (_, i) => `new${i}`);
    for (const id of fresh) await b.registry.declare({ id, type: "counter" });
    await poll(() => a.membership.liveNodes().join() === "a,b" && b.membership.liveNodes().join() === "a,b" && hostedOnce([a, b], [...ids, ...fresh]), {
      timeoutMs: 10_000,
      what: "placement after the restart",
    });
    const moved = ids.filter((id) => a.leases.get(id)?.revision !== before.get(id));
    expect(moved).toEqual([]);
    expect(doubles).toEqual([]);
    for (const n of [a, b]) {
      await n.placement.stop();
      n.membership.stop();
    }
  }, 60000);
});
