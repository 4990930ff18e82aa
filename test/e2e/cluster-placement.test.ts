import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const NODES = ["n1", "n2", "n3"];
let tc: TestCluster;

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: NODES, actors: 100, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

/** Each actor → the nodes whose `agents` endpoint lists it (what the node processes host). */
async function hostSets(): Promise<Map<string, string[]>> {
  const sets = new Map<string, string[]>();
  for (const n of NODES) for (const a of await tc.agentsOn(n)) sets.set(a.id, [...(sets.get(a.id) ?? []), n]);
  return sets;
}

describe("cluster placement (3 node processes)", () => {
  it("cluster - 100 actors are each hosted exactly once, spread over all nodes, registry and leases agree", async () => {
    const agents = await poll(
      async () => {
        const a = await tc.agents();
        return a.size === 100 && [...a.values()].every((r) => r.node !== null && r.state === "Idle") ? a : undefined;
      },
      { timeoutMs: 30_000, what: "all actors Idle on a node", everyMs: 100, retryErrors: true },
    );
    // Every actor placed somewhere; then each one's set of hosting nodes must be exactly
    // the one node the registry and its lease name.
    const hosts = await poll(
      async () => {
        const sets = await hostSets();
        return tc.actorIds.every((id) => sets.has(id)) ? sets : undefined;
      },
      { timeoutMs: 10_000, what: "every actor listed by a node's agents endpoint", everyMs: 100, retryErrors: true },
    );
    const leases = await tc.leases();
    for (const id of tc.actorIds) {
      const node = agents.get(id)!.node!;
      expect(hosts.get(id), `nodes hosting ${id}`).toEqual([node]);
      expect(leases.get(id)?.node).toBe(node);
    }
    expect([...hosts.keys()].sort(), "no actor hosted that was not declared").toEqual([...tc.actorIds].sort());
    for (const n of NODES) {
      expect([...hosts.values()].filter((s) => s[0] === n).length, `actors on ${n}`).toBeGreaterThan(10);
    }
  }, 60000);
});
