import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import { ownerOf } from "../../src/node/placement/rendezvous.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { expectCountedOnce, probeEnded, probeStartedAt } from "../fixtures/node/probe-turns.js";
import { poll } from "../fixtures/poll.js";

/**
 * What a takeover after a SIGKILL does besides taking the lease:
 * - a start that meets a JetStream request with no answer (here the consumer reset of one
 *   actor on PEER, made to fail once after the client's 5 s by `KOVA_TEST_STALL_TAKEOVER`)
 *   is tried again at once, keeping the lease, instead of releasing it and waiting for a
 *   later placement pass to acquire it again;
 * - an actor taken over from a dead node is handed back to its restarted owner only once
 *   it is idle on the peer and its redelivered message ran there: one move each way.
 * (test/e2e/cluster-hand-back.test.ts: the owner back while the redelivered turn runs.)
 */
const STALE_AFTER_MS = 5_000;
const VICTIM = "n1";
const PEER = "n2";
let tc: TestCluster;
/** Actors owned by VICTIM (rendezvous over both nodes): the first one's takeover start stalls on PEER. */
let owned: string[] = [];

beforeAll(async () => {
  tc = await TestCluster.create({
    nodes: [VICTIM, PEER],
    actors: 8,
    staleAfterMs: STALE_AFTER_MS,
    heartbeatMs: 500,
    ackWaitMs: 30_000,
    start: false,
    logLevel: process.env.KOVA_LOG_LEVEL ?? "info",
  });
  owned = tc.actorIds.filter((a) => ownerOf(a, [VICTIM, PEER]) === VICTIM);
  if (owned.length < 2) throw new Error(`fewer than two of ${tc.actorIds.join(", ")} belong to ${VICTIM}: declare more actors`);
  await Promise.all([tc.startNode(VICTIM), tc.startNode(PEER, 60_000, { env: { KOVA_TEST_STALL_TAKEOVER: owned[0]! } })]);
}, 120_000);
afterAll(async () => {
  await tc?.stop();
});

const task = (to: string, payload: Record<string, unknown>) => createEnvelope({ from: "tester", to, type: "task_delegate", payload });

const startedAt = (env: A2AEnvelope) => probeStartedAt(tc, env);
const ended = (env: A2AEnvelope) => probeEnded(tc, env);

async function idleOn(actor: string, node: string): Promise<void> {
  await poll(async () => (await tc.hostOf(actor, 5_000)) === node, { timeoutMs: 30_000, retryErrors: true, what: `${actor} hosted on ${node}` });
  await poll(async () => (await tc.agentsOn(node)).find((a) => a.id === actor)?.state === "Idle", {
    timeoutMs: 10_000,
    retryErrors: true,
    what: `${actor} idle on ${node}`,
  });
}

/** Sends `actor` a 1.5 s turn and SIGKILLs VICTIM during it. @returns the message and the kill's time */
async function killDuringTurn(actor: string): Promise<{ first: A2AEnvelope; killedAt: number }> {
  const first = task(actor, { sleepMs: 1_500 });
  await tc.bus.send(first);
  await poll(() => startedAt(first), { timeoutMs: 10_000, what: `the turn of ${actor} started` });
  tc.kill(VICTIM);
  const killedAt = performance.now();
  await tc.procs.get(VICTIM)!.exited;
  return { first, killedAt };
}

const countedOnce = (actor: string, ids: string[]) => expectCountedOnce(tc, actor, ids, 15_000);

/** Sends `actor` its next message, expects its turn on `node`, and each of the two messages counted once. */
async function nextRunsOn(actor: string, node: string, first: A2AEnvelope): Promise<void> {
  const next = task(actor, {});
  await tc.bus.send(next);
  await poll(() => ended(next), { timeoutMs: 15_000, what: "the next message's turn ended" });
  expect(ended(next)?.node).toBe(node);
  await countedOnce(actor, [first.id, next.id]);
}

describe("takeover after a SIGKILL", () => {
  it("cluster - a takeover start whose consumer reset gets no JetStream answer is tried again at once, keeping the lease: one acquisition, and the interrupted turn finishes on the peer", async () => {
    const actor = owned[0]!;
    await idleOn(actor, VICTIM);
    const { first, killedAt } = await killDuringTurn(actor);
    await poll(() => ended(first), { timeoutMs: STALE_AFTER_MS + 30_000, what: `${PEER} to finish the interrupted turn` });
    expect(ended(first)?.node).toBe(PEER);
    // The stall happened (else this test proves nothing) ...
    expect(await tc.nodeLog(PEER)).toContain(`test stall: the consumer reset of ${actor}`);
    // ... and cost no lease release: PEER acquired the actor once. Before, the failed start
    // released the lease ("start-failed") and a later pass acquired it a second time.
    expect(tc.placements(actor, killedAt).map((p) => `${p.type} ${p.node}`)).toEqual([`agent_acquired ${PEER}`]);
    await nextRunsOn(actor, PEER, first);
  }, 120_000);

  it("cluster - an actor taken over from a dead node whose owner restarted at once runs its redelivered turn on the peer, then one graceful move hands it back", async () => {
    // Back to the start: VICTIM up again, hosting what it owns.
    await tc.startNode(VICTIM);
    const actor = owned[1]!;
    await idleOn(actor, VICTIM);
    const { first, killedAt } = await killDuringTurn(actor);
    const acquired = await poll(() => tc.placements(actor, killedAt).find((p) => p.type === "agent_acquired" && p.node === PEER), {
      timeoutMs: STALE_AFTER_MS + 20_000,
      what: `${PEER} to take ${actor} over`,
    });
    // The owner comes back as soon as its peer took over: PEER hands the actor back only
    // once it is idle there and its redelivered message ran.
    await tc.startNode(VICTIM);
    await poll(() => ended(first), { timeoutMs: 30_000, what: "the interrupted turn finished" });
    expect(ended(first)?.node).toBe(PEER);
    const released = await poll(() => tc.placements(actor, killedAt).find((p) => p.type === "agent_released"), {
      timeoutMs: STALE_AFTER_MS + 30_000,
      what: `${PEER} to hand ${actor} back`,
    });
    expect(released).toMatchObject({ node: PEER, reason: `rebalance to ${VICTIM}` });
    // After the turn: PEER publishes its turn's end before the stop that precedes the release.
    expect(released.at).toBeGreaterThan(ended(first)!.at);
    expect(released.at).toBeGreaterThan(acquired.at);
    // It converges on the owner by rendezvous hashing, and the actor's next message runs there.
    await idleOn(actor, VICTIM);
    // One move each way (the nodes publish these events on their own, so VICTIM's
    // acquisition can reach this process before PEER's release does).
    expect(
      tc
        .placements(actor, killedAt)
        .map((p) => `${p.type} ${p.node}`)
        .sort(),
    ).toEqual([`agent_acquired ${PEER}`, `agent_released ${PEER}`, `agent_acquired ${VICTIM}`].sort());
    await nextRunsOn(actor, VICTIM, first);
  }, 150_000);
});
