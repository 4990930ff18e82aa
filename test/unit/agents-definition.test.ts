import { describe, expect, it } from "vitest";
import {
  agentsConfigFrom,
  agentTemplatesConfigFrom,
  budgetGroupsFrom,
  checkBudgetGroups,
  defineAgent,
  forProfile,
  inProfile,
  isAgentDefinition,
  parseRunRequest,
  TokenBucket,
} from "../../src/agents/index.js";
import { parseConfig } from "../../src/node/config.js";
import { configError } from "../fixtures/config-error.js";
import { poll } from "../fixtures/poll.js";
import { AgentRuntime } from "../../src/agents/runtime.js";
import { ToolRegistry } from "../../src/tools/registry.js";
import { AgentHookFailedError } from "../../src/agents/errors.js";
import { groupsOf, shareKeyOf } from "../../src/agents/budget.js";

function expectConfigError(fn: () => unknown, key: string, message: RegExp): void {
  const err = configError(fn);
  expect(err.key).toBe(key);
  expect(err.message).toMatch(message);
}

describe("agent definitions, config, protocol and budgets (pure)", () => {
  it("define - fills defaults, freezes, marks the definition, and refuses bad fields before anything runs", () => {
    const a = defineAgent({ id: "r", model: "fast" });
    expect(a).toMatchObject({ id: "r", model: "fast", system: "", tools: [], memory: { policy: "fifo", maxTokens: 60_000 }, capabilities: [] });
    expect(isAgentDefinition(a)).toBe(true);
    expect(isAgentDefinition({ ...a })).toBe(false);
    expect(Object.isFrozen(a)).toBe(true);
    expect(() => defineAgent({ id: "a.b", model: "m" })).toThrow(/agent id/);
    expect(() => defineAgent({ id: "tpl--k", model: "m" })).toThrow(/reserved for template instances/);
    expect(() => defineAgent({ id: "a", model: "m", memory: { policy: "lru" as "fifo" } })).toThrow(/fifo, summary_first or sliding_window/);
    expect(() => defineAgent({ id: "a", model: "m", budget: { maxTokensPerRun: 0 } })).toThrow(/max_tokens_per_run/);
    expect(() => defineAgent({ id: "a", model: "m", hooks: { onStart: () => undefined } as never })).toThrow(/unknown hook/);
  });

  it("config - [[agents]] as docs/agents.md writes it parses; errors name the key as written", () => {
    const cfg = parseConfig(
      [
        `[models.fast]`,
        `base_url = "http://127.0.0.1:11434/v1"`,
        `api_key_env = "OPENAI_API_KEY"`,
        `model = "gpt-4.1-mini"`,
        `max_concurrency = 8`,
        `price = { input_per_mtok = 0.4, output_per_mtok = 1.6 }`,
        `[[agents]]`,
        `id = "researcher"`,
        `model = "fast"`,
        `system = "You research and cite sources."`,
        `tools = ["http_request", "mcp:everything/*"]`,
        `memory = { policy = "summary_first", keep_last = 20, max_tokens = 60000 }`,
        `budget = { tokens_per_minute = 200000, max_tokens_per_run = 50000, group = "team-a" }`,
        `capabilities = ["research"]`,
        `[budget_groups.team-a]`,
        `max_tokens = 1000000`,
      ].join("\n"),
      { env: {} },
    );
    expect(cfg.agents).toHaveLength(1);
    expect(cfg.agents[0]).toMatchObject({
      id: "researcher",
      model: "fast",
      tools: ["http_request", "mcp:everything/*"],
      memory: { policy: "summary_first", keepLast: 20, maxTokens: 60000 },
      budget: { tokensPerMinute: 200000, maxTokensPerRun: 50000, group: "team-a" },
      capabilities: ["research"],
    });
    expect(cfg.budgetGroups.get("team-a")).toEqual({ maxTokens: 1_000_000 });
    expect(cfg.models.get("fast")?.model).toBe("gpt-4.1-mini");
    const models = new Set(["fast"]);
    expectConfigError(() => agentsConfigFrom([{ id: "x", model: "slow" }], models), "agents[0].model", /no \[models.slow\] table/);
    expectConfigError(
      () => agentsConfigFrom([{ id: "x", model: "fast", memory: { keep_lst: 3 } }], models),
      "agents[0].memory.keep_lst",
      /did you mean agents\[0\].memory.keep_last/,
    );
    expectConfigError(
      () =>
        agentsConfigFrom(
          [
            { id: "x", model: "fast" },
            { id: "x", model: "fast" },
          ],
          models,
        ),
      "agents[1].id",
      /duplicate/,
    );
    expectConfigError(
      () => checkBudgetGroups(agentsConfigFrom([{ id: "x", model: "fast", budget: { group: "g" } }], models), budgetGroupsFrom(undefined)),
      "agents[0].budget.group",
      /\[budget_groups.g\]/,
    );
    expectConfigError(
      () =>
        parseConfig(`[[actors]]\nid = "a"\ntype = "counter"\n[models.m]\nmodel = "x"\nbase_url = "http://127.0.0.1:1/v1"\n[[agents]]\nid = "a"\nmodel = "m"`, {
          env: {},
        }),
      "actors[0].id",
      /also an \[\[agents\]\] id/,
    );
  });

  it("templates - defineAgent({ template }) and [[agent_templates]] (the keys of [[agents]] with name, plus idle_after/idle_timeout); clashes and bad names name their key", () => {
    expect(defineAgent({ id: "support", model: "m", template: true }).template).toEqual({ idleAfterMs: 600_000 });
    expect(defineAgent({ id: "support", model: "m", template: { idleAfterMs: 0 } }).template).toEqual({ idleAfterMs: 0 });
    expect(defineAgent({ id: "support", model: "m", template: false }).template).toBeUndefined();
    expect(() => defineAgent({ id: "support-", model: "m", template: true })).toThrow(/not a template name/);
    expect(() => defineAgent({ id: "support", model: "m", template: { idleAfterMs: -1 } })).toThrow(/idle_after/);
    const models = `[models.fast]\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "gpt-4o-mini"\n[budget_groups.team]\nmax_tokens = 1000\n`;
    const cfg = parseConfig(
      `${models}[[agent_templates]]\nname = "support"\nmodel = "fast"\nsystem = "You help."\nidle_after = "90s"\nbudget = { tokens_per_minute = 5000, group = "team" }\ncapabilities = ["support"]\n[[agent_templates]]\nname = "triage"\nmodel = "fast"\nidle_timeout = 0`,
      { env: {} },
    );
    expect(cfg.agents).toEqual([]);
    expect(cfg.agentTemplates).toHaveLength(2);
    expect(cfg.agentTemplates[0]).toMatchObject({
      id: "support",
      model: "fast",
      system: "You help.",
      template: { idleAfterMs: 90_000 },
      budget: { tokensPerMinute: 5000, group: "team" },
      capabilities: ["support"],
    });
    expect(cfg.agentTemplates[1]!.template).toEqual({ idleAfterMs: 0 });
    const m = new Set(["fast"]);
    expectConfigError(() => agentTemplatesConfigFrom([{ id: "x", model: "fast" }], m), "agent_templates[0].id", /did you mean|not a known key|unknown/);
    expectConfigError(() => agentTemplatesConfigFrom([{ model: "fast" }], m), "agent_templates[0].name", /is required/);
    expectConfigError(() => agentTemplatesConfigFrom([{ name: "a--b", model: "fast" }], m), "agent_templates[0].name", /not a template name/);
    expectConfigError(
      () =>
        agentTemplatesConfigFrom(
          [
            { name: "a", model: "fast" },
            { name: "a", model: "fast" },
          ],
          m,
        ),
      "agent_templates[1].name",
      /duplicate/,
    );
    expectConfigError(
      () => agentTemplatesConfigFrom([{ name: "a", model: "fast", idle_after: "1m", idle_timeout: "1m" }], m),
      "agent_templates[0].idle_timeout",
      /another name/,
    );
    expectConfigError(() => agentTemplatesConfigFrom([{ name: "a", model: "slow" }], m), "agent_templates[0].model", /no \[models.slow\] table/);
    expectConfigError(
      () => parseConfig(`${models}[[agent_templates]]\nname = "a"\nmodel = "fast"\nbudget = { group = "nope" }`, { env: {} }),
      "agent_templates[0].budget.group",
      /\[budget_groups.nope\]/,
    );
    expectConfigError(
      () => parseConfig(`${models}[[agents]]\nid = "a"\nmodel = "fast"\n[[agent_templates]]\nname = "a"\nmodel = "fast"`, { env: {} }),
      "agent_templates[0].name",
      /also an \[\[agents\]\] id/,
    );
    expectConfigError(
      () => parseConfig(`${models}[[actor_templates]]\nname = "a"\ntype = "counter"\n[[agent_templates]]\nname = "a"\nmodel = "fast"`, { env: {} }),
      "agent_templates[0].name",
      /also an \[\[actor_templates\]\] name/,
    );
    expectConfigError(
      () => parseConfig(`${models}[[actors]]\nid = "a--1"\ntype = "counter"\n[[agent_templates]]\nname = "a"\nmodel = "fast"`, { env: {} }),
      "actors[0].id",
      /form of an instance of template "a"/,
    );
  });

  it("approval - a list of tool names or patterns, or a table with a timeout; defaults to none and 1 h; bad entries name their key", () => {
    expect(defineAgent({ id: "a", model: "m" }).approval).toEqual({ tools: [], timeoutMs: 3_600_000 });
    expect(defineAgent({ id: "a", model: "m", approval: ["shell_exec", "db_*"] }).approval).toEqual({ tools: ["shell_exec", "db_*"], timeoutMs: 3_600_000 });
    expect(() => defineAgent({ id: "a", model: "m", approval: ["bad name"] })).toThrow(/approval\.tools\[0\]/);
    expect(() => defineAgent({ id: "a", model: "m", approval: { tools: [], timeoutMs: 8 * 86_400_000 } })).toThrow(/1 ms to 7 days/);
    const models = new Set(["m"]);
    const [list, table] = agentsConfigFrom(
      [
        { id: "a", model: "m", approval: ["shell_exec", "everything/*"] },
        { id: "b", model: "m", approval: { tools: ["db_*"], timeout: "30min" } },
      ],
      models,
    );
    expect(list!.approval).toEqual({ tools: ["shell_exec", "everything/*"], timeoutMs: 3_600_000 });
    expect(table!.approval).toEqual({ tools: ["db_*"], timeoutMs: 1_800_000 });
    expectConfigError(
      () => agentsConfigFrom([{ id: "a", model: "m", approval: { tools: ["x"], timout: "1h" } }], models),
      "agents[0].approval.timout",
      /unknown key/,
    );
    expectConfigError(() => agentsConfigFrom([{ id: "a", model: "m", approval: { timeout: "1h" } }], models), "agents[0].approval.tools", /is required/);
    expectConfigError(
      () => agentsConfigFrom([{ id: "a", model: "m", approval: { tools: ["x"], timeout: "soon" } }], models),
      "agents[0].approval.timeout",
      /duration/,
    );
  });

  it("protocol - task_delegate (and the short form { task }), agent.chat, constraints and deadlines", () => {
    const now = 1_700_000_000_000;
    expect(parseRunRequest("task_delegate", { input: "hi", sessionId: "s", runId: "r", parentRunId: "p" }, now)).toEqual({
      kind: "task",
      input: "hi",
      sessionId: "s",
      runId: "r",
      parentRunId: "p",
    });
    expect(parseRunRequest("task_delegate", { task: "short form", constraints: { max_tokens: 2000, deadline: "5min" } }, now)).toEqual({
      kind: "task",
      input: "short form",
      maxTokens: 2000,
      deadline: now + 300_000,
    });
    expect(parseRunRequest("task_delegate", "plain text", now)).toEqual({ kind: "task", input: "plain text" });
    expect(parseRunRequest("agent.chat", { message: "yo", sessionId: "s1" }, now)).toEqual({ kind: "chat", input: "yo", sessionId: "s1" });
    expect(parseRunRequest("task_delegate", { input: "x", constraints: { deadline: 30_000 } }, now).deadline).toBe(now + 30_000);
    expect(parseRunRequest("task_delegate", { input: "x", constraints: { deadline: "2030-01-01T00:00:00Z" } }, now).deadline).toBe(
      Date.parse("2030-01-01T00:00:00Z"),
    );
    expect(() => parseRunRequest("agent.chat", { message: "yo" }, now)).toThrow(/sessionId/);
    expect(() => parseRunRequest("task_delegate", { input: "x", runId: "a.b" }, now)).toThrow(/runId/);
    expect(() => parseRunRequest("task_delegate", { input: "x", constraints: { deadline: "soon" } }, now)).toThrow(/not a deadline/);
    expect(() => parseRunRequest("task_delegate", { input: "" }, now)).toThrow(/input/);
  });

  it("scheduling - priority on [[agents]], [[agent_templates]] and defineAgent, constraints.priority and constraints.user on a task; out of range or malformed names its key", () => {
    const models = `[models.fast]\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "gpt-4o-mini"\n`;
    const cfg = parseConfig(`${models}[[agents]]\nid = "a"\nmodel = "fast"\npriority = 10\n[[agent_templates]]\nname = "t"\nmodel = "fast"\npriority = -5`, {
      env: {},
    });
    expect(cfg.agents.map((a) => a.priority)).toEqual([10]);
    expect(cfg.agentTemplates.map((a) => a.priority)).toEqual([-5]);
    expect(defineAgent({ id: "a", model: "m" }).priority).toBeUndefined();
    expectConfigError(() => parseConfig(`${models}[[agents]]\nid = "a"\nmodel = "fast"\npriority = 101`, { env: {} }), "agents[0].priority", /-100 to 100/);
    expectConfigError(
      () => parseConfig(`${models}[[agent_templates]]\nname = "t"\nmodel = "fast"\npriority = "high"`, { env: {} }),
      "agent_templates[0].priority",
      /integer/,
    );
    expectConfigError(() => defineAgent({ id: "a", model: "m", priority: 1.5 }), "a.priority", /integer from -100 to 100/);

    const now = 1_700_000_000_000;
    expect(parseRunRequest("task_delegate", { input: "x", constraints: { priority: -100, user: "alice" } }, now)).toEqual({
      kind: "task",
      input: "x",
      priority: -100,
      user: "alice",
    });
    expect(() => parseRunRequest("task_delegate", { input: "x", constraints: { priority: 200 } }, now)).toThrow(/constraints\.priority.*-100 to 100/);
    expect(() => parseRunRequest("task_delegate", { input: "x", constraints: { user: "a.b" } }, now)).toThrow(/constraints\.user/);

    // The fair-share key: the named user, else the named budget group, else the sender; the user's budget follows the named user.
    const party = { sessionId: "s", from: "client_1" };
    expect(shareKeyOf({}, party)).toBe("user.client_1");
    expect(shareKeyOf({ group: "team" }, party)).toBe("group.team");
    expect(shareKeyOf({ group: "team" }, { ...party, budgetGroup: "parent" })).toBe("group.parent");
    expect(shareKeyOf({ group: "team" }, { ...party, user: "alice" })).toBe("user.alice");
    expect(groupsOf({ userMaxTokens: 10 }, { ...party, user: "alice" }, new Map()).map((g) => g.key)).toEqual(["user.alice"]);
    expect(groupsOf({ userMaxTokens: 10 }, party, new Map()).map((g) => g.key)).toEqual(["user.client_1"]);
  });

  it("token bucket - a call charged after the fact can drive it negative; the next waits until it refills", () => {
    const b = new TokenBucket(600, 0); // 10 tokens per second
    expect(b.waitMs(0)).toBe(0);
    b.charge(650, 0);
    expect(b.level(0)).toBe(-50);
    expect(b.waitMs(0)).toBe(5100);
    expect(b.waitMs(5100)).toBe(0);
    expect(b.level(600_000)).toBe(600); // capped at one minute's worth
  });

  it("runtime forget - a passivated agent's token bucket is dropped once full again (a new one starts full), not before", async () => {
    const runtime = new AgentRuntime({ bus: undefined as never, models: new Map(), tools: new ToolRegistry() });
    runtime.bucket("support--a", 60_000); // full
    runtime.bucket("support--b", 60_000).charge(2_000, Date.now()); // 1 token per ms: full again in 2 s
    runtime.forget("support--a");
    runtime.forget("support--b");
    expect(runtime.bucketCount).toBe(1);
    await poll(() => runtime.bucketCount === 0, { timeoutMs: 10_000, what: "the refilled bucket dropped" });
    runtime.close();
  });

  it("profiles - chat sees tokens and endings, metrics sees usage without text, debug sees all", () => {
    const ev = (type: string, data: unknown) => ({ type, sessionId: "s", runId: "r", ts: 1, data });
    expect(inProfile(ev("model_delta", { text: "a" }), "chat")).toBe(true);
    expect(inProfile(ev("tool_call", {}), "chat")).toBe(false);
    expect(inProfile(ev("model_delta", {}), "metrics")).toBe(false);
    expect(inProfile(ev("agent_state", {}), "debug")).toBe(true);
    const m = forProfile(ev("run_completed", { agentId: "a", output: "secret answer", usage: { inputTokens: 1, outputTokens: 2 } }), "metrics");
    expect(m.data).toEqual({ agentId: "a", usage: { inputTokens: 1, outputTokens: 2 } });
  });
  it("profiles - metrics keeps a model call's costUsd (beside usage) and the numbers of schedule_blocked and rate_limited, still without text", () => {
    const ev = (type: string, data: unknown) => forProfile({ type, sessionId: "s", runId: "r", ts: 1, data }, "metrics").data;
    const usage = { inputTokens: 120, outputTokens: 30 };
    // As model-turn.ts publishes it, and a swarm coordinator's own call.
    expect(ev("model_response", { agentId: "a", model: "m", turn: 0, usage, costUsd: 0.00012, finishReason: "stop", attempts: 1, toolCalls: 0 })).toEqual({
      agentId: "a",
      model: "m",
      turn: 0,
      usage,
      costUsd: 0.00012,
      finishReason: "stop",
      attempts: 1,
      toolCalls: 0,
    });
    expect(ev("model_response", { model: "m", usage, costUsd: 0.5, purpose: "plan", calls: 2 })).toEqual({
      model: "m",
      usage,
      costUsd: 0.5,
      purpose: "plan",
      calls: 2,
    });
    expect(ev("schedule_blocked", { agentId: "a", model: "m", policy: "fair_share", statsClass: "p5", queued: 3, inFlight: 8 })).toEqual({
      agentId: "a",
      model: "m",
      policy: "fair_share",
      statsClass: "p5",
      queued: 3,
      inFlight: 8,
    });
    expect(ev("rate_limited", { agentId: "a", model: "m", attempt: 2, delayMs: 1500, status: 429, retryAfterMs: 1000 })).toEqual({
      agentId: "a",
      model: "m",
      attempt: 2,
      delayMs: 1500,
      status: 429,
      retryAfterMs: 1000,
    });
    // A swarm's end: both totals kept, the answer and what it lacks (subtask text) dropped.
    const own = { ...usage, costUsd: 0.1 };
    expect(
      ev("run_completed", { output: "secret", usage: { ...usage, costUsd: 0.3 }, ownUsage: own, subtasks: 2, missing: [{ task: "secret task" }] }),
    ).toEqual({
      usage: { ...usage, costUsd: 0.3 },
      ownUsage: own,
      subtasks: 2,
    });
    // Text under any other key stays out: a tool's arguments, an error's message.
    expect(ev("tool_result", { agentId: "a", tool: "t", ok: false, ms: 4, args: { q: "secret" }, error: { code: "E", message: "secret" } })).toEqual({
      agentId: "a",
      tool: "t",
      ok: false,
      ms: 4,
      error: { code: "E" },
    });
    // The other profiles pass the event whole, cost included.
    const whole = { type: "model_response", sessionId: "s", runId: "r", ts: 1, data: { model: "m", usage, costUsd: 0.2 } };
    expect(forProfile(whole, "debug")).toBe(whole);
    expect(forProfile(whole, "chat")).toBe(whole);
  });
  it("hooks - a hook that throws a value that cannot be printed still gives an AGENT_HOOK_FAILED error (describing it never throws)", () => {
    const unprintable = Object.assign(Object.create(null) as object, { toString: undefined });
    const err = new AgentHookFailedError("afterTurn", "helper", unprintable);
    expect(err.code).toBe("AGENT_HOOK_FAILED");
    expect(err.message).toBe("hook afterTurn of agent helper failed: {}");
    expect(new AgentHookFailedError("afterLoop", "helper", new Error("boom")).message).toBe("hook afterLoop of agent helper failed: boom");
  });
});
