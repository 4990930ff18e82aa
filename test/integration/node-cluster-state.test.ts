import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { createLogger } from "../../src/core/logger.js";
import { LeaseTable } from "../../src/cluster/lease.js";
import { LeaseLostError } from "../../src/actors/errors.js";
import { Membership } from "../../src/cluster/membership.js";
import { AgentRegistry } from "../../src/cluster/registry.js";
import { poll } from "../fixtures/poll.js";

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
    await poll(() => loser.get("x") !== undefined, { timeoutMs: 2000, what: "the loser to see the lease" });
    expect(await loser.acquire("x", () => false)).toBe(false);
    await winner.verify("x");
    await expect(loser.verify("x")).rejects.toBeInstanceOf(LeaseLostError);
    expect(await winner.release("x", "rebalance")).toBe(true);
    await poll(() => loser.get("x")?.value.node === null, { timeoutMs: 2000, what: "the loser to see the release" });
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
    await poll(() => b.get("y") !== undefined, { timeoutMs: 2000, what: "b to see y" });
    const stale = b.get("y")!.revision;
    // a writes again behind b's back (a new revision); b's takeover with the old revision must fail.
    const fresh = await a.store.kv.put("y", JSON.stringify({ node: "a", incarnation: "ia", at: Date.now() }));
    await expect(b.store.kv.update("y", JSON.stringify({ node: "b" }), stale)).rejects.toThrow(/wrong last sequence/);
    await poll(() => b.get("y")!.revision === fresh, { timeoutMs: 2000, what: "b to see the fresh revision of y" });
    expect(await b.acquire("y", () => false)).toBe(false);
    expect(await b.acquire("y", () => true)).toBe(true);
    a.stop();
    b.stop();
  });

  it("membership - a silent node is dead to its peers after the staleness window, a leaving one at once", async () => {
    const c = cluster();
    // A staleness window long enough that "at once" cannot be mistaken for it on a loaded machine.
    const opts = { cluster: c, heartbeatMs: 100, staleAfterMs: 2_000, logger };
    const self = (id: string) => ({ id, incarnation: randomUUID(), startedAt: Date.now(), version: "t", pid: 1, host: "h" });
    const a = await Membership.join({ ...opts, nc: await nc(), self: self("a") });
    const b = await Membership.join({ ...opts, nc: await nc(), self: self("b") });
    const c3 = await Membership.join({ ...opts, nc: await nc(), self: self("c") });
    await poll(() => a.liveNodes().join() === "a,b,c", { timeoutMs: 2000, what: "a to see a, b and c live" });
    expect(a.readyNodes()).toEqual([]); // alive, but none has said it places actors yet
    await Promise.all([a.markUp(), b.markUp(), c3.markUp()]);
    await poll(() => a.readyNodes().join() === "a,b,c", { timeoutMs: 2000, what: "a to see a, b and c up" });
    expect(a.selfHealthy()).toBe(true);
    b.stop(); // stops beating without leaving: what a SIGKILLed node looks like
    const stoppedAt = performance.now();
    await poll(() => a.liveNodes().join() === "a,c", { timeoutMs: 8_000, what: "a to see b dead" });
    const detected = performance.now() - stoppedAt;
    expect(detected).toBeGreaterThan(1_500);
    await c3.leave();
    const leftAt = performance.now();
    await poll(() => a.liveNodes().join() === "a", { timeoutMs: 1_900, what: "a to see c gone before the staleness window" });
    const left = performance.now() - leftAt;
    expect(left).toBeLessThan(2_000);
    // the leaving record is deleted right after: the view keeps the dead b only
    await poll(
      () =>
        a
          .view()
          .map((v) => v.record.id)
          .join() === "a,b",
      { timeoutMs: 1000, what: "a's view to hold a and b only" },
    );
    expect(a.view().find((v) => v.record.id === "b")?.live).toBe(false);
    a.stop();
  });

  it("registry - a node whose mirror lacks an entry another node declared takes it from the server at its next declaration (the activation sweep's), so its placement sees it", async () => {
    const c = `reg${Date.now() % 1e6}h`;
    const r1 = await AgentRegistry.open({ nc: await nc(), cluster: c, logger });
    const r2 = await AgentRegistry.open({ nc: await nc(), cluster: c, logger });
    expect(await r1.declare({ id: "pv--k1", type: "counter", template: "pv" })).toBe(true);
    await poll(() => r2.get("pv--k1") !== undefined, { timeoutMs: 2000, what: "r2 to see the declaration" });
    // As if r2's watch had never delivered it (the KV watch delivers each revision once).
    (r2 as unknown as { mirror: { forget(key: string): void } }).mirror.forget("pv--k1");
    expect(r2.get("pv--k1")).toBeUndefined();
    const changes: string[] = [];
    r2.onChange((id, e) => changes.push(`${id}:${e ? "put" : "gone"}`));
    expect(await r2.declare({ id: "pv--k1", type: "counter", template: "pv" })).toBe(false);
    expect(r2.get("pv--k1")).toMatchObject({ id: "pv--k1", type: "counter", desired: "running", template: "pv" });
    expect(changes).toEqual(["pv--k1:put"]);
    r1.stop();
    r2.stop();
  });

  it("registry - declare keeps an existing entry and updates are compare-and-set", async () => {
    const c = cluster();
    const r1 = await AgentRegistry.open({ nc: await nc(), cluster: c, logger });
    const r2 = await AgentRegistry.open({ nc: await nc(), cluster: c, logger });
    expect(await r1.declare({ id: "c1", type: "counter" })).toBe(true);
    await r1.update("c1", (cur) => ({ ...cur, desired: "killed" }));
    await poll(() => r2.get("c1")?.desired === "killed", { timeoutMs: 2000, what: "r2 to see c1 killed" });
    expect(await r2.declare({ id: "c1", type: "counter" })).toBe(false);
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? r1 : r2).update("c1", (cur) => ({ ...cur, capabilities: [...cur.capabilities, `k${i}`] }))),
    );
    await poll(() => r1.get("c1")?.capabilities.length === 10, { timeoutMs: 2000, what: "r1 to see all ten capabilities" });
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
    await poll(() => a.view().length === 3, { timeoutMs: 2000, what: "a's view to hold three nodes" });
    gone.stop();
    await poll(
      () =>
        a
          .view()
          .map((v) => v.record.id)
          .join() === "a,b",
      { timeoutMs: 3000, what: "a's view to hold a and b only" },
    );
    expect(await a.store.get("gone")).toBeUndefined();
    await poll(
      () =>
        b
          .view()
          .map((v) => v.record.id)
          .join() === "a,b",
      { timeoutMs: 3000, what: "b's view to hold a and b only" },
    );
    a.stop();
    b.stop();
  });
});
