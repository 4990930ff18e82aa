import { describe, expect, it } from "vitest";
import { TaskState } from "@a2a-js/sdk";
import type { KovaEvent } from "../../src/bus/index.js";
import { sessionIdFor } from "../../src/gateway/sessions.js";
import { outcomeOf } from "../../src/gateway/runs.js";
import type { KovaTaskMeta, TaskProjection } from "../../src/gateway/task-projection.js";
import { projection } from "../fixtures/gateway/projection.js";

const ev = (type: string, data: unknown = {}): KovaEvent => ({ type, sessionId: "c1", runId: "t1", ts: Date.now(), data });
const taskUsage = (p: TaskProjection) => (p.task.metadata?.kova as KovaTaskMeta | undefined)?.usage;

describe("gateway task projection", () => {
  it("projection - folds a run's events into A2A states: working, tokens as appended chunks, input_required while approval waits, completed with the whole answer", () => {
    const p = projection();
    expect(p.state).toBe(TaskState.TASK_STATE_SUBMITTED);
    expect(p.apply(ev("run_started"))[0]?.payload?.$case).toBe("statusUpdate");
    expect(p.state).toBe(TaskState.TASK_STATE_WORKING);
    const t1 = p.apply(ev("model_delta", { text: "Hel" }));
    const t2 = p.apply(ev("model_delta", { text: "lo" }));
    expect(t1.map((u) => u.payload?.$case)).toEqual(["artifactUpdate"]);
    expect(t1[0]?.payload?.value).toMatchObject({ append: false, lastChunk: false });
    expect(t2[0]?.payload?.value).toMatchObject({ append: true, lastChunk: false });
    p.apply(ev("model_response", { model: "m", usage: { inputTokens: 3, outputTokens: 2 }, costUsd: 0.5 }));
    p.apply(ev("approval_requested", { approvalId: "ap1", tool: "deploy" }));
    expect(p.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(p.settled).toBe(true);
    expect(p.terminal).toBe(false);
    p.apply(ev("tool_result", { callId: "c", tool: "deploy", ok: true }));
    expect(p.state).toBe(TaskState.TASK_STATE_WORKING);
    const end = p.apply(ev("run_completed", { output: "Hello", usage: { inputTokens: 3, outputTokens: 2 } }));
    expect(end.map((u) => u.payload?.$case)).toEqual(["artifactUpdate", "statusUpdate"]);
    expect(end[0]?.payload?.value).toMatchObject({ append: false, lastChunk: true });
    expect(p.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(p.task.artifacts[0]?.parts[0]?.content).toEqual({ $case: "text", value: "Hello" });
    expect(p.task.metadata?.kova).toMatchObject({ usage: { inputTokens: 3, outputTokens: 2 } });
    // events after the end change nothing
    expect(p.apply(ev("run_failed", { error: { code: "X", message: "late" } }))).toEqual([]);
    expect(p.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it("projection - a retried model stream (model_delta restart) replaces the answer with the text of earlier model calls, then appends the retry's", () => {
    const p = projection();
    p.apply(ev("run_started"));
    // a first model call streams, then calls a tool
    p.apply(ev("model_delta", { text: "Let me " }));
    p.apply(ev("model_delta", { text: "check. " }));
    p.apply(ev("model_response", { model: "m", usage: { inputTokens: 1, outputTokens: 1 } }));
    // the second call's stream is cut after "Hel" and retried
    p.apply(ev("model_delta", { text: "Hel" }));
    const restart = p.apply(ev("model_delta", { text: "", restart: 2 }));
    expect(restart.map((u) => u.payload?.$case)).toEqual(["artifactUpdate"]);
    expect(restart[0]?.payload?.value).toMatchObject({
      append: false,
      lastChunk: false,
      artifact: { parts: [{ content: { $case: "text", value: "Let me check. " } }] },
    });
    const again = p.apply(ev("model_delta", { text: "Hello" }));
    expect(again[0]?.payload?.value).toMatchObject({ append: true, artifact: { parts: [{ content: { value: "Hello" } }] } });
    // a restart of a call that streamed nothing changes nothing
    const q = projection();
    q.apply(ev("run_started"));
    expect(q.apply(ev("model_delta", { text: "", restart: 2 }))).toEqual([]);
    // a restart in the first call leaves an empty answer, and the retry starts it afresh
    const r = projection();
    r.apply(ev("model_delta", { text: "Hel" }));
    expect(r.apply(ev("model_delta", { text: "", restart: 2 }))[0]?.payload?.value).toMatchObject({
      append: false,
      artifact: { parts: [{ content: { value: "" } }] },
    });
    expect(r.apply(ev("model_delta", { text: "Hello" }))[0]?.payload?.value).toMatchObject({ append: false });
    // the end of the run still brings the whole output
    const end = r.apply(ev("run_completed", { output: "Hello", usage: { inputTokens: 1, outputTokens: 1 } }));
    expect(end[0]?.payload?.value).toMatchObject({ append: false, lastChunk: true, artifact: { parts: [{ content: { value: "Hello" } }] } });
  });

  it("projection - a running task's usage adds each model call's tokens and its cost (costUsd beside usage, as agents publish it); a failed or cancelled task keeps the totals of its end event", () => {
    const p = projection();
    p.apply(ev("run_started"));
    p.apply(ev("model_response", { model: "m", turn: 0, usage: { inputTokens: 25, outputTokens: 5 }, costUsd: 0.000035, toolCalls: 1 }));
    expect(p.task.metadata?.kova).toMatchObject({ usage: { inputTokens: 25, outputTokens: 5, costUsd: 0.000035 } });
    p.apply(ev("model_response", { model: "m", turn: 1, usage: { inputTokens: 40, outputTokens: 8 }, costUsd: 0.000056, toolCalls: 0 }));
    const running = taskUsage(p);
    expect([running?.inputTokens, running?.outputTokens]).toEqual([65, 13]);
    expect(running?.costUsd).toBeCloseTo(0.000091, 12);
    // an unpriced model's call adds tokens and no cost
    const unpriced = projection();
    unpriced.apply(ev("model_response", { model: "m", usage: { inputTokens: 1, outputTokens: 1 } }));
    expect(taskUsage(unpriced)).toEqual({ inputTokens: 1, outputTokens: 1 });
    // the end event's usage is the run's own total (a summary's call has no model_response of its own)
    const failed = projection();
    failed.apply(ev("model_response", { model: "m", usage: { inputTokens: 25, outputTokens: 5 }, costUsd: 0.000035 }));
    failed.apply(ev("run_failed", { error: { code: "MODEL_CALL_FAILED", message: "refused" }, usage: { inputTokens: 30, outputTokens: 6, costUsd: 0.00004 } }));
    expect(failed.task.metadata?.kova).toMatchObject({ usage: { inputTokens: 30, outputTokens: 6, costUsd: 0.00004 } });
    const cancelled = projection();
    cancelled.apply(ev("run_cancelled", { usage: { inputTokens: 25, outputTokens: 5, costUsd: 0.000035 } }));
    expect(cancelled.state).toBe(TaskState.TASK_STATE_CANCELED);
    expect(cancelled.task.metadata?.kova).toMatchObject({ usage: { inputTokens: 25, outputTokens: 5, costUsd: 0.000035 } });
  });

  it("projection - failed, cancelled, and run_stream_end alone end the task with the matching state", () => {
    const failed = projection();
    failed.apply(ev("run_failed", { error: { code: "BUDGET_EXCEEDED", message: "over budget" } }));
    expect(failed.state).toBe(TaskState.TASK_STATE_FAILED);
    expect(failed.task.metadata?.kova).toMatchObject({ error: { code: "BUDGET_EXCEEDED" } });
    const cancelled = projection();
    cancelled.apply(ev("run_cancelled"));
    expect(cancelled.state).toBe(TaskState.TASK_STATE_CANCELED);
    const ended = projection();
    ended.apply(ev("run_stream_end", { status: "cancelled" }));
    expect(ended.state).toBe(TaskState.TASK_STATE_CANCELED);
  });

  it("projection - a reply is read as the contract's result_notify, and any other actor's reply becomes its JSON", () => {
    expect(outcomeOf({ output: "x", usage: { inputTokens: 1, outputTokens: 2 }, runId: "r", sessionId: "s", status: "completed" })).toEqual({
      status: "completed",
      output: "x",
      usage: { inputTokens: 1, outputTokens: 2 },
    });
    expect(outcomeOf({ status: "failed", output: "", usage: {}, error: { code: "E", message: "m" } })).toMatchObject({
      status: "failed",
      error: { code: "E", message: "m" },
    });
    expect(outcomeOf({ count: 3 })).toEqual({ status: "completed", output: '{"count":3}', usage: { inputTokens: 0, outputTokens: 0 } });
  });

  it("projection - A2A context ids become session ids: valid ids as they are, others as a stable token", () => {
    expect(sessionIdFor("conv-1")).toBe("conv-1");
    const s = sessionIdFor("user@example.com/chat 1");
    expect(s).toMatch(/^ctx_[A-Za-z0-9_-]{32}$/);
    expect(sessionIdFor("user@example.com/chat 1")).toBe(s);
  });
});
