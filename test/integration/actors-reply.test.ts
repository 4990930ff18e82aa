import { describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope, type Bus } from "../../src/bus/index.js";
import { ActorHost, ActorTypeRegistry, defineActor } from "../../src/actors/index.js";
import { parseTurnRecord } from "../../src/actors/turn-record.js";
import { derivedId } from "../../src/core/ids.js";
import { createLogger } from "../../src/core/logger.js";
import { Wal } from "../../src/wal/index.js";
import { actorEvents, fileServer, uniqueCluster } from "../fixtures/actors/helpers.js";
import { connectBus, waitForConsumer } from "../fixtures/bus/helpers.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();
const silent = createLogger({ level: "silent" });

/**
 * The bus with `respond` failing while `down(original)` says so, as a publish to a closed
 * connection does (a plain error: not a NATS timeout, so the mailbox naks instead of
 * running the handler again in place). Every other call goes to the real bus.
 */
function flakyReplies(bus: Bus, down: (original: A2AEnvelope) => boolean): { bus: Bus; failures: () => number } {
  let failures = 0;
  const proxy = new Proxy(bus, {
    get(target, prop) {
      if (prop === "respond") {
        return async (original: A2AEnvelope, result: unknown, opts?: Parameters<Bus["respond"]>[2]) => {
          if (down(original)) {
            failures++;
            throw new Error(`injected: the reply to ${original.id} could not be published`);
          }
          return target.respond(original, result, opts);
        };
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { bus: proxy, failures: () => failures };
}

interface Tally {
  n: number;
}

/** Each turn counts its handler run and its one non-idempotent step, and answers its running total. */
function tallyActor(runs: string[], charged: string[]) {
  return defineActor<Tally>({
    type: "tally",
    initialState: () => ({ n: 0 }),
    handlers: {
      task_delegate: async (ctx) => {
        runs.push(ctx.message.id);
        await ctx.step("charge", () => void charged.push(ctx.message.id));
        ctx.state.n++;
        return `answer ${ctx.state.n} to ${String(ctx.message.payload)}`;
      },
    },
    rpc: { info_request: (_env, s) => s },
  });
}

const task = (to: string, payload: unknown) => createEnvelope({ from: "tester", to, type: "task_delegate", payload });

describe("replies that cannot be published", () => {
  it("reply - a reply publish that fails after the checkpoint keeps the turn PENDING, naks the message, and its redelivery answers the asker without running the handler again, before the next message", async () => {
    const cluster = uniqueCluster("rp");
    await using tmp = await tempDir("kova-actors-reply-");
    await using real = await connectBus(server.url, cluster);
    await using asker = await connectBus(server.url, cluster);
    const wal = await Wal.open({ dir: tmp.path, sync: "normal", ringBits: 8 });
    await using _wal = defer(() => wal.close());
    const question = task("r1", "q");
    const next = task("r1", "next");
    // Handler runs (their message ids) and reply attempts, in order.
    const timeline: string[] = [];
    const charged: string[] = [];
    // What the WAL holds for the actor when the redelivery tries the reply again.
    let pendingAtRetry: unknown[] | undefined;
    const flaky = flakyReplies(real, (original) => {
      if (original.id !== question.id) return false;
      const fail = flaky.failures() === 0;
      timeline.push(fail ? "reply failed" : "reply sent");
      if (!fail) pendingAtRetry ??= wal.pendingFor("r1").map((r) => parseTurnRecord(r.payload));
      return fail;
    });
    const host = new ActorHost({
      bus: flaky.bus,
      wal,
      nodeId: "n1",
      types: new ActorTypeRegistry([tallyActor(timeline, charged)]),
      logger: silent,
      mailbox: { ackWaitMs: 10_000, backoffMs: [300] },
      // The redelivery answers here, long before the retry of the owed reply would.
      replyRetry: { baseMs: 20_000 },
    });
    await using _host = defer(() => host.stopAll());
    await host.start("r1", "tally");

    const asked = asker.ask<string>(question, { timeoutMs: 20_000 });
    // A message sent while the question waits out its nak delay: max_ack_pending 1 keeps
    // the nak'ed question ack-pending, so this one is not delivered before it.
    await poll(() => flaky.failures() === 1, { timeoutMs: 10_000, what: "the first reply to fail" });
    await real.send(next);
    const reply = await asked;
    expect(reply.payload).toBe("answer 1 to q");
    await poll(() => timeline.includes(next.id), { timeoutMs: 10_000, what: "the next message handled" });
    expect(timeline).toEqual([question.id, "reply failed", "reply sent", next.id]);
    // Between the failed reply and the redelivery the turn's record stayed PENDING, marked committed.
    expect(pendingAtRetry).toEqual([expect.objectContaining({ envelope: expect.objectContaining({ id: question.id }), committed: true })]);
    // The message was nak'ed and delivered a second time; the handler and its step ran once.
    const ci = await waitForConsumer(real, "r1", "to have acked both messages", (c) => c.num_ack_pending === 0 && c.num_pending === 0);
    expect(ci.delivered.consumer_seq).toBe(3);
    expect(charged).toEqual([question.id, next.id]);
    await poll(() => wal.pendingFor("r1").length === 0, { timeoutMs: 5_000, what: "the turns' records completed" });
    expect(await real.request<Tally>("r1", "info_request", null)).toEqual({ n: 2 });
  }, 40_000);
});

/**
 * A turn committed, its reply failing on every delivery until the message used up
 * max_deliver; then more turns than the processed window (2) went through, none of them
 * asked (so the checkpoint's last reply is no longer the question's). Without the DLQ mover
 * (an advisory lost, a move that failed) the message stays in the stream; with it
 * (`mover`), it is moved to the DLQ when it runs out of deliveries. The first host's replies
 * to the question fail until `replyUp()`.
 */
async function parkedPastTheWindow(cluster: string, dir: string, opts: { mover?: boolean } = {}) {
  const real = await connectBus(server.url, cluster);
  const mover = opts.mover ? real.startDlqMover() : undefined;
  const wal = await Wal.open({ dir, sync: "normal", ringBits: 8 });
  const wals = [wal];
  const question = task("p1", "q");
  const later = [1, 2, 3].map((i) => task("p1", i));
  const runs: string[] = [];
  const charged: string[] = [];
  let replyDown = true;
  const flaky = flakyReplies(real, (original) => replyDown && original.id === question.id);
  const newHost = (bus: Bus, hostWal: Wal, nodeId: string) =>
    new ActorHost({
      bus,
      wal: hostWal,
      nodeId,
      types: new ActorTypeRegistry([tallyActor(runs, charged)]),
      logger: silent,
      processedWindow: 2,
      mailbox: { ackWaitMs: 10_000, backoffMs: [200], maxDeliver: 2 },
      replyRetry: { baseMs: 100, maxMs: 400 },
    });
  const host = newHost(flaky.bus, wal, "n1");
  const hosts = [host];
  await host.start("p1", "tally");
  const answer = real.ask<string>(question, { timeoutMs: 30_000 });
  answer.catch(() => undefined);
  // Both deliveries failed, or one did and a retry of the owed reply: either way the later
  // messages wait behind the question until it has used up max_deliver.
  await poll(() => flaky.failures() >= 2, { timeoutMs: 10_000, what: "the reply to fail twice" });
  for (const e of later) await real.send(e);
  await poll(async () => (await real.request<Tally>("p1", "info_request", null)).n === 4, {
    timeoutMs: 15_000,
    what: "the later messages handled past the exhausted one",
    retryErrors: true,
  });
  return {
    real,
    wal,
    question,
    /** The first host's replies go out from now on. */
    replyUp() {
      replyDown = false;
    },
    /** Stops the host and starts the actor on a new one over the same WAL, as a restarted node does. */
    async restart() {
      await host.stopAll();
      const again = newHost(real, wal, "n1");
      hosts.push(again);
      await again.start("p1", "tally");
    },
    /** The actor moves to another node with a WAL of its own in `dir`; this host's record of the question stays PENDING in its WAL. */
    async moveTo(otherDir: string): Promise<Wal> {
      await host.stopAll();
      const other = await Wal.open({ dir: otherDir, sync: "normal", ringBits: 8 });
      wals.push(other);
      const next = newHost(real, other, "n2");
      hosts.push(next);
      await next.start("p1", "tally");
      return other;
    },
    /**
     * The asker got the saved reply, under the id every resend carries; the question's
     * handler and step ran once, before the later turns; `hostWal` holds no PENDING record.
     */
    async expectSettled(hostWal: Wal = wal) {
      const reply = await answer;
      expect(reply.payload).toBe("answer 1 to q");
      expect(reply.id).toBe(derivedId("uuid", "p1", question.id, "reply"));
      expect(runs).toEqual([question.id, ...later.map((e) => e.id)]);
      expect(charged).toEqual(runs);
      await poll(() => hostWal.pendingFor("p1").length === 0, { timeoutMs: 5_000, what: "the parked record completed" });
      expect(await real.request<Tally>("p1", "info_request", null)).toEqual({ n: 4 });
    },
    /** How many hosts have hosted the actor (a restart or a move makes one more). */
    hosts: () => hosts.length,
    async [Symbol.asyncDispose]() {
      for (const h of hosts) await h.stopAll().catch(() => undefined);
      await mover?.stop();
      await real.close().catch(() => undefined);
      for (const w of wals) await w.close().catch(() => undefined);
    },
  };
}

/** Waits until the DLQ mover has moved the question (it used up max_deliver). */
async function deadLettered(real: Bus, question: A2AEnvelope): Promise<void> {
  await poll(async () => (await real.listDlq({ reason: "max_deliver" })).some((d) => d.headers["Kova-Dlq-Msg-Id"] === question.id), {
    timeoutMs: 10_000,
    what: "the question moved to the DLQ by the mover",
  });
}

describe("parked committed turns past the processed window", () => {
  it("parked - a committed turn whose reply failed until max_deliver, overtaken by more turns than the window, is a duplicate when its consumer is re-created: the saved reply is sent, the handler not run again", async () => {
    await using tmp = await tempDir("kova-actors-parked-");
    await using p = await parkedPastTheWindow(uniqueCluster("pk"), tmp.path);
    p.replyUp();
    // The consumer is re-created (deleted by an operator, lost with a NATS server): the
    // exhausted message is delivered again, after three later turns moved the window past it.
    await p.real.jsm.consumers.delete(p.real.subjects.streams.a2a, p.real.subjects.consumer("p1"));
    await p.expectSettled();
  }, 60_000);

  it("parked - a restart between the park and the redelivery, after more turns than the window, settles the committed turn from its WAL record: the saved reply is sent, the handler not run again", async () => {
    await using tmp = await tempDir("kova-actors-parked-");
    await using p = await parkedPastTheWindow(uniqueCluster("pr"), tmp.path);
    // The record is in the WAL, marked committed with its reply; the in-memory park goes with the host.
    expect(p.wal.pendingFor("p1").map((r) => parseTurnRecord(r.payload))).toEqual([
      expect.objectContaining({ committed: true, reply: expect.objectContaining({ for: p.question.id, result: "answer 1 to q" }) }),
    ]);
    await p.restart();
    await p.expectSettled();
  }, 60_000);

  it("parked - a committed turn whose message the DLQ mover took after max_deliver is settled at the next start, not dropped: the saved reply is sent, the handler not run again", async () => {
    await using tmp = await tempDir("kova-actors-parked-");
    await using p = await parkedPastTheWindow(uniqueCluster("pm"), tmp.path, { mover: true });
    await deadLettered(p.real, p.question);
    await using watch = actorEvents(p.real);
    await p.restart();
    await p.expectSettled();
    // Actor events go out in order: a drop would come before the end of the recovery.
    await poll(() => watch.events.some((e) => e.type === "actor_recovered"), { timeoutMs: 5_000, what: "the actor_recovered event" });
    expect(watch.events.map((e) => e.type)).not.toContain("actor_turn_dropped");
  }, 60_000);

  it("parked - a committed turn whose reply failed until the DLQ mover took its message is answered by its host's retry, without a restart: the saved reply is sent, the record completed, the handler not run again", async () => {
    await using tmp = await tempDir("kova-actors-parked-");
    await using p = await parkedPastTheWindow(uniqueCluster("pt"), tmp.path, { mover: true });
    await deadLettered(p.real, p.question);
    // Nothing will deliver the question again: only the host's retry of the owed reply can answer it.
    p.replyUp();
    await p.expectSettled();
    expect(p.hosts()).toBe(1);
  }, 60_000);

  it("parked - a committed turn whose reply failed until the DLQ mover took its message is answered by the actor's next host when the actor moves: the checkpoint owes the reply, the handler is not run again", async () => {
    await using tmp = await tempDir("kova-actors-parked-");
    await using otherTmp = await tempDir("kova-actors-parked-n2-");
    await using p = await parkedPastTheWindow(uniqueCluster("pv"), tmp.path, { mover: true });
    await deadLettered(p.real, p.question);
    // The first host never gets the reply out; the second reads it, with its address, from the checkpoint.
    const other = await p.moveTo(otherTmp.path);
    await p.expectSettled(other);
    // The first node's record stays PENDING, marked committed: its next start abandons it (the actor moved).
    expect(p.wal.pendingFor("p1").map((r) => parseTurnRecord(r.payload))).toEqual([expect.objectContaining({ committed: true })]);
  }, 60_000);
});
