import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

let tc: TestCluster;
const sent = new Map<string, string[]>();

const ACTORS = 9;

beforeAll(async () => {
  tc = await TestCluster.create({
    nodes: ["n1", "n2", "n3"],
    actors: ACTORS,
    natsCluster: true,
    staleAfterMs: 6000,
    logLevel: process.env.KOVA_LOG_LEVEL ?? "warn",
  });
  await poll(
    async () => {
      const a = await tc.agents();
      return a.size === ACTORS && [...a.values()].every((r) => r.node !== null && r.state === "Idle");
    },
    { timeoutMs: 60_000, what: "initial placement", everyMs: 100, retryErrors: true },
  );
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

/**
 * Samples, until stopped, whether each actor answers on its fast rpc path (it is hosted
 * by a running node), and returns the longest time any actor went unanswered.
 */
function watchHosting(): { stop(): Promise<number> } {
  let running = true;
  const since = new Map<string, number>();
  let longest = 0;
  const loop = (async () => {
    while (running) {
      const t = performance.now();
      await Promise.all(
        tc.actorIds.map(async (a) => {
          const ok = await tc.bus.request(a, "info_request", {}, { timeoutMs: 2000 }).then(
            () => true,
            () => false,
          );
          const start = since.get(a);
          if (!ok && start === undefined) since.set(a, t);
          if (ok && start !== undefined) {
            longest = Math.max(longest, performance.now() - start);
            since.delete(a);
          }
        }),
      );
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      since.forEach((start, a) => {
        longest = Math.max(longest, performance.now() - start);
        since.delete(a);
      });
      return Math.round(longest);
    },
  };
}

describe("cluster on a 3-server NATS cluster (3 node processes)", () => {
  it("cluster - a NATS server killed under the nodes: every actor is hosted again within 15 s, no acknowledged message is lost or dead-lettered, none runs twice", async () => {
    await round();
    const before = await tc.agents();
    const hosting = watchHosting();
    await tc.natsCluster!.servers[1]!.kill();
    const t0 = performance.now();
    for (let i = 0; i < 3; i++) await round();
    const tSent = performance.now();
    const states = await tc.processed(sent, 100_000).finally(() => hosting.stop());
    const unhostedMs = await hosting.stop();
    console.info(
      `NATS server down: sends acked after ${Math.round(tSent - t0)} ms, all processed after ${Math.round(performance.now() - t0)} ms, longest an actor went unhosted ${unhostedMs} ms`,
    );
    expect(unhostedMs, "longest time an actor was not hosted").toBeLessThan(15_000);
    for (const [a, s] of states) {
      expect(new Set(s.ids).size).toBe(s.ids.length);
      expect([...s.ids].sort()).toEqual([...(sent.get(a) ?? [])].sort());
      expect(s.dupHandled).toBe(0);
    }
    expect(await tc.dlqCount(), "messages dead-lettered during the NATS failover").toBe(0);
    const after = await tc.agents();
    const moved = tc.actorIds.filter((a) => after.get(a)?.node !== before.get(a)?.node);
    console.info(`actors moved while a NATS server was down: ${moved.length}`);
  }, 180_000);
});
