import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { expectCountedOnce, probeEnded, probeStartedAt } from "../fixtures/node/probe-turns.js";
import { poll } from "../fixtures/poll.js";

/**
 * A node SIGKILLed during a turn and restarted on its data dir takes its actors' next
 * messages at once. The delivery it held when it died stays ack-pending on the actor's
 * mailbox consumer (`max_ack_pending` 1); unless the restarted node resets the consumer, as
 * a peer taking the actor over does, the next message waits out `ack_wait`. Here ack_wait
 * is 60 s, so a next message that runs within seconds proves the reset.
 */
const ACK_WAIT_MS = 60_000;
// Wide enough for the first case's premise (the node back before its peers call it gone) on
// a loaded machine: at load 20-30 a node process takes well over 6 s from spawn to its
// first heartbeat, and the restart then came after the window (its peer took the actor).
const STALE_AFTER_MS = 20_000;
let tc: TestCluster;

beforeAll(async () => {
  tc = await TestCluster.create({
    nodes: ["n1", "n2"],
    actors: 4,
    ackWaitMs: ACK_WAIT_MS,
    staleAfterMs: STALE_AFTER_MS,
    logLevel: process.env.KOVA_LOG_LEVEL ?? "warn",
  });
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

const task = (to: string, payload: Record<string, unknown>) => createEnvelope({ from: "tester", to, type: "task_delegate", payload });

const startedAt = (env: A2AEnvelope) => probeStartedAt(tc, env);
const ended = (env: A2AEnvelope) => probeEnded(tc, env);

/** The node that hosts the actor now, and its peer. */
async function placed(actor: string): Promise<{ victim: string; peer: string }> {
  const victim = await tc.hostOf(actor, 30_000);
  await poll(async () => (await tc.agentsOn(victim)).find((a) => a.id === actor)?.state === "Idle", {
    timeoutMs: 10_000,
    what: `${actor} idle on ${victim}`,
    retryErrors: true,
  });
  return { victim, peer: victim === "n1" ? "n2" : "n1" };
}

/**
 * Sends `first` (a 1.5 s journaled step) to `actor`, SIGKILLs its node during it, lets
 * `between` run, restarts the node and sends the actor's next message once it answers.
 * @returns how long after the node answered the next message's turn started
 */
async function killDuringTurn(
  actor: string,
  victim: string,
  between: (first: A2AEnvelope) => Promise<void>,
): Promise<{ next: A2AEnvelope; first: A2AEnvelope; ms: number; killedAt: number }> {
  const first = task(actor, { sleepMs: 1_500 });
  await tc.bus.send(first);
  await poll(() => startedAt(first), { timeoutMs: 10_000, what: "the first turn started" });
  tc.kill(victim);
  await tc.procs.get(victim)!.exited;
  // The killed node's delivery is what holds the mailbox: ack-pending, with max_ack_pending 1.
  const consumer = await tc.bus.jsm.consumers.info(tc.bus.subjects.streams.a2a, tc.bus.subjects.consumer(actor));
  expect(consumer.num_ack_pending).toBe(1);
  const killedAt = performance.now();
  await between(first);
  await tc.startNode(victim, 30_000);
  const answered = performance.now();
  const next = task(actor, {});
  await tc.bus.send(next);
  const at = await poll(() => startedAt(next), {
    timeoutMs: 20_000,
    what: `the next message's turn (ack_wait is ${ACK_WAIT_MS} ms: a delivery left ack-pending holds it that long)`,
  });
  await poll(() => ended(next), { timeoutMs: 10_000, what: "the next message's turn ended" });
  return { first, next, ms: at - answered, killedAt };
}

const countedOnce = (actor: string, ids: string[]) => expectCountedOnce(tc, actor, ids);

describe("a node restarted on its data dir after a SIGKILL mid-turn", () => {
  it("restart - inside the staleness window: the node finishes the interrupted turn and takes the actor's next message at once, not after ack_wait", async () => {
    const actor = tc.actorIds[0]!;
    const { victim } = await placed(actor);
    const { first, next, ms, killedAt } = await killDuringTurn(actor, victim, async () => undefined);
    // Peers never saw the node gone: it reclaimed the actor and finished the turn itself.
    const status = await tc.status(victim);
    expect(status.recovery.abandoned).not.toContain(actor);
    expect([...status.recovery.recovering, ...status.recovery.finished]).toContain(actor);
    // ... and kept it while it started: a node not yet up used to hand the actor it had just
    // recovered to its peer by rendezvous over the nodes that were up, then take it back.
    const moves = tc.events.filter((e) => e.at > killedAt && e.runId === actor && e.type.startsWith("agent_") && e.type !== "agent_state");
    expect(moves.map((e) => `${e.type} ${(e.data as { node: string }).node}`)).toEqual([]);
    expect(ended(first)?.node).toBe(victim);
    expect(ended(next)?.node).toBe(victim);
    await countedOnce(actor, [first.id, next.id]);
    console.info(`restart inside the staleness window: the next message ran ${Math.round(ms)} ms after the node answered (1.5 s of it the recovered turn)`);
    expect(ms).toBeLessThan(ACK_WAIT_MS / 4);
  }, 150_000);

  it("restart - outside the staleness window: a peer took the actor over meanwhile; the restarted node gets it back and its next message runs at once", async () => {
    const actor = tc.actorIds[1]!;
    const { victim, peer } = await placed(actor);
    const { first, next, ms } = await killDuringTurn(actor, victim, async (env) => {
      // The peer noticed the node gone, took the actor over and finished the interrupted turn.
      await poll(() => ended(env)?.node === peer, { timeoutMs: STALE_AFTER_MS + 20_000, what: `${peer} to finish the interrupted turn` });
    });
    expect(ended(first)?.node).toBe(peer);
    await countedOnce(actor, [first.id, next.id]);
    console.info(`restart outside the staleness window: the next message ran ${Math.round(ms)} ms after the node answered`);
    expect(ms).toBeLessThan(ACK_WAIT_MS / 4);
  }, 150_000);
});
