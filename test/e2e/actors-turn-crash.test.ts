import { existsSync, readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createInbox } from "@nats-io/transport-node";
import { beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { createEnvelope, decodeEnvelope, encodeEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import type { CounterState } from "../../src/actors/index.js";
import { derivedId } from "../../src/core/ids.js";
import { REPO, TestCluster } from "../fixtures/node/cluster-harness.js";
import { waitForConsumer } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

/**
 * Real node processes SIGKILLed inside a turn's crash windows (`KOVA_TEST_CRASH_AT`, see
 * src/actors/crash-points.ts) and at a blocked step, then restarted or taken over.
 */
const TURN_ACTORS = join(REPO, "test/fixtures/node/turn-actors.mjs");

beforeAll(() => {
  if (!existsSync(join(REPO, "dist/actors/index.js"))) throw new Error("run `npm run build` first: the nodes import dist/");
});

function actorsToml(actors: Array<[string, string]>): string {
  return actors.map(([id, type]) => `[[actors]]\nid = "${id}"\ntype = "${type}"`).join("\n");
}

async function cluster(nodes: string[], actors: Array<[string, string]>, start = false): Promise<TestCluster> {
  return TestCluster.create({
    nodes,
    start,
    modules: [TURN_ACTORS],
    extraToml: actorsToml(actors),
    logLevel: process.env.KOVA_LOG_LEVEL ?? "warn",
  });
}

/** Starts `id` with a crash hook; resolves once its actors are placed and idle. */
async function startWith(tc: TestCluster, id: string, ids: string[], crashAt?: string): Promise<void> {
  await tc.startNode(id, 30_000, crashAt ? { env: { KOVA_TEST_CRASH_AT: crashAt } } : {});
  await poll(
    async () => {
      const agents = await tc.agents();
      return ids.every((a) => agents.get(a)?.node === id && agents.get(a)?.state === "Idle");
    },
    { timeoutMs: 30_000, what: `${ids.join(", ")} hosted on ${id}`, everyMs: 100, retryErrors: true },
  );
}

async function killedByHook(tc: TestCluster, id: string): Promise<void> {
  const exit = await tc.procs.get(id)!.exited;
  expect(exit.signal, `node ${id} should have SIGKILLed itself at the crash point`).toBe("SIGKILL");
}

describe("turns across SIGKILL at their crash points (node processes)", () => {
  it("send - a sender killed right after JetStream acked its send resends under the same id on restart: the counter counts the message once", async () => {
    await using tc = await cluster(
      ["n1"],
      [
        ["r1", "relay"],
        ["c1", "counter"],
      ],
    );
    await startWith(tc, "n1", ["r1", "c1"], "after-publish-ack@r1");
    const order = createEnvelope({ from: "tester", to: "r1", type: "task_delegate", payload: { to: "c1" } });
    await tc.bus.send(order);
    await killedByHook(tc, "n1");

    await startWith(tc, "n1", ["r1", "c1"]);
    const sentId = derivedId("uuid", "r1", order.id, "send:0");
    const counted = await poll(
      async () => {
        const c = await tc.info<CounterState>("c1");
        return c.count >= 1 ? c : undefined;
      },
      { timeoutMs: 20_000, what: "the relayed message counted", retryErrors: true },
    );
    const relay = await poll(
      async () => {
        const r = await tc.info<{ sent: string[] }>("r1");
        return r.sent.length >= 1 ? r : undefined;
      },
      { timeoutMs: 20_000, what: "the relay's turn committed", retryErrors: true },
    );
    expect(relay.sent).toEqual([sentId]);
    // Both messages are acknowledged: nothing more can arrive at the counter.
    await waitForConsumer(tc.bus, "r1", "to ack the order", (ci) => ci.num_pending === 0 && ci.num_ack_pending === 0);
    await waitForConsumer(tc.bus, "c1", "to ack every delivery", (ci) => ci.num_pending === 0 && ci.num_ack_pending === 0);
    expect(await tc.info<CounterState>("c1")).toMatchObject({ count: 1, ids: [sentId] });
    expect(counted.ids).toEqual([sentId]);
  }, 120_000);

  it("reply - killed after the checkpoint, after the reply and after the WAL completion, a restarted node leaves the asker exactly one reply per question", async () => {
    const points = ["after-checkpoint", "after-reply", "after-wal-complete"] as const;
    const ids = points.map((_, i) => `a${i + 1}`);
    await using tc = await cluster(
      ["n1"],
      ids.map((id) => [id, "answerer"]),
    );
    const replies = new Map<string, A2AEnvelope[]>();
    const asked = new Map<string, A2AEnvelope>();
    for (const [i, point] of points.entries()) {
      const actor = ids[i]!;
      await startWith(tc, "n1", ids, `${point}@${actor}`);
      if (i > 0) await answered(ids[i - 1]!); // the previous crash's turn recovered on this start
      const inbox = createInbox();
      const sub = tc.nc.subscribe(inbox);
      const got: A2AEnvelope[] = [];
      replies.set(actor, got);
      void (async () => {
        for await (const m of sub) got.push(decodeEnvelope(m.data, m.headers));
      })();
      const question = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: point, replyTo: inbox });
      asked.set(actor, question);
      await tc.bus.send(question);
      await killedByHook(tc, "n1");
    }
    await startWith(tc, "n1", ids);
    await answered(ids.at(-1)!);

    async function answered(actor: string): Promise<void> {
      await poll(() => (replies.get(actor)?.length ?? 0) > 0, { timeoutMs: 20_000, what: `a reply from ${actor}` });
      // Settled: the question is acknowledged, so no later resend can come.
      await waitForConsumer(tc.bus, actor, "to ack the question", (ci) => ci.num_pending === 0 && ci.num_ack_pending === 0);
    }

    for (const [i, actor] of ids.entries()) {
      const got = replies.get(actor)!;
      const question = asked.get(actor)!;
      // A resend after a crash is the same reply (same id); an asker takes the first.
      expect(new Set(got.map((r) => r.id)), `${actor} (${points[i]})`).toEqual(new Set([derivedId("uuid", actor, question.id, "reply")]));
      expect(got[0]).toMatchObject({ type: "result_notify", correlationId: question.id, payload: { answer: `answer to ${points[i]}`, turns: 1 } });
      expect(await tc.info<{ turns: number }>(actor)).toEqual({ turns: 1 });
    }
  }, 180_000);

  it("window - killed right after a busy actor's window was stored, before the checkpoint that names it: restarted, the turn runs once and each of the last 100 ids is still a duplicate", async () => {
    await using tc = await TestCluster.create({
      nodes: ["n1"],
      start: false,
      modules: [TURN_ACTORS],
      extraToml: `${actorsToml([["w1", "answerer"]])}
[checkpoint]
processed_window = 100`,
      logLevel: process.env.KOVA_LOG_LEVEL ?? "warn",
    });
    const turns = async (n: number) =>
      poll(async () => (await tc.info<{ turns: number }>("w1")).turns === n, { timeoutMs: 30_000, what: `w1 to have run ${n} turns`, retryErrors: true });
    const sent = Array.from({ length: 128 }, (_, i) => createEnvelope({ from: "tester", to: "w1", type: "task_delegate", payload: i }));
    await startWith(tc, "n1", ["w1"]);
    for (const env of sent) await tc.bus.send(env);
    await turns(128);
    // Restarted with the hook: the first turn after a load stores the window (of 128), and the node dies before its checkpoint.
    tc.kill("n1");
    await tc.procs.get("n1")!.exited;
    await startWith(tc, "n1", ["w1"], "after-window@w1");
    const next = createEnvelope({ from: "tester", to: "w1", type: "task_delegate", payload: 128 });
    sent.push(next);
    await tc.bus.send(next);
    await killedByHook(tc, "n1");
    const kv = await new Kvm(tc.nc).open(`kova_${tc.cluster}_checkpoints`);
    expect((await kv.get("w1.ids"))?.json<{ revision: number }>().revision).toBe(128);
    expect((await kv.get("w1"))?.json<{ revision: number; base: number }>()).toMatchObject({ revision: 128, base: 64 });

    await startWith(tc, "n1", ["w1"]);
    await turns(129);
    // The same envelopes again under other Nats-Msg-Ids (past JetStream's duplicate window), then a new one.
    for (const old of [sent[30]!, sent[128]!]) await tc.bus.js.publish(tc.bus.subjects.a2a("w1"), encodeEnvelope(old, "msgpack"), { msgID: `again-${old.id}` });
    await tc.bus.send(createEnvelope({ from: "tester", to: "w1", type: "task_delegate", payload: 129 }));
    await waitForConsumer(tc.bus, "w1", "to ack every delivery", (ci) => ci.num_pending === 0 && ci.num_ack_pending === 0);
    expect(await tc.info<{ turns: number }>("w1")).toEqual({ turns: 130 });
    expect((await kv.get("w1"))?.json<{ revision: number }>().revision).toBe(130);
  }, 180_000);

  it("takeover - a node killed inside a step that appended a line: the new host reports outcome unknown (one line), re-runs the idempotent step, reuses a recorded result", async () => {
    const cases = [
      ["x1", "charge"],
      ["x2", "idempotent"],
      ["x3", "recorded"],
    ] as const;
    await using tc = await cluster(
      ["n1", "n2"],
      cases.map(([id]) => [id, "appender"]),
    );
    await startWith(
      tc,
      "n1",
      cases.map(([id]) => id),
    );
    const file = (id: string) => join(tc.dir, `${id}.lines`);
    const lines = (path: string) => (existsSync(path) ? readFileSync(path, "utf8").trim().split("\n").filter(Boolean) : []);
    for (const [id, mode] of cases) {
      await writeFile(file(id), "");
      await tc.bus.send(createEnvelope({ from: "tester", to: id, type: "task_delegate", payload: { file: file(id), mode, blockOn: "n1" } }));
    }
    // Each turn is blocked on n1 where the test wants it: inside `append`, or in `wait` after it.
    await poll(() => lines(file("x1")).length === 1 && lines(file("x2")).length === 1 && lines(`${file("x3")}.wait`).length === 1, {
      timeoutMs: 20_000,
      what: "the three turns blocked on n1",
    });
    tc.kill("n1");
    await tc.procs.get("n1")!.exited;
    await tc.startNode("n2", 30_000);

    const results = await poll(
      async () => {
        const all = await Promise.all(cases.map(async ([id]) => [id, (await tc.info<{ results: Array<Record<string, unknown>> }>(id)).results] as const));
        return all.every(([, r]) => r.length === 1) ? new Map(all) : undefined;
      },
      { timeoutMs: 40_000, what: "the three turns finished on n2", everyMs: 250, retryErrors: true },
    );
    expect(results.get("x1")).toEqual([expect.objectContaining({ outcome: "outcome unknown", finishedOn: "n2" })]);
    expect(lines(file("x1"))).toEqual(["n1"]);
    expect(results.get("x2")).toEqual([expect.objectContaining({ outcome: "appended on n2", finishedOn: "n2" })]);
    expect(lines(file("x2"))).toEqual(["n1", "n2"]);
    expect(results.get("x3")).toEqual([expect.objectContaining({ outcome: "appended on n1", finishedOn: "n2" })]);
    expect(lines(file("x3"))).toEqual(["n1"]);
    expect(lines(`${file("x3")}.wait`)).toEqual(["n1", "n2"]);
    expect(await tc.dlqCount()).toBe(0);
  }, 180_000);
});
