import { describe, expect, it } from "vitest";
import type { ModelRequest, ModelResponse } from "../../src/agents/model/index.js";
import { readTaskPayload } from "../../src/agents/run-protocol.js";
import { derivedId } from "../../src/core/ids.js";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { parseConfig } from "../../src/node/config.js";
import { LiveRunTree } from "../../src/cli/run-tree.js";
import { assignSubtasks, decompose, missingNote, readStaticPlan, SwarmErrorCode, type AgentCandidate } from "../../src/swarm/index.js";

const agent = (agentId: string, node: string, capabilities: string[], backlog = 0): AgentCandidate => ({ agentId, node, state: "Idle", capabilities, backlog });

/** A model double that answers each call with the next scripted message. */
function scriptedCall(replies: Array<Partial<ModelResponse["message"]>>): { call: (r: ModelRequest) => Promise<ModelResponse>; requests: ModelRequest[] } {
  const requests: ModelRequest[] = [];
  return {
    requests,
    call: async (r) => {
      requests.push(structuredClone({ ...r, signal: undefined }));
      const m = replies.shift();
      if (!m) throw new Error("script ran dry");
      return {
        message: { role: "assistant", content: null, ...m },
        finishReason: "stop",
        usage: { inputTokens: 10, outputTokens: 5 },
        model: "m",
        attempts: 1,
      };
    },
  };
}

const planCall = (subtasks: unknown, id = "c1") => ({ toolCalls: [{ id, name: "submit_plan", arguments: JSON.stringify({ subtasks }) }] });

describe("swarm plan", () => {
  it("assign - least backlog first, ties spread over nodes, a pinned agent, and a capability nobody has", () => {
    const agents = [agent("a1", "n1", ["research"], 2), agent("a2", "n1", ["research"]), agent("a3", "n2", ["research"]), agent("w1", "n3", ["write"])];
    const out = assignSubtasks(
      [{ capability: "research" }, { capability: "research" }, { capability: "research" }, { capability: "research" }, { agent: "w1" }, { capability: "cook" }],
      agents,
    );
    // a2 and a3 start free (a1 has 2 waiting): a2 (n1), then a3 (n2 has no subtask yet, n1 one);
    // then a2 and a3 carry 1 each and their nodes 1 each: a2 by id; then a3 (1 against a2's 2).
    expect(out.map((a) => a.agentId)).toEqual(["a2", "a3", "a2", "a3", "w1", null]);
    // Equal agents on one node and one on another: the other node gets the second subtask.
    const spread = assignSubtasks([{ capability: "c" }, { capability: "c" }], [agent("x1", "n1", ["c"]), agent("x2", "n1", ["c"]), agent("y1", "n2", ["c"])]);
    expect(spread.map((a) => a.agentId)).toEqual(["x1", "y1"]);
    expect(out[5]).toEqual({ agentId: null, reason: 'no live agent has capability "cook"' });
    expect(assignSubtasks([{ agent: "gone" }], agents)[0]).toEqual({ agentId: null, reason: "agent gone is not live" });
  });

  it("decompose - an invalid plan goes back to the model with its issues, a valid one is the plan", async () => {
    const m = scriptedCall([
      planCall([{ task: "t", capability: "cooking" }]),
      planCall(
        [
          { task: "a", capability: "research" },
          { task: "b", capability: "write" },
        ],
        "c2",
      ),
    ]);
    const d = await decompose(m.call, { coordinator: "p", task: "do it", capabilities: ["research", "write"], maxSubtasks: 5 });
    expect(d.subtasks).toEqual([
      { index: 0, task: "a", capability: "research" },
      { index: 1, task: "b", capability: "write" },
    ]);
    expect(d.calls).toBe(2);
    expect(d.usage).toEqual({ inputTokens: 20, outputTokens: 10 });
    const repair = m.requests[1]!.messages.at(-1)!;
    expect(repair).toMatchObject({ role: "tool", toolCallId: "c1" });
    expect((repair as { content: string }).content).toContain("$.subtasks[0].capability");
    expect(m.requests[0]!.tools![0]!.parameters).toMatchObject({ properties: { subtasks: { maxItems: 5 } } });
  });

  it("decompose - a plan in a JSON text is accepted; repairs run out with SWARM_PLAN_INVALID", async () => {
    const text = scriptedCall([{ content: 'Here: ```json\n{"subtasks":[{"task":"x","capability":"research"}]}\n```' }]);
    expect((await decompose(text.call, { coordinator: "p", task: "t", capabilities: ["research"], maxSubtasks: 3 })).subtasks).toHaveLength(1);
    const bad = scriptedCall([{ content: "no idea" }, planCall([]), planCall("nope")]);
    const err = await decompose(bad.call, { coordinator: "p", task: "t", capabilities: ["research"], maxSubtasks: 3, maxRepairs: 2 }).catch((e: unknown) => e);
    expect(isKovaError(err, SwarmErrorCode.SWARM_PLAN_INVALID)).toBe(true);
    expect(bad.requests).toHaveLength(3);
    expect(bad.requests[1]!.messages.at(-1)).toMatchObject({ role: "user" });
  });

  it("static plan - each entry needs a task and a capability or agent; errors name the entry", () => {
    expect(
      readStaticPlan(
        [
          { task: "a", capability: "c" },
          { task: "b", agent: "w-1", max_tokens: 50 },
        ],
        5,
      ),
    ).toEqual([
      { index: 0, task: "a", capability: "c" },
      { index: 1, task: "b", agent: "w-1", maxTokens: 50 },
    ]);
    expect(() => readStaticPlan([{ task: "a" }], 5)).toThrow(/payload\.plan\[0\]: needs a capability or an agent/);
    expect(() => readStaticPlan([{ task: "a", agent: "bad.id" }], 5)).toThrow(/payload\.plan\[0\]\.agent/);
    expect(() =>
      readStaticPlan(
        [
          { task: "a", capability: "c" },
          { task: "b", capability: "c" },
        ],
        1,
      ),
    ).toThrow(/at most 1/);
  });

  it("protocol - the short task_delegate form { task, constraints } is read as written", () => {
    expect(readTaskPayload({ task: "Research X", constraints: { max_tokens: 2000, deadline: "5min" } })).toEqual({
      input: "Research X",
      constraints: { max_tokens: 2000, deadline: "5min" },
    });
  });

  it("protocol - a deadline that is no duration, or an id that is no token, is refused naming the field", () => {
    expect(() => readTaskPayload({ input: "x", constraints: { deadline: "soon" } })).toThrow(/payload\.constraints\.deadline: "soon" is not a deadline/);
    // A deadline is read as the agent reads it: epoch ms and ISO dates too, kept as written.
    for (const deadline of [1_900_000_000_000, "2030-01-01T00:00:00Z", "5min", 30_000])
      expect(readTaskPayload({ input: "x", constraints: { deadline } }).constraints).toEqual({ deadline });
    expect(() => readTaskPayload({ input: "x", runId: "a.b" })).toThrow(/payload\.runId/);
  });

  it("protocol - derived ids are stable tokens: the same parts give the same id, other parts another", () => {
    const id = derivedId({ prefix: "run" }, "swarm-1", "3");
    expect(id).toMatch(/^run-[A-Za-z0-9_-]{22}$/);
    expect(derivedId({ prefix: "run" }, "swarm-1", "3")).toBe(id);
    expect(derivedId({ prefix: "run" }, "swarm-1", "4")).not.toBe(id);
  });

  it("missing note - names each missing subtask, its agent and why", () => {
    expect(missingNote([])).toBe("");
    expect(missingNote([{ index: 2, task: "slow", agentId: "r-1", reason: "no result before the deadline" }])).toBe(
      "\n\nMissing results (1):\n- subtask 3 (agent r-1): slow — no result before the deadline",
    );
  });
});

describe("swarm config", () => {
  const models = `[models.planner]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n`;

  it("config - [[swarms]] names a model and becomes a coordinator actor of type swarm-<id>", () => {
    const cfg = parseConfig(`${models}[[swarms]]\nid = "planner"\nmodel = "planner"\ndeadline = "90s"\nmax_subtasks = 8\nsubtask_max_tokens = 500\n`, {
      env: {},
    });
    expect(cfg.swarms).toEqual([{ id: "planner", model: "planner", maxSubtasks: 8, deadlineMs: 90_000, subtaskMaxTokens: 500, capabilities: [] }]);
    expect(cfg.actors).toContainEqual({ id: "planner", type: "swarm-planner" });
  });

  it("config - errors name the key: unknown model, bad deadline, an id shared with [[actors]]", () => {
    const err = (text: string) => {
      try {
        parseConfig(text, { env: {} });
      } catch (e) {
        expect(isKovaError(e, ErrorCode.INVALID_CONFIG)).toBe(true);
        return (e as Error).message;
      }
      throw new Error("no error");
    };
    expect(err(`${models}[[swarms]]\nid = "p"\nmodel = "big"\n`)).toMatch(/^swarms\[0\]\.model: no \[models\.big\] entry/);
    expect(err(`${models}[[swarms]]\nid = "p"\nmodel = "planner"\ndeadline = "later"\n`)).toMatch(/^swarms\[0\]\.deadline: must be a duration/);
    expect(err(`${models}[[actors]]\nid = "p"\ntype = "counter"\n[[swarms]]\nid = "p"\nmodel = "planner"\n`)).toMatch(
      /^swarms\[0\]\.id: "p" is also an \[\[actors\]\] id/,
    );
    expect(err(`${models}[[swarms]]\nid = "p"\nmodel = "planner"\ncolour = "red"\n`)).toMatch(/swarms\[0\]\.colour/);
  });
});

describe("swarm follow", () => {
  it("follow - kova swarm run --follow draws the run tree: subtasks under the coordinator, a snapshot per ended run when piped", () => {
    let text = "";
    const view = new LiveRunTree({ write: (t: string) => (text += t) });
    const ev = (runId: string, type: string, ts: number, data: Record<string, unknown>, parentRunId?: string) =>
      view.apply({ type, sessionId: "s", runId, ts, data, ...(parentRunId ? { parentRunId } : {}) });
    ev("root", "run_started", 0, { agentId: "planner", input: "task" });
    ev("root", "child_run_linked", 100, { childRunId: "kid", stepId: "subtask-0", agentId: "r-1", task: "part" });
    ev("kid", "run_started", 150, { agentId: "r-1", input: "part" }, "root");
    ev("kid", "model_delta", 160, { text: "x" }, "root");
    expect(ev("kid", "run_completed", 200, { output: "done", usage: { inputTokens: 3, outputTokens: 4 } }, "root")).toBe(false);
    expect(ev("kid", "run_stream_end", 200, { status: "completed" }, "root")).toBe(true);
    ev("root", "model_response", 250, { usage: { inputTokens: 10, outputTokens: 2 }, purpose: "synthesize" });
    ev("root", "run_completed", 300, { output: "answer", usage: { inputTokens: 13, outputTokens: 6 } });
    ev("root", "run_stream_end", 300, { status: "completed" });
    view.finish();
    const snapshots = text.trim().split("\n\n");
    // the child's end, the root's end (the final tree: nothing came after it, so finish adds no copy)
    expect(snapshots).toHaveLength(2);
    // a running run's duration runs to the newest event (piped: the events' clock, not the
    // time they are read); its tokens are its subtree's so far
    expect(snapshots[0]!.split("\n")).toEqual(["planner  root  running  0.2s  tokens 3/4", "└─ subtask-0 → r-1  kid  completed  0.1s  tokens 3/4"]);
    expect(snapshots.at(-1)!.split("\n")).toEqual(["planner  root  completed  0.3s  tokens 13/6", "└─ subtask-0 → r-1  kid  completed  0.1s  tokens 3/4"]);
  });
});
