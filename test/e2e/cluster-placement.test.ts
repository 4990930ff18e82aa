import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestCluster, waitUntil } from "../fixtures/node/cluster-harness.js";

let tc: TestCluster;

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["n1", "n2", "n3"], actors: 100, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

describe("cluster placement (3 node processes)", () => {
  it("cluster - 100 actors are each hosted exactly once, spread over all nodes, registry and leases agree", async () => {
    const agents = await waitUntil(async () => {
      const a = await tc.agents();
      return a.size === 100 && [...a.values()].every((r) => r.node !== null && r.state === "Idle") ? a : undefined;
    }, 30_000, "all actors Idle on a node");
    const leases = await tc.leases();
    const lists = await Promise.all(["n1", "n2", "n3"].map(async (n) => ({ n, ids: (await tc.status(n)).actors.hosted })));
    const hostedBy = new Map<string, string[]>();
    for (const n of ["n1", "n2", "n3"]) {
      const { actors } = await tc.status(n);
      expect(actors.hosted).toBeGreaterThan(10);
    }
    for (const id of tc.actorIds) {
      const node = agents.get(id)!.node!;
      expect(leases.get(id)?.node).toBe(node);
      hostedBy.set(node, [...(hostedBy.get(node) ?? []), id]);
    }
    expect(lists.reduce((s, l) => s + l.ids, 0)).toBe(100);
    expect([...hostedBy.keys()].sort()).toEqual(["n1", "n2", "n3"]);
  }, 60000);
});
