import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { createLogger } from "../../src/core/logger.js";
import { LeaseTable } from "../../src/node/lease.js";
import { LeaseLostError } from "../../src/actors/errors.js";
import { Membership } from "../../src/node/membership.js";
import { AgentRegistry } from "../../src/node/registry.js";

const logger = createLogger();
let server: NatsServerHandle;
const conns: NatsConnection[] = [];

async function nc(): Promise<NatsConnection> {
  const c = await connect({ servers: server.url });
  conns.push(c);
  return c;
}

function cluster(): string {
  return `t${randomUUID().slice(0, 8)}`;
}

async function waitFor(cond: () => boolean, ms: number): Promise<number> {
  const start = performance.now();
  while (!cond()) {
    if (performance.now() - start > ms) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return performance.now() - start;
}

beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  for (const c of conns) await c.close().catch(() => undefined);
  await server.stop();
});

describe("cluster state in KV", () => {
  it("lease - only one of two racing nodes wins an actor, and a release lets the other take it", async () => {
    const c = cluster();
    const a = await LeaseTable.open({ nc: await nc(), cluster: c, nodeId: "a", incarnation: "ia", logger });
    const b = await LeaseTable.open({ nc: await nc(), cluster: c, nodeId: "b", incarnation: "ib", logger });
    const results = await Promise.all([a.acquire("x", () => false), b.acquire("x", () => false)]);
    expect(results.filter(Boolean)).toHaveLength(1);
    const [winner, loser] = results[0] ? [a, b] : [b, a];
    await waitFor(() => loser.get("x") !== undefined, 2000);
    expect(await loser.acquire("x", () => false)).toBe(false);
    await winner.verify("x");
    await expect(loser.verify("x")).rejects.toBeInstanceOf(LeaseLostError);
    expect(await winner.release("x", "rebalance")).toBe(true);
    await waitFor(() => loser.get("x")?.value.node === null, 2000);
    expect(await loser.acquire("x", () => false)).toBe(true);
    await expect(winner.verify("x")).rejects.toBeInstanceOf(LeaseLostError);
    expect(await winner.release("x", "late")).toBe(false);
    a.stop();
    b.stop();
  });

  it("lease - a CAS with a stale revision loses even when the caller allows a takeover", async () => {
    const c = cluster();
    const a = await LeaseTable.open({ nc: await nc(), cluster: c, nodeId: "a", incarnation: "ia", logger });
    const b = await LeaseTable.open({ nc: await nc(), cluster: c, nodeId: "b", incarnation: "ib", logger });
    expect(await a.acquire("y", () => true)).toBe(true);
    await waitFor(() => b.get("y") !== undefined, 2000);
    const stale = b.get("y")!.revision;
    // a writes again behind b's back (a new revision); b's takeover with the old revision must fail.
    const fresh = await a.kv.put("y", JSON.stringify({ node: "a", incarnation: "ia", at: Date.now() }));
    await expect(b.kv.update("y", JSON.stringify({ node: "b" }), stale)).rejects.toThrow(/wrong last sequence/);
    await waitFor(() => b.get("y")!.revision === fresh, 2000);
    expect(await b.acquire("y", () => false)).toBe(false);
    expect(await b.acquire("y", () => true)).toBe(true);
    a.stop();
    b.stop();
  });

  it("membership - a silent node is dead to its peers after the staleness window, a leaving one at once", async () => {
    const c = cluster();
    const opts = { cluster: c, heartbeatMs: 100, staleAfterMs: 500, logger };
    const self = (id: string) => ({ id, incarnation: randomUUID(), startedAt: Date.now(), version: "t", pid: 1, host: "h" });
    const a = await Membership.join({ ...opts, nc: await nc(), self: self("a") });
    const b = await Membership.join({ ...opts, nc: await nc(), self: self("b") });
    const c3 = await Membership.join({ ...opts, nc: await nc(), self: self("c") });
    await waitFor(() => a.liveNodes().join() === "a,b,c", 2000);
    expect(a.readyNodes()).toEqual([]); // alive, but none has said it places actors yet
    await Promise.all([a.markUp(), b.markUp(), c3.markUp()]);
    await waitFor(() => a.readyNodes().join() === "a,b,c", 2000);
    expect(a.selfHealthy()).toBe(true);
    b.stop(); // stops beating without leaving: what a SIGKILLed node looks like
    const detected = await waitFor(() => a.liveNodes().join() === "a,c", 3000);
    expect(detected).toBeGreaterThan(250);
    await c3.leave();
    const left = await waitFor(() => a.liveNodes().join() === "a", 1000);
    expect(left).toBeLessThan(400);
    // the leaving record is deleted right after: the view keeps the dead b only
    await waitFor(() => a.view().map((v) => v.record.id).join() === "a,b", 1000);
    expect(a.view().find((v) => v.record.id === "b")?.live).toBe(false);
    a.stop();
  });

  it("registry - declare keeps an existing entry and updates are compare-and-set", async () => {
    const c = cluster();
    const r1 = await AgentRegistry.open({ nc: await nc(), cluster: c, logger });
    const r2 = await AgentRegistry.open({ nc: await nc(), cluster: c, logger });
    expect(await r1.declare({ id: "c1", type: "counter" })).toBe(true);
    await r1.update("c1", (cur) => ({ ...cur, desired: "killed" }));
    await waitFor(() => r2.get("c1")?.desired === "killed", 2000);
    expect(await r2.declare({ id: "c1", type: "counter" })).toBe(false);
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (i % 2 ? r1 : r2).update("c1", (cur) => ({ ...cur, capabilities: [...cur.capabilities, `k${i}`] })),
      ),
    );
    await waitFor(() => r1.get("c1")?.capabilities.length === 10, 2000);
    expect(new Set(r1.get("c1")!.capabilities).size).toBe(10);
    r1.stop();
    r2.stop();
  });

  it("membership - the record of a node silent past the prune window is deleted, a live one is kept", async () => {
    const c = cluster();
    const opts = { cluster: c, heartbeatMs: 100, staleAfterMs: 400, pruneAfterMs: 800, logger };
    const self = (id: string) => ({ id, incarnation: randomUUID(), startedAt: Date.now(), version: "t", pid: 1, host: "h" });
    const a = await Membership.join({ ...opts, nc: await nc(), self: self("a") });
    const b = await Membership.join({ ...opts, nc: await nc(), self: self("b") });
    const gone = await Membership.join({ ...opts, nc: await nc(), self: self("gone") });
    await waitFor(() => a.view().length === 3, 2000);
    gone.stop();
    await waitFor(() => a.view().map((v) => v.record.id).join() === "a,b", 3000);
    expect(await a.kv.get("gone").then((e) => e?.operation)).not.toBe("PUT");
    expect(b.view().map((v) => v.record.id)).toEqual(["a", "b"]);
    a.stop();
    b.stop();
  });
});
