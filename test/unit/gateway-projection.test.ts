import { describe, expect, it } from "vitest";
import { Role, TaskState } from "@a2a-js/sdk";
import type { KovaEvent } from "../../src/bus/index.js";
import { sessionIdFor } from "../../src/gateway/sessions.js";
import { outcomeOf } from "../../src/gateway/runs.js";
import { newTask, TaskProjection, textPart } from "../../src/gateway/task-projection.js";

function projection() {
  const message = {
    messageId: "m1",
    contextId: "c1",
    taskId: "t1",
    role: Role.ROLE_USER,
    parts: [textPart("hi")],
    metadata: {},
    extensions: [],
    referenceTaskIds: [],
  };
  return new TaskProjection(newTask({ taskId: "t1", contextId: "c1", message, meta: { agentId: "a", sessionId: "c1", runId: "t1", owner: "k" } }));
}
const ev = (type: string, data: unknown = {}): KovaEvent => ({ type, sessionId: "c1", runId: "t1", ts: Date.now(), data });

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
    p.apply(ev("model_response", { model: "m", usage: { inputTokens: 3, outputTokens: 2, costUsd: 0.5 } }));
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
