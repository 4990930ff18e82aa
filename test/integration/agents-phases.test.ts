import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { describe, expect, it } from "vitest";
import { PHASE_CHANNEL, timedPhase, type PhaseSpan } from "../../src/core/phases.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { startAgentRig } from "../fixtures/agents/rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

/** Collects the kova:phase spans published while it is subscribed. */
function collectPhases(): { spans: PhaseSpan[] } & Disposable {
  const spans: PhaseSpan[] = [];
  const on = (s: unknown) => spans.push(s as PhaseSpan);
  subscribe(PHASE_CHANNEL, on);
  return { spans, [Symbol.dispose]: () => unsubscribe(PHASE_CHANNEL, on) };
}

describe("phases of a turn (kova:phase diagnostics channel)", () => {
  it("phases - nothing is measured without a subscriber: the work's own promise comes back", async () => {
    const work = Promise.resolve(7);
    expect(timedPhase("x", undefined, () => work)).toBe(work);
    using c = collectPhases();
    const traced = timedPhase("x", "a1", () => work);
    expect(traced).toBe(work);
    await poll(() => c.spans.length === 1, { timeoutMs: 5_000, what: "the span of the traced work" });
    expect(c.spans[0]).toMatchObject({ phase: "x", actorId: "a1" });
    expect(c.spans[0]!.end).toBeGreaterThanOrEqual(c.spans[0]!.start);
  });

  it("phases - a traced agent run reports every phase, in the order the turn protocol requires", async () => {
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("the answer is 42") });
    await using rig = await startAgentRig(nats.url, uniqueCluster("ph"), {
      modelUrl: model.url,
      agents: [{ id: "traced", model: "main", system: "Be brief." }],
    });
    await rig.ask("traced", "warm up"); // buckets, consumer, tokenizer: first-use costs
    using c = collectPhases();
    const result = await rig.ask("traced", "question");
    expect(result.status).toBe("completed");
    // The warm-up's tail (WAL complete, ack) may come after the subscription; this run's
    // message is delivered only after that ack (max_ack_pending 1): its phases start there.
    const delivered = () => c.spans.filter((s) => s.phase === "mailbox.delivered").at(-1)?.start;
    const ours = () => c.spans.filter((s) => s.phase === "a2a.send" || s.start >= (delivered() ?? Number.POSITIVE_INFINITY));
    // The ack follows the reply: wait for it before reading the turn's last phases.
    await poll(() => ours().some((s) => s.phase === "mailbox.ack"), { timeoutMs: 10_000, what: "the mailbox ack of the traced run" });
    const spans = ours();
    const all = (phase: string) => spans.filter((s) => s.phase === phase);
    const one = (phase: string) => {
      const found = all(phase);
      expect(found, phase).toHaveLength(1);
      return found[0]!;
    };
    for (const s of spans.filter((x) => x.phase !== "a2a.send")) expect(s.actorId ?? "traced", s.phase).toBe("traced");
    // One write per run besides the turn's record: the model step's. run:end is not
    // recorded (the commit settles it; a replay publishes its events again under the same ids).
    const modelWrite = one("wal.replace");
    const modelAppend = one("journal.append");

    // Sent, delivered, then the turn's record is written before any step's outcome. (The
    // server may deliver the message before the sender has read its publish ack.)
    expect(one("mailbox.delivered").start).toBeGreaterThanOrEqual(one("a2a.send").start);
    expect(one("wal.append").start).toBeGreaterThanOrEqual(one("turn.start").start);
    expect(modelWrite.start).toBeGreaterThanOrEqual(one("wal.append").end);
    // The model step: run_started, the model switch read and the call overlap; its events are
    // stored before its outcome is written, and that write before the next step runs.
    expect(one("model.call").start).toBeGreaterThanOrEqual(one("step:model:0").start);
    expect(one("event:model_response").start).toBeGreaterThanOrEqual(one("model.call").end);
    expect(modelWrite.start).toBeGreaterThanOrEqual(one("event:model_response").end);
    expect(modelAppend.start).toBeGreaterThanOrEqual(one("event:run_started").end);
    expect(one("step:run:end").start).toBeGreaterThanOrEqual(Math.max(modelWrite.end, modelAppend.end));
    expect(one("kv.settings").end).toBeLessThanOrEqual(one("model.call").start);
    // run_stream_end is stored last, then the checkpoint commits, then the reply and the ack.
    expect(one("event:run_stream_end").start).toBeGreaterThanOrEqual(one("event:run_completed").end);
    expect(one("kv.checkpoint").start).toBeGreaterThanOrEqual(Math.max(one("step:run:end").end, one("event:run_stream_end").end));
    expect(one("reply").start).toBeGreaterThanOrEqual(one("kv.checkpoint").end);
    expect(one("mailbox.ack").start).toBeGreaterThanOrEqual(one("reply").end);
  });
});
