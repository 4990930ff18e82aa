import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

let tc: TestCluster;
const sent = new Map<string, string[]>();

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["n1", "n2"], actors: 8, natsCluster: true, staleAfterMs: 6000, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await poll(async () => {
    const a = await tc.agents();
    return a.size === 8 && [...a.values()].every((r) => r.node !== null && r.state === "Idle");
  }, { timeoutMs: 60_000, what: "initial placement", everyMs: 100, retryErrors: true });
}, 120_000);
afterAll(async () => {
  await tc?.stop();
});

/** Sends one message per actor; a send that fails during a leader election is retried with the same id. */
async function round(): Promise<void> {
  await Promise.all(
    tc.actorIds.map(async (a) => {
      const env = createEnvelope({ from: "tester", to: a, type: "task_delegate", payload: {} });
      await poll(() => tc.bus.send(env), { timeoutMs: 30_000, everyMs: 500, retryErrors: true, what: `the send of ${env.id} to ${a}` });
      sent.set(a, [...(sent.get(a) ?? []), env.id]);
    }),
  );
}

describe("cluster on a 3-server NATS cluster (2 node processes)", () => {
  it("cluster - a NATS server killed under the nodes loses no acknowledged message and runs none twice", async () => {
    await round();
    const before = await tc.agents();
    await tc.natsCluster!.servers[1]!.kill();
    const t0 = performance.now();
    for (let i = 0; i < 3; i++) await round();
    const tSent = performance.now();
    const states = await poll(async () => {
      const all = await Promise.all(tc.actorIds.map(async (a) => [a, await tc.info<ProbeState>(a)] as const));
      return all.every(([a, s]) => s.count >= (sent.get(a)?.length ?? 0)) ? all : undefined;
      // a mailbox whose connection moved to another server resumes after the client's
      // missed-heartbeat detection of its pull (~30 s with the default 30 s expiry)
    }, { timeoutMs: 100_000, what: "every acknowledged message processed", everyMs: 500, retryErrors: true });
    console.info(`NATS server down: sends acked after ${Math.round(tSent - t0)} ms, all processed after ${Math.round(performance.now() - t0)} ms`);
    for (const [a, s] of states) {
      expect(new Set(s.ids).size).toBe(s.ids.length);
      expect([...s.ids].sort()).toEqual([...(sent.get(a) ?? [])].sort());
      expect(s.dupHandled).toBe(0);
    }
    const after = await tc.agents();
    const moved = tc.actorIds.filter((a) => after.get(a)?.node !== before.get(a)?.node);
    console.info(`actors moved while a NATS server was down: ${moved.length}`);
  }, 180_000);
});
