import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import type { NodeRecord } from "../../src/cluster/membership.js";
import { ownerOf } from "../../src/node/placement/rendezvous.js";
import { REPO, TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import type { CutMode } from "../fixtures/tcp-proxy.js";

/**
 * A running node cut off from NATS (its process keeps running; only its link goes) in the
 * middle of a turn of many journaled steps, through the TCP proxy it reaches nats-server by
 * (docs/actors.md, "Fencing"; docs/cluster.md, "Fencing"). Every time below is a wall-clock
 * reading on this one machine: the steps' lines come from the node processes, the cut and
 * the heal from this process, the last heartbeat from the record the node wrote.
 */

const STEPPER = join(REPO, "test/fixtures/node/stepper-actor.mjs");
const HEARTBEAT_MS = 250;
const STALE_AFTER_MS = 2000;
/** The node behind the proxy, and its peer. */
const CUT = "k1";
const PEER = "k2";
const STEPS = 24;
const PAUSE_MS = 100;
/** The step of the first turn in flight on CUT when the link is cut. */
const HELD = 3;
/**
 * A step's start line is written just after the fence let it start: with idempotent steps
 * nothing runs in between (a non-idempotent one first writes its intent to the WAL). This
 * covers that and Date.now()'s whole milliseconds.
 */
const LINE_AFTER_FENCE_MS = 5;

/** One line of the stepper's file. */
interface StepLine {
  turn: string;
  i: number;
  phase: "start" | "end";
  node: string;
  at: number;
}

interface StepperState {
  turns: Array<{ turn: string; results: Array<{ i: number; ranOn?: string; unknown?: true }>; finishedOn: string }>;
}

async function lines(file: string, turn?: string): Promise<StepLine[]> {
  const text = await readFile(file, "utf8").catch(() => "");
  const all = text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as StepLine);
  return turn === undefined ? all : all.filter((l) => l.turn === turn);
}

function startsOn(ls: StepLine[], node: string): StepLine[] {
  return ls.filter((l) => l.phase === "start" && l.node === node);
}

/**
 * Why `node` gave up a turn of `actor`, from its log: the errors of its "handler failed"
 * lines (the mailbox's nak of a turn that ended `lease_lost`).
 */
async function turnErrors(tc: TestCluster, node: string, actor: string): Promise<Array<{ type?: string; code?: string; data?: Record<string, unknown> }>> {
  const out = [];
  for (const line of (await tc.nodeLog(node)).split("\n")) {
    if (!line.startsWith("{")) continue;
    const l = JSON.parse(line) as { msg?: string; agentId?: string; err?: { type?: string; code?: string; data?: Record<string, unknown> } };
    if (l.msg === "handler failed; message will be redelivered" && l.agentId === actor && l.err) out.push(l.err);
  }
  return out;
}

/** The turn's entry in the actor's state, read from its host over the fast path, once it is there. */
function finished(tc: TestCluster, actor: string, turn: string, timeoutMs: number): Promise<StepperState["turns"][number]> {
  return poll(async () => (await tc.info<StepperState>(actor)).turns.find((t) => t.turn === turn), {
    timeoutMs,
    everyMs: 200,
    retryErrors: true,
    what: `turn ${turn} of ${actor} finished`,
  });
}

interface Cutoff {
  tc: TestCluster;
  actor: string;
  file: string;
  first: A2AEnvelope;
  cutAt: number;
  /** `heartbeatAt` of CUT's last heartbeat that reached the server before the heal. */
  lastBeatAt: number;
  healAt: number;
  /** The first turn as its finishing host recorded it. */
  done: StepperState["turns"][number];
  /** The second turn, sent after the heal, as CUT recorded it. */
  after: StepperState["turns"][number];
}

/**
 * Two nodes, CUT behind a proxy. A turn of STEPS steps starts on CUT; while its step HELD
 * runs, the proxy cuts CUT off (`mode`), and the step then finishes. Waits for PEER to finish
 * the turn, reads CUT's last stored heartbeat, heals the link, waits until the actor is back
 * on CUT (its owner by rendezvous hashing) and has run a second, short turn there.
 */
async function cutOffMidTurn(tc: TestCluster, mode: CutMode, idempotent: boolean): Promise<Cutoff> {
  const actor = tc.actorIds.find((a) => ownerOf(a, [CUT, PEER]) === CUT);
  if (actor === undefined) throw new Error(`none of ${tc.actorIds.join(", ")} belongs to ${CUT}: declare more actors`);
  await poll(async () => (await tc.hostOf(actor)) === CUT, { timeoutMs: 20_000, retryErrors: true, what: `${actor} hosted on ${CUT}` });
  const file = join(tc.dir, "steps.jsonl");
  const go = join(tc.dir, "go");
  const first = createEnvelope({
    from: "tester",
    to: actor,
    type: "task_delegate",
    payload: { file, steps: STEPS, pauseMs: PAUSE_MS, idempotent, hold: { at: HELD, on: CUT, until: go } },
  });
  await tc.bus.send(first);
  await poll(async () => startsOn(await lines(file, first.id), CUT).some((l) => l.i === HELD), {
    timeoutMs: 15_000,
    everyMs: 20,
    what: `step ${HELD} started on ${CUT}`,
  });

  const cutAt = Date.now();
  tc.proxy(CUT).cut(mode);
  await writeFile(go, "");

  const done = await finished(tc, actor, first.id, 30_000);
  // Read before the heal: a stalled link delivers the heartbeats it held back when it heals.
  const lastBeatAt = (await tc.readAll<NodeRecord>("nodes")).get(CUT)!.heartbeatAt;
  const healAt = Date.now();
  tc.proxy(CUT).heal();

  // Back on CUT: it rejoined, and the peer handed the actor back by rendezvous hashing.
  await poll(async () => (await tc.hostOf(actor)) === CUT, { timeoutMs: 30_000, retryErrors: true, what: `${actor} back on ${CUT} after the heal` });
  const second = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: { file, steps: 2, pauseMs: 10 } });
  await tc.bus.send(second);
  // Turns of one actor run one at a time, and a node resumes the turns its WAL holds before
  // its mailbox delivers: had CUT run the first turn again, it would have done so by now.
  const after = await finished(tc, actor, second.id, 15_000);
  return { tc, actor, file, first, cutAt, lastBeatAt, healAt, done, after };
}

/** What holds for every cut: the fence's bound, the takeover after the window, no overlap, the rejoin. */
async function expectFencedTakeoverAndRejoin(c: Cutoff): Promise<void> {
  const ls = await lines(c.file, c.first.id);
  const onCut = startsOn(ls, CUT);
  const onPeer = startsOn(ls, PEER);
  const shown = `cut at ${c.cutAt}, last heartbeat at ${c.lastBeatAt}, lines ${JSON.stringify(ls.map((l) => [l.i, l.phase, l.node, l.at - c.cutAt]))}`;
  expect(c.lastBeatAt, shown).toBeLessThanOrEqual(c.cutAt);
  // The fence: CUT starts no step once its last heartbeat that reached NATS is
  // stale_after_ms − heartbeat_ms old (so none after cut + stale_after_ms − heartbeat_ms).
  const lastStart = Math.max(...onCut.map((l) => l.at));
  expect(lastStart, shown).toBeLessThan(c.lastBeatAt + STALE_AFTER_MS - HEARTBEAT_MS + LINE_AFTER_FENCE_MS);
  // The peer takes over only once that heartbeat is stale_after_ms old, and after every step
  // CUT started has ended: no step ran on both nodes at once.
  expect(onPeer.length, shown).toBeGreaterThan(0);
  const peerFirst = Math.min(...onPeer.map((l) => l.at));
  console.info(
    `after the cut: ${CUT}'s last heartbeat at ${c.lastBeatAt - c.cutAt} ms, its last step start at ${lastStart - c.cutAt} ms ` +
      `(bound ${c.lastBeatAt + STALE_AFTER_MS - HEARTBEAT_MS - c.cutAt} ms), ${PEER}'s first step at ${peerFirst - c.cutAt} ms, heal at ${c.healAt - c.cutAt} ms`,
  );
  expect(peerFirst, shown).toBeGreaterThanOrEqual(c.lastBeatAt + STALE_AFTER_MS);
  const ends = ls.filter((l) => l.phase === "end" && l.node === CUT);
  expect(ends.length, `every step ${CUT} started ended (${shown})`).toBe(onCut.length);
  expect(Math.max(...ends.map((l) => l.at)), shown).toBeLessThan(peerFirst);
  expect(c.done.finishedOn).toBe(PEER);
  expect(c.done.results.map((r) => r.i)).toEqual([...Array(STEPS).keys()]);

  // After the heal CUT ran no step of the first turn again, the turn is in the actor's
  // state once, the second turn ran on CUT, and the actor is hosted there only.
  expect(
    ls.filter((l) => l.at >= c.healAt),
    shown,
  ).toEqual([]);
  expect(c.after.finishedOn).toBe(CUT);
  const state = await c.tc.info<StepperState>(c.actor);
  expect(state.turns.map((t) => t.turn)).toEqual([c.first.id, c.after.turn]);
  const hosting = await Promise.all([CUT, PEER].map(async (n) => (await c.tc.agentsOn(n)).some((a) => a.id === c.actor)));
  expect(hosting).toEqual([true, false]);
  expect(await c.tc.dlqCount()).toBe(0);
}

function cluster(extraToml?: string): Promise<TestCluster> {
  return TestCluster.create({
    nodes: [CUT, PEER],
    proxied: [CUT],
    actors: 4,
    actorType: "stepper",
    modules: [STEPPER],
    heartbeatMs: HEARTBEAT_MS,
    staleAfterMs: STALE_AFTER_MS,
    logLevel: process.env.KOVA_LOG_LEVEL ?? "info",
    ...(extraToml ? { extraToml } : {}),
  });
}

describe("a running node cut off from NATS", () => {
  // `reset`: the node sees its connection fail and reconnects in vain until the heal;
  // `stall`: it sees nothing but timeouts, and the heal delivers what its link held back
  // (its blocked journal append among them, which the new host's claim fences).
  for (const { mode, how } of [
    { mode: "reset", how: "is reset" },
    { mode: "stall", how: "stalls" },
  ] as const) {
    it(`cluster - a node whose link to NATS ${how} mid-turn starts no later step; its peer takes the actor over after the staleness window and finishes the turn from the step journal (recorded steps reused, the one in flight outcome unknown); healed, the node rejoins without running the turn again`, async () => {
      await using tc = await cluster();
      const c = await cutOffMidTurn(tc, mode, false);
      await expectFencedTakeoverAndRejoin(c);
      const ls = await lines(c.file, c.first.id);
      // Each step ran once: 0..HELD on CUT (HELD in flight at the cut, its result never reached
      // the journal), the rest on the peer; CUT started nothing after the cut.
      const starts = (node: string) => startsOn(ls, node).map((l) => l.i);
      expect(starts(CUT)).toEqual([...Array(HELD + 1).keys()]);
      expect(starts(PEER)).toEqual([...Array(STEPS).keys()].slice(HELD + 1));
      // At or before: step HELD's start line was read before the cut, within the same
      // millisecond at times (Date.now() of two processes, both whole milliseconds).
      expect(startsOn(ls, CUT).every((l) => l.at <= c.cutAt)).toBe(true);
      // The peer reused the results CUT recorded and reported the step in flight as unknown.
      expect(c.done.results).toEqual(
        [...Array(STEPS).keys()].map((i) => (i < HELD ? { i, ranOn: CUT } : i === HELD ? { i, unknown: true } : { i, ranOn: PEER })),
      );
      // The held step's result append reached NATS only after the heal, and the new host's
      // claim of the journal refused it: that ended the old turn on CUT.
      expect(await turnErrors(tc, CUT, c.actor)).toMatchObject([{ type: "JournalFencedError", code: "LEASE_LOST" }]);
      const takeovers = tc.events.filter((e) => e.type === "actor_turn_taken_over" && (e.data as { envelopeId?: string }).envelopeId === c.first.id);
      expect(takeovers.map((e) => (e.data as { nodeId: string }).nodeId)).toEqual([PEER]);
    }, 120_000);
  }

  it("cluster - a node whose link to NATS stalls mid-turn (no reset, journal in its WAL only) keeps running steps until its own heartbeat is stale_after_ms − heartbeat_ms old, and stops before its peer takes the actor over; healed, it rejoins without running the turn again", async () => {
    // Without the journal on NATS a step's writes are local, and a stalled link shows no
    // disconnect: the heartbeat rule of the fence is all that stops the node.
    await using tc = await cluster("[journal]\nnats = false");
    // Idempotent steps, so that nothing runs between a step's fence and its start line.
    const c = await cutOffMidTurn(tc, "stall", true);
    await expectFencedTakeoverAndRejoin(c);
    const ls = await lines(c.file, c.first.id);
    // CUT kept working through the first part of the window, so the fence is what stopped it.
    expect(startsOn(ls, CUT).filter((l) => l.at > c.cutAt).length).toBeGreaterThan(0);
    expect(await turnErrors(tc, CUT, c.actor)).toMatchObject([
      { code: "LEASE_LOST", data: { reason: "this node's heartbeat is stale; peers may have taken over" } },
    ]);
    // The peer, with no journal to resume from, ran the whole turn from the redelivered message.
    expect(startsOn(ls, PEER).map((l) => l.i)).toEqual([...Array(STEPS).keys()]);
    expect(c.done.results).toEqual([...Array(STEPS).keys()].map((i) => ({ i, ranOn: PEER })));
  }, 120_000);
});
