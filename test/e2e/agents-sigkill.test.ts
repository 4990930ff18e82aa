import { describe, expect, it } from "vitest";
import { askAgent, type AgentResult } from "../../src/agents/index.js";
import type { KovaEvent } from "../../src/bus/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedModelServer } from "../../src/testing/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const AGENT = [`[[agents]]`, `id = "worker"`, `model = "main"`, `system = "Work it out."`, `tools = ["calculator"]`].join("\n");

/**
 * A model that answers a 3-call tool loop: two tool calls, then the final answer. The first
 * request for the final answer hangs (the node is killed while it is in flight), so the
 * kill lands after the 2nd model response and both tool results are recorded.
 */
async function loopModel(): Promise<ScriptedModelServer & { hung: () => boolean }> {
  let hung = false;
  const server = await startScriptedModelServer({
    handler: (req) => {
      const results = req.messages.filter((m) => m.role === "tool").length;
      if (results === 0) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "20+1" } }]);
      if (results === 1) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "21*2" } }]);
      if (!hung) {
        hung = true;
        return scriptedReply.text("too late", { latencyMs: 120_000 });
      }
      return scriptedReply.text("It is 42.");
    },
  });
  return Object.assign(server, { hung: () => hung });
}

function modelToml(url: string): string {
  return [`[models.main]`, `base_url = "${url}"`, `model = "gpt-4o-mini"`, AGENT].join("\n");
}

/** What the EVENTS stream stored for one run (live subscribers also see what the stream dropped as a duplicate). */
async function storedEvents(tc: TestCluster, runId: string): Promise<KovaEvent[]> {
  const consumer = await tc.bus.js.consumers.get(tc.bus.subjects.streams.events, { filter_subjects: tc.bus.subjects.events(runId, runId) });
  const out: KovaEvent[] = [];
  for await (const m of await consumer.fetch({ max_messages: 1_000, expires: 3_000 })) {
    out.push(m.json<KovaEvent>());
    if (m.info.pending === 0) break;
  }
  return out;
}

describe("agent runs across SIGKILL (node processes, scripted model over HTTP)", () => {
  it("sigkill - a node killed after the 2nd model response of a tool loop finishes the run on restart, with exactly the remaining model request and no tool re-run", async () => {
    await using model = await loopModel();
    await using tc = await TestCluster.create({ nodes: ["n1"], extraToml: modelToml(model.url) });
    await tc.hostOf("worker");
    const pending: Promise<AgentResult> = askAgent(tc.bus, "worker", "What is (20+1)*2?", { runId: "kill-run", timeoutMs: 60_000 });
    await poll(() => model.hung() && model.requests.length === 3, { timeoutMs: 20_000, what: "the 3rd model request in flight" });
    tc.kill("n1");
    await tc.procs.get("n1")!.exited;
    await tc.startNode("n1");
    const result = await pending;
    expect(result).toMatchObject({ status: "completed", output: "It is 42.", runId: "kill-run" });
    expect(model.requests).toHaveLength(4);
    // The context of the repeated call is rebuilt from the journal: the same messages, the tool results reused.
    expect(model.requests[3]!.messages).toEqual(model.requests[2]!.messages);
    const runEvents = tc.events.filter((e) => e.runId === "kill-run");
    expect(runEvents.filter((e) => e.type === "tool_call")).toHaveLength(2);
    expect(runEvents.filter((e) => e.type === "run_started")).toHaveLength(1);
    expect(runEvents.filter((e) => e.type === "run_completed")).toHaveLength(1);
    const info = await poll(() => tc.info<{ usage: { runs: number; modelCalls: number } }>("worker").catch(() => undefined), {
      timeoutMs: 10_000,
      what: "worker info",
    });
    expect(info.usage).toMatchObject({ runs: 1, modelCalls: 3 });
  }, 90_000);

  it("takeover - when the killed node does not come back, another node finishes the run from the step journal on NATS, with exactly the remaining model request", async () => {
    await using model = await loopModel();
    await using tc = await TestCluster.create({ nodes: ["n1", "n2"], extraToml: modelToml(model.url) });
    await tc.hostOf("worker");
    const pending = askAgent(tc.bus, "worker", "What is (20+1)*2?", { runId: "takeover-run", timeoutMs: 60_000 });
    await poll(() => model.hung() && model.requests.length === 3, { timeoutMs: 20_000, what: "the 3rd model request in flight" });
    // The node whose process runs the turn, asked now: the actor can move once while the
    // nodes start, and the registry read before the ask named the node it had left in 1 of
    // about 40 runs beside other suites (that node was killed, and the run hung on the other).
    const first = await tc.hostOf("worker");
    tc.kill(first);
    const result = await pending;
    expect(result).toMatchObject({ status: "completed", output: "It is 42.", runId: "takeover-run" });
    const after = await poll(async () => ((await tc.agents()).get("worker")?.node !== first ? (await tc.agents()).get("worker")?.node : undefined), {
      timeoutMs: 20_000,
      what: "worker moved",
    });
    expect(after).not.toBe(first);
    // The new host replays the recorded model responses and tool results from the step
    // journal on NATS (stream KOVA_<C>_JOURNAL): only the call in flight is made again.
    expect(model.requests).toHaveLength(4);
    expect(model.requests[3]!.messages).toEqual(model.requests[2]!.messages);
    const runEvents = tc.events.filter((e) => e.runId === "takeover-run");
    expect(runEvents.filter((e) => e.type === "tool_call")).toHaveLength(2);
  }, 90_000);

  it("end events - a node killed after a run's end events went out but before its turn committed replays the unrecorded run:end step on restart; the stream keeps each end event once", async () => {
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("Done.") });
    await using tc = await TestCluster.create({ nodes: ["n1"], start: false, extraToml: modelToml(model.url) });
    await tc.startNode("n1", 30_000, { env: { KOVA_TEST_CRASH_AT: "before-checkpoint@worker" } });
    await tc.hostOf("worker");
    const pending = askAgent(tc.bus, "worker", "Finish.", { runId: "end-run", timeoutMs: 60_000 });
    await tc.procs.get("n1")!.exited;
    const live = () => tc.events.filter((e) => e.runId === "end-run").map((e) => e.type);
    // The kill came after run:end published its events: live subscribers saw them once so far.
    expect(live().filter((t) => t === "run_completed")).toHaveLength(1);
    await tc.startNode("n1");
    expect(await pending).toMatchObject({ status: "completed", output: "Done.", runId: "end-run" });
    // The model step was recorded: no second call. run:end ran again (live subscribers see
    // its events twice) under the same message ids, so the stream stored them once.
    expect(model.requests).toHaveLength(1);
    await poll(() => live().filter((t) => t === "run_stream_end").length === 2, { timeoutMs: 10_000, what: "the replayed run:end events" });
    const stored = (await storedEvents(tc, "end-run")).map((e) => e.type);
    for (const type of ["run_started", "model_response", "run_completed", "run_stream_end"]) expect(stored.filter((t) => t === type)).toHaveLength(1);
    expect(stored.at(-1)).toBe("run_stream_end");
  }, 90_000);

  it("crash loop - a node killed during every attempt of a run ends the run failed: the stream keeps its run_failed and run_stream_end once, and the message is dead-lettered", async () => {
    // Every model request hangs: each attempt is in flight at the model when its node is killed.
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("too late", { latencyMs: 120_000 }) });
    await using tc = await TestCluster.create({ nodes: ["n1"], extraToml: modelToml(model.url) });
    await tc.hostOf("worker");
    const pending = askAgent(tc.bus, "worker", "Never finishes.", { runId: "loop-run", timeoutMs: 120_000 }).then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    );
    // The agent's turns have 3 attempts: each one dies at the model, then the 4th start ends the turn.
    for (let attempt = 1; attempt <= 3; attempt++) {
      await poll(() => model.requests.length === attempt, { timeoutMs: 30_000, what: `the model request of attempt ${attempt}` });
      tc.kill("n1");
      await tc.procs.get("n1")!.exited;
      await tc.startNode("n1");
    }
    const dead = await poll(async () => (await tc.bus.listDlq({ reason: "handler_failed" }))[0], { timeoutMs: 30_000, what: "dead letter", retryErrors: true });
    expect(dead.headers["Kova-Dlq-Error"]).toContain("the process ended during every attempt");
    await poll(() => tc.events.some((e) => e.runId === "loop-run" && e.type === "run_stream_end"), { timeoutMs: 20_000, what: "the run's run_stream_end" });
    const stored = await storedEvents(tc, "loop-run");
    const types = stored.map((e) => e.type);
    expect(types.filter((t) => t === "run_failed")).toHaveLength(1);
    expect(types.filter((t) => t === "run_stream_end")).toHaveLength(1);
    expect(types.at(-1)).toBe("run_stream_end");
    const failed = stored.find((e) => e.type === "run_failed")!;
    expect(failed).toMatchObject({ sessionId: "loop-run", data: { agentId: "worker", error: { code: "ACTOR_FAILED" } } });
    expect(stored.find((e) => e.type === "run_stream_end")!.data).toEqual({ status: "failed" });
    expect(model.requests).toHaveLength(3);
    // The asker is answered with the failure, not left waiting.
    expect(await pending).toMatchObject({ error: { code: "ACTOR_FAILED" } });
  }, 180_000);
});
