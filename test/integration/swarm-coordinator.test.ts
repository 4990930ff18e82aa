import { describe, expect, it } from "vitest";
import type { Bus, KovaEvent } from "../../src/bus/index.js";
import { defineActor } from "../../src/actors/index.js";
import { createOpenAiModel } from "../../src/agents/model/index.js";
import { agentTool } from "../../src/agents/agent-tool.js";
import { DelegationErrorCode } from "../../src/agents/delegation-errors.js";
import { readRunEvents } from "../../src/swarm/history.js";
import { defineCoordinator, runSwarm, SwarmErrorCode, SwarmEventType, type CoordinatorOptions } from "../../src/swarm/index.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { fileServer, startRig, uniqueCluster, type HostRig } from "../fixtures/actors/helpers.js";
import { contractAgentDefinitions, type ContractAgentState } from "../fixtures/swarm/contract-agent-defs.mjs";
import { declareAgents, isPlanRequest, isSynthesisRequest, swarmModel } from "../fixtures/swarm/helpers.js";
import { toolContext } from "../fixtures/tool-call.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();
const agentDefs = contractAgentDefinitions(defineActor);
const AGENTS = [
  { id: "r-1", type: "swarm_researcher", capabilities: ["research"] },
  { id: "r-2", type: "swarm_researcher", capabilities: ["research"] },
  { id: "w-1", type: "swarm_writer", capabilities: ["write"] },
];

/** A rig hosting the contract agents and a coordinator `planner` whose model is the scripted server at `modelUrl`. */
async function swarmRig(modelUrl: string, options: Pick<CoordinatorOptions, "subtaskMaxTokens"> = {}): Promise<HostRig> {
  let rig: HostRig | undefined;
  const coordinator = defineCoordinator({
    type: "coordinator",
    model: () => createOpenAiModel({ name: "planner", baseUrl: modelUrl, model: "scripted-model", apiKey: "k" }, { retry: { maxRetries: 0 } as never }),
    bus: () => rig!.bus,
    // In one process the host is the node: interrupt the subtask's turn there (a KovaNode goes through its signal endpoint).
    interrupt: async (agentId, messageId) => {
      rig!.host.interruptMessage(agentId, messageId);
      return true;
    },
    deadlineMs: 20_000,
    ...options,
  });
  rig = await startRig(server.url, uniqueCluster("sw"), [...agentDefs, coordinator]);
  // The coordinator too, as a node would: runSwarm looks it up before sending.
  await declareAgents(rig.bus, [...AGENTS, { id: "planner", type: "coordinator", capabilities: [] }]);
  for (const a of AGENTS) await rig.host.start(a.id, a.type);
  await rig.host.start("planner", "coordinator");
  return rig;
}

async function agentCounts(bus: Bus): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const a of AGENTS) out[a.id] = (await bus.request<ContractAgentState>(a.id, "info_request", null)).count;
  return out;
}

/** A run's stored events once its run_stream_end is among them. */
function endedRunEvents(bus: Bus, sessionId: string, runId: string): Promise<KovaEvent[]> {
  return poll(
    async () => {
      const got = await readRunEvents(bus, sessionId, runId);
      return got.some((e) => e.type === "run_stream_end") ? got : undefined;
    },
    { timeoutMs: 10_000, what: `the end events of run ${runId}` },
  );
}

/** The agents' counts once they add up to `total` (an outcome can arrive before its turn's checkpoint). */
function settledCounts(bus: Bus, total: number): Promise<Record<string, number>> {
  return poll(
    async () => {
      const c = await agentCounts(bus);
      return Object.values(c).reduce((a, b) => a + b, 0) >= total ? c : undefined;
    },
    { timeoutMs: 5000, what: `${total} turns committed` },
  );
}

describe("swarm coordinator", () => {
  it("swarm - plans with its model (an invalid plan repaired), delegates by capability, and synthesizes one answer", async () => {
    await using model = await startScriptedModelServer({
      handler: swarmModel({
        invalidFirst: true,
        plan: [
          { task: "research A", capability: "research" },
          { task: "research B", capability: "research" },
          { task: "research C", capability: "research" },
          { task: "write it up", capability: "write" },
        ],
      }),
    });
    await using rig = await swarmRig(model.url);
    const events: KovaEvent[] = [];
    const result = await runSwarm(rig.bus, "planner", "Compare A, B and C", { sessionId: "s-plan", onEvent: (e) => events.push(e) });

    expect(result.status).toBe("completed");
    expect(result.output).toBe("ANSWER from 4 results");
    expect(result.missing).toEqual([]);
    expect(result.subtasks).toBe(4);
    // 3 research subtasks over 2 researchers: least backlog first, so neither gets all three.
    const counts = await settledCounts(rig.bus, 4);
    expect(counts["w-1"]).toBe(1);
    expect(counts["r-1"]! + counts["r-2"]!).toBe(3);
    expect(Math.min(counts["r-1"]!, counts["r-2"]!)).toBeGreaterThanOrEqual(1);

    // The repair: the second plan request carries the issue naming the bad capability's path.
    const plans = model.requests.filter(isPlanRequest);
    expect(plans).toHaveLength(2);
    const feedback = String(plans[1]!.messages.at(-1)?.content);
    expect(plans[1]!.messages.at(-1)?.role).toBe("tool");
    expect(feedback).toContain("$.subtasks[0].capability");

    // The run tree: 4 children linked under the swarm's run, each child's events name it as parent.
    const stored = await poll(
      async () => {
        const all = await readRunEvents(rig.bus, "s-plan", result.runId);
        return all.at(-1)?.type === "run_stream_end" ? all : undefined;
      },
      { timeoutMs: 5000, what: "the swarm's run_stream_end" },
    );
    const types = stored.map((e) => e.type);
    expect(types[0]).toBe("run_started");
    expect(types).toContain(SwarmEventType.planned);
    expect(types.filter((t) => t === "child_run_linked")).toHaveLength(4);
    expect(types.slice(-2)).toEqual(["run_completed", "run_stream_end"]);
    const links = stored.filter((e) => e.type === "child_run_linked").map((e) => (e.data as { childRunId: string }).childRunId);
    for (const child of links) {
      const started = events.find((e) => e.runId === child && e.type === "run_started");
      expect(started?.parentRunId).toBe(result.runId);
    }
    // Usage: the coordinator's three model calls plus the children's.
    expect(result.usage.inputTokens).toBeGreaterThan(0);
  });

  it("swarm - at the deadline it answers from the partial results and names the missing subtask", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    const started = Date.now();
    const result = await runSwarm(rig.bus, "planner", "Three views", {
      constraints: { deadline: "3s" },
      plan: [
        { task: "view one", capability: "write" },
        { task: "view two [sleep 60000]", agent: "r-1" },
        { task: "view three", agent: "r-2" },
      ],
    });
    const elapsed = Date.now() - started;
    expect(result.status).toBe("completed");
    expect(result.missing).toEqual([{ index: 1, task: "view two [sleep 60000]", agentId: "r-1", reason: "no result before the deadline" }]);
    expect(result.output).toContain("ANSWER from 2 results");
    expect(result.output).toContain("subtask 2 (agent r-1): view two [sleep 60000] — no result before the deadline");
    // Collected until the deadline less its 20 % synthesis reserve, answered within the deadline.
    expect(elapsed).toBeGreaterThanOrEqual(2300);
    expect(elapsed).toBeLessThan(3000 + 1500);
    expect(model.requests.filter(isPlanRequest)).toHaveLength(0); // a static plan asks the model nothing
    // The slow child was interrupted at the cutoff: its run ends cancelled, not 60 s later.
    const planned = (await readRunEvents(rig.bus, result.sessionId, result.runId)).find((e) => e.type === SwarmEventType.planned)!.data as {
      subtasks: Array<{ childRunId: string }>;
    };
    const slow = planned.subtasks[1]!.childRunId;
    const end = await poll(async () => (await readRunEvents(rig.bus, result.sessionId, slow)).find((e) => e.type === "run_stream_end"), {
      timeoutMs: 10_000,
      what: "the slow child's run to end",
    });
    expect(end.data).toEqual({ status: "cancelled" });
  });

  it("swarm - every task_delegate carries its constraints: max_tokens (the plan's, else the coordinator's), the time left to the cutoff, the budget group", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url, { subtaskMaxTokens: 1500 });
    const received = async (agentId: string) => (await rig.bus.request<ContractAgentState>(agentId, "info_request", null)).received;
    const result = await runSwarm(rig.bus, "planner", "three parts", {
      sessionId: "s-limits",
      constraints: { deadline: "10s", budget_group: "team-7" },
      plan: [
        { task: "part one", agent: "r-1", max_tokens: 300 },
        { task: "part two", agent: "r-2" },
        { task: "part three", capability: "write" },
      ],
    });
    expect(result.missing).toEqual([]);
    await settledCounts(rig.bus, 3);
    const started = (await readRunEvents(rig.bus, "s-limits", result.runId)).find((e) => e.type === "run_started")!.data as { startedAt: number };
    // Collected until the deadline less its 20 % synthesis reserve: 8 s after the start.
    const cutoff = started.startedAt + 8000;
    const byAgent = { "r-1": await received("r-1"), "r-2": await received("r-2"), "w-1": await received("w-1") };
    for (const [agentId, maxTokens] of [
      ["r-1", 300],
      ["r-2", 1500],
      ["w-1", 1500],
    ] as const) {
      const got = byAgent[agentId];
      expect(got, agentId).toHaveLength(1);
      const [r] = got;
      expect(r!.constraints, agentId).toEqual({ max_tokens: maxTokens, budget_group: "team-7", deadline: expect.any(Number) });
      // The child's deadline is what was left until the cutoff when it was sent, as a duration
      // (the turn began after the send, so from there it reaches the cutoff or a little past it)…
      const deadline = r!.constraints!.deadline as number;
      expect(deadline, agentId).toBeLessThanOrEqual(8000);
      expect(r!.at + deadline, agentId).toBeGreaterThanOrEqual(cutoff);
      // …and the envelope expires at the cutoff, so a task still queued then is not run late.
      expect(r!.deadline, agentId).toBe(cutoff);
    }

    // Without a budget group in the request, the children draw from the swarm's session.
    const second = await runSwarm(rig.bus, "planner", "one part", { sessionId: "s-limits-2", plan: [{ task: "only part", agent: "r-2" }] });
    expect(second.missing).toEqual([]);
    const r2 = await poll(async () => ((await received("r-2")).length === 2 ? (await received("r-2"))[1] : undefined), {
      timeoutMs: 5000,
      what: "r-2's second task committed",
    });
    expect(r2.constraints).toMatchObject({ max_tokens: 1500, budget_group: "s-limits-2" });
    // The coordinator's default deadline (20 s) less its reserve.
    expect(r2.constraints!.deadline).toBeLessThanOrEqual(16_000);
    expect(r2.constraints!.deadline).toBeGreaterThan(0);
  });

  it("swarm - a request whose payload cannot be read ends its run failed, with run_failed and run_stream_end", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    const err = await runSwarm(rig.bus, "planner", "x", { sessionId: "s-bad", runId: "r-bad", constraints: { max_tokens: 0 } }).catch((e: unknown) => e);
    expect(isKovaError(err, SwarmErrorCode.SWARM_RUN_FAILED)).toBe(true);
    const events = await endedRunEvents(rig.bus, "s-bad", "r-bad");
    expect(events.map((e) => e.type)).toEqual(["run_failed", "run_stream_end"]);
    expect(events[0]!.data).toMatchObject({ error: { code: ErrorCode.INVALID_ARGUMENT, message: expect.stringContaining("max_tokens") } });
    expect(events[1]!.data).toEqual({ status: "failed" });
  });

  it("swarm - agents that are Paused, Failed or not hosted get no subtask", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    await declareAgents(rig.bus, [
      { id: "r-paused", type: "swarm_researcher", capabilities: ["research"], state: "Paused" },
      { id: "r-failed", type: "swarm_researcher", capabilities: ["research"], state: "Failed" },
      { id: "r-ghost", type: "swarm_researcher", capabilities: ["research"], node: "n9" }, // declared, hosted nowhere
    ]);
    const result = await runSwarm(rig.bus, "planner", "four", { plan: Array.from({ length: 4 }, (_, i) => ({ task: `t${i}`, capability: "research" })) });
    expect(result.missing).toEqual([]);
    const counts = await settledCounts(rig.bus, 4);
    expect(counts).toEqual({ "r-1": 2, "r-2": 2, "w-1": 0 });
    const stored = await readRunEvents(rig.bus, result.sessionId, result.runId);
    const planned = stored.find((e) => e.type === SwarmEventType.planned)!.data as { subtasks: Array<{ agentId: string }> };
    expect(new Set(planned.subtasks.map((s) => s.agentId))).toEqual(new Set(["r-1", "r-2"]));
  });

  it("swarm - a bad static plan ends the run failed with an error naming the field", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    const err = await runSwarm(rig.bus, "planner", "x", { plan: [{ task: "no capability" }] as never }).catch((e: unknown) => e);
    expect(isKovaError(err, SwarmErrorCode.SWARM_RUN_FAILED)).toBe(true);
    const data = (err as { data: { error: { code: string; message: string } } }).data;
    expect(data.error.code).toBe(ErrorCode.INVALID_ARGUMENT);
    expect(data.error.message).toContain("payload.plan[0]");
  });

  it("swarm - a capability no live agent has fails the run with SWARM_NO_AGENT", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    const err = await runSwarm(rig.bus, "planner", "x", { plan: [{ task: "t", capability: "translate" }] }).catch((e: unknown) => e);
    expect((err as { data: { error: { code: string } } }).data.error.code).toBe(SwarmErrorCode.SWARM_NO_AGENT);
  });

  it("swarm - a plan the model never gets right fails the run with SWARM_PLAN_INVALID and still counts the tokens of every attempt", async () => {
    // A capability no agent offers, every time: the first plan and both repairs are refused.
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [{ task: "t", capability: "cooking" }] }) });
    await using rig = await swarmRig(model.url);
    const err = await runSwarm(rig.bus, "planner", "x", { sessionId: "s-plan-bad", runId: "r-plan-bad" }).catch((e: unknown) => e);
    expect((err as { data: { error: { code: string } } }).data.error.code).toBe(SwarmErrorCode.SWARM_PLAN_INVALID);
    expect(model.requests.filter(isPlanRequest)).toHaveLength(3);
    const events = await endedRunEvents(rig.bus, "s-plan-bad", "r-plan-bad");
    const responses = events
      .filter((e) => e.type === "model_response")
      .map((e) => e.data as { usage: { inputTokens: number; outputTokens: number }; calls?: number });
    expect(responses).toHaveLength(1);
    expect(responses[0]!.calls).toBe(3);
    const failed = events.find((e) => e.type === "run_failed")!.data as { usage: { inputTokens: number; outputTokens: number } };
    expect(failed.usage).toMatchObject(responses[0]!.usage);
    expect(failed.usage.inputTokens).toBeGreaterThan(0);
  });

  it("swarm - a run that fails after its model planned carries the coordinator's own usage on run_failed, as an agent's does", async () => {
    const planner = swarmModel({ plan: [{ task: "research A", capability: "research" }] });
    // The plan is made and the subtask answered; the model refuses the synthesis.
    await using model = await startScriptedModelServer({
      handler: (req) => (isSynthesisRequest(req) ? scriptedReply.error(400, { message: "synthesis refused" }) : planner(req)),
    });
    await using rig = await swarmRig(model.url);
    const err = await runSwarm(rig.bus, "planner", "x", { sessionId: "s-fail-usage", runId: "r-fail-usage" }).catch((e: unknown) => e);
    expect(isKovaError(err, SwarmErrorCode.SWARM_RUN_FAILED)).toBe(true);
    const events = await endedRunEvents(rig.bus, "s-fail-usage", "r-fail-usage");
    const planned = events.filter((e) => e.type === "model_response").map((e) => (e.data as { usage: { inputTokens: number; outputTokens: number } }).usage);
    expect(planned.length).toBeGreaterThan(0);
    const failed = events.find((e) => e.type === "run_failed")!.data as { usage: { inputTokens: number; outputTokens: number } };
    // The tokens of the model calls the run made before it failed, not zero and not missing.
    expect(failed.usage).toMatchObject({
      inputTokens: planned.reduce((n, u) => n + u.inputTokens, 0),
      outputTokens: planned.reduce((n, u) => n + u.outputTokens, 0),
    });
    expect(failed.usage.inputTokens).toBeGreaterThan(0);
  });
});

describe("agents as tools", () => {
  it("agent tool - runs a child run on the agent, links it to the calling run, returns its output and usage", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    const usages: unknown[] = [];
    const tool = agentTool(rig.bus, "w-1", { onUsage: (u, info) => usages.push({ u, child: info.childRunId }), budgetGroup: "user-7" });
    expect(tool.name).toBe("agent:w-1");
    expect(tool.idempotent).toBe(true);
    const ctx = toolContext({ sessionId: "s-tool", runId: "parent-run", callId: "call-9", idempotencyKey: "parent-agent.env-1.3" });
    const events = rig.bus.subscribeEvents({ sessionId: "s-tool" });
    const seen: KovaEvent[] = [];
    void (async () => {
      for await (const e of events) seen.push(e);
    })();
    await rig.bus.nc.flush();

    const result = await tool.run({ task: "draft the summary" }, ctx);
    expect(result.output).toContain("w-1 on n1 did: draft the summary");
    expect(result.agentId).toBe("w-1");
    expect(result.usage.inputTokens).toBe("draft the summary".length);
    expect(usages).toEqual([{ u: result.usage, child: result.childRunId }]);
    await poll(() => seen.some((e) => e.type === "run_stream_end"), { timeoutMs: 5000, what: "the child's end" });
    const link = seen.find((e) => e.type === "child_run_linked");
    expect(link).toMatchObject({ runId: "parent-run", data: { childRunId: result.childRunId, callId: "call-9", agentId: "w-1" } });
    const child = seen.find((e) => e.type === "run_started");
    expect(child).toMatchObject({ runId: result.childRunId, parentRunId: "parent-run" });

    // A re-run of the same call (after a crash) addresses the same child: the agent runs nothing
    // twice and the outcome comes from the child's stored events.
    const again = await tool.run({ task: "draft the summary" }, ctx);
    expect(again).toEqual(result);
    expect((await settledCounts(rig.bus, 1))["w-1"]).toBe(1);
    events.stop();
  });

  it("agent tool - a child run that fails is the tool's error; no answer in time is a timeout", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using rig = await swarmRig(model.url);
    const tool = agentTool(rig.bus, "r-1", { timeoutMs: 1500 });
    const failed = await Promise.resolve(tool.run({ task: "[fail]" }, toolContext({ sessionId: "s-f", idempotencyKey: "k1" }))).catch((e: unknown) => e);
    expect(isKovaError(failed, DelegationErrorCode.DELEGATED_RUN_FAILED)).toBe(true);
    expect((failed as Error).message).toContain("TEST_FAILURE");
    const slow = await Promise.resolve(tool.run({ task: "[sleep 30000]" }, toolContext({ sessionId: "s-f", idempotencyKey: "k2" }))).catch((e: unknown) => e);
    expect(isKovaError(slow, DelegationErrorCode.DELEGATED_RUN_TIMEOUT)).toBe(true);
    await rig.host.signal("r-1", "interrupt");
  });
});
