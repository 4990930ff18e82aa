import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hasNoOrphans } from "../../src/agents/index.js";
import { defineTool } from "../../src/tools/define-tool.js";
import { scriptedReply, startScriptedModelServer, type RecordedRequest } from "../../src/testing/index.js";
import { JournalUnavailableError } from "../../src/actors/errors.js";
import { startAgentRig } from "../fixtures/agents/rig.js";
import { walWith } from "../fixtures/actors/helpers.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

/** The wire messages of a request in the shape hasNoOrphans reads. */
function wireMessages(r: RecordedRequest) {
  return r.messages.map((m) =>
    m.role === "tool"
      ? { role: "tool" as const, toolCallId: m.tool_call_id!, content: String(m.content) }
      : m.role === "assistant"
        ? {
            role: "assistant" as const,
            content: (m.content as string | null) ?? null,
            ...(m.tool_calls ? { toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) } : {}),
          }
        : { role: m.role as "user", content: String(m.content) },
  );
}

describe("agent decision loop (real NATS, WAL, openai client, scripted server)", () => {
  it("loop - a tool loop of 3 calls (two of them in one response, run concurrently) completes with output, usage, ids and events in order", async () => {
    await using model = await startScriptedModelServer({
      replies: [
        scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "2+3" } }], { usage: { inputTokens: 50, outputTokens: 10 } }),
        scriptedReply.toolCalls(
          [
            { name: "calculator", arguments: { expression: "6*7" } },
            { name: "clock_now", arguments: {} },
          ],
          { usage: { inputTokens: 80, outputTokens: 12 } },
        ),
        scriptedReply.text("The answers are 5 and 42.", { chunks: ["The answers ", "are 5 ", "and 42."], usage: { inputTokens: 120, outputTokens: 8 } }),
      ],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("al"), {
      modelUrl: model.url,
      agents: [{ id: "calc", model: "main", system: "You compute.", tools: ["calculator", "clock_now"], capabilities: ["math"] }],
    });
    const events: string[] = [];
    const tokens: string[] = [];
    const result = await rig.ask("calc", "What are 2+3 and 6*7?", {
      runId: "run-1",
      onEvent: (e) => {
        events.push(e.type);
        if (e.type === "model_delta") tokens.push((e.data as { text: string }).text);
      },
    });
    expect(result).toMatchObject({ output: "The answers are 5 and 42.", status: "completed", runId: "run-1", sessionId: "run-1" });
    expect(result.usage).toEqual({ inputTokens: 250, outputTokens: 30, costUsd: expect.closeTo((250 * 1 + 30 * 2) / 1e6, 9) });
    expect(tokens.join("")).toBe("The answers are 5 and 42.");
    const stored = events.filter((t) => t !== "model_delta" && t !== "model_request");
    expect(stored[0]).toBe("run_started");
    expect(stored.slice(-2)).toEqual(["run_completed", "run_stream_end"]);
    expect(stored.filter((t) => t === "model_response")).toHaveLength(3);
    expect(stored.filter((t) => t === "tool_call")).toHaveLength(3);
    expect(stored.filter((t) => t === "tool_result")).toHaveLength(3);
    // The model saw each tool's result, in call order, after the assistant message that asked for it.
    const last = model.requests[2]!;
    const toolMsgs = last.messages.filter((m) => m.role === "tool");
    expect(toolMsgs.map((m) => JSON.parse(String(m.content)) as Record<string, unknown>)).toEqual([
      { expression: "2+3", result: 5 },
      { expression: "6*7", result: 42 },
      expect.objectContaining({ timezone: "UTC" }),
    ]);
    expect(last.messages[0]).toMatchObject({ role: "system", content: "You compute." });
    expect(last.tools.map((t) => t.function.name)).toEqual(["calculator", "clock_now"]);
    for (const r of model.requests) expect(r.headers["x-kova-agent"]).toBe("calc");
    const info = await rig.client.request<{
      agentId: string;
      model: string;
      capabilities: string[];
      state: string;
      usage: { runs: number; toolCalls: number; byTool: Record<string, { calls: number }> };
    }>("calc", "info_request", null);
    expect(info).toMatchObject({ agentId: "calc", model: "main", capabilities: ["math"], state: "Idle" });
    expect(info.usage).toMatchObject({ runs: 1, toolCalls: 3, modelCalls: 3, inputTokens: 250, outputTokens: 30 });
    expect(info.usage.byTool.calculator!.calls).toBe(2);
    const cap = await rig.client.request<{ capabilities: string[] }>("calc", "capability_query", null);
    expect(cap.capabilities).toEqual(["math"]);
  }, 30_000);

  it("retries - a 429 with Retry-After and a stream cut mid-answer are retried and the run succeeds; the 429 is a rate_limited event", async () => {
    await using model = await startScriptedModelServer({
      replies: [scriptedReply.error(429, { retryAfter: 1 }), scriptedReply.drop(2, scriptedReply.text("never whole")), scriptedReply.text("recovered")],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("ar"), {
      modelUrl: model.url,
      models: { flaky: { model: "gpt-4o-mini", max_retries: 4 } },
      agents: [{ id: "retrier", model: "flaky" }],
    });
    const t0 = performance.now();
    const ok = await rig.ask("retrier", "hello", { runId: "run-429" });
    expect(ok).toMatchObject({ status: "completed", output: "recovered" });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(950); // Retry-After: 1 was honoured
    expect(model.requests.map((r) => r.outcome)).toEqual(["error", "drop", "completion"]);
    // the 429 is visible to a dashboard as a rate_limited event (the cut stream is not one)
    const limited = await poll(
      () => {
        const e = rig.eventsOf("run-429").filter((x) => x.type === "rate_limited");
        return e.length > 0 ? e : undefined;
      },
      { timeoutMs: 5000, what: "a rate_limited event" },
    );
    expect(limited).toHaveLength(1);
    expect(limited[0]!.data).toMatchObject({ agentId: "retrier", model: "flaky", attempt: 1, status: 429, retryAfterMs: 1000 });
  }, 40_000);

  it("retries - 5 consecutive 500s end the run failed with MODEL_CALL_FAILED in its result and its events; the agent's next run works", async () => {
    await using model = await startScriptedModelServer({
      replies: Array.from({ length: 5 }, () => scriptedReply.error(500, { message: "upstream broke" })),
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("ar"), {
      modelUrl: model.url,
      models: { flaky: { model: "gpt-4o-mini", max_retries: 4 } },
      agents: [{ id: "retrier", model: "flaky" }],
    });
    const failed = await rig.ask("retrier", "again", { runId: "run-fail" });
    expect(failed.status).toBe("failed");
    expect(failed.error?.code).toBe("MODEL_CALL_FAILED");
    expect(failed.error?.message).toContain("5 attempt(s)");
    expect(failed.error?.message).toContain("HTTP 500");
    expect(model.requests).toHaveLength(5);
    const ev = await rig.endedEvents("run-fail");
    const runFailed = ev.find((e) => e.type === "run_failed")!;
    expect((runFailed.data as { error: { code: string } }).error.code).toBe("MODEL_CALL_FAILED");
    expect(ev.at(-1)).toMatchObject({ type: "run_stream_end", data: { status: "failed" } });
    // The agent is not Failed: the next run works.
    model.enqueue(scriptedReply.text("fine again"));
    expect(await rig.ask("retrier", "once more")).toMatchObject({ status: "completed", output: "fine again" });
  }, 40_000);

  it("infrastructure - the step journal failing under a run does not end it failed: the turn runs again, reusing the model's answer, and the run completes", async () => {
    await using model = await startScriptedModelServer({ replies: [scriptedReply.text("done")] });
    // The first step write of the run fails as the step journal on NATS does when NATS is away.
    let failures = 0;
    await using rig = await startAgentRig(nats.url, uniqueCluster("aj"), {
      modelUrl: model.url,
      agents: [{ id: "journaled", model: "main" }],
      hostWal: (wal) =>
        walWith(wal, {
          replace: (seq, payload, opts) => {
            if (failures++ === 0) return Promise.reject(new JournalUnavailableError("journaled", "written", new Error("injected")));
            return wal.replace(seq, payload, opts);
          },
        }),
    });
    const result = await rig.ask("journaled", "hello", { runId: "run-journal" });
    expect(failures).toBeGreaterThan(1);
    expect(result).toMatchObject({ status: "completed", output: "done", runId: "run-journal" });
    expect(model.requests).toHaveLength(1);
    const ev = await rig.endedEvents("run-journal");
    expect(ev.filter((e) => e.type === "run_failed")).toEqual([]);
    expect(ev.at(-1)).toMatchObject({ type: "run_stream_end", data: { status: "completed" } });
  }, 40_000);

  describe("run policies", () => {
    let model: Awaited<ReturnType<typeof startScriptedModelServer>>;
    let rig: Awaited<ReturnType<typeof startAgentRig>>;
    const requestsOf = (agent: string) => model.requests.filter((r) => r.headers["x-kova-agent"] === agent);
    beforeAll(async () => {
      model = await startScriptedModelServer({
        handler: (req) => {
          if (req.headers["x-kova-agent"] === "looper") return scriptedReply.toolCalls([{ name: "clock_now", arguments: {} }]);
          if (req.headers["x-kova-agent"] === "dreamer") return scriptedReply.toolCalls([{ name: "send_email", arguments: { to: "x" } }]);
          if (req.headers["x-kova-agent"] === "cutoff")
            return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "1+" } }], { finishReason: "length" });
          return scriptedReply.toolCalls([{ name: "calculator", arguments: { expr: "1+1" } }]);
        },
      });
      rig = await startAgentRig(nats.url, uniqueCluster("ap"), {
        modelUrl: model.url,
        agents: [
          { id: "looper", model: "main", tools: ["clock_now"], run: { maxTurns: 3 } },
          { id: "sloppy", model: "main", tools: ["calculator"] },
          { id: "dreamer", model: "main", tools: ["calculator"] },
          { id: "cutoff", model: "main", tools: ["calculator"], maxOutputTokens: 64 },
        ],
      });
    }, 30_000);
    afterAll(async () => {
      await rig?.[Symbol.asyncDispose]();
      await model?.[Symbol.asyncDispose]();
    });

    it("policies - max_turns ends a run that never answers with RUN_LIMIT_EXCEEDED, after exactly that many model calls", async () => {
      const loop = await rig.ask("looper", "go");
      expect(loop).toMatchObject({ status: "failed", error: { code: "RUN_LIMIT_EXCEEDED" } });
      expect(loop.error!.message).toContain("max_turns");
      expect(requestsOf("looper")).toHaveLength(3);
    }, 30_000);

    it("policies - invalid arguments go back to the model for repair (two turns), then the run fails with TOOL_ARGUMENTS_INVALID naming the path", async () => {
      const sloppy = await rig.ask("sloppy", "add");
      expect(sloppy).toMatchObject({ status: "failed", error: { code: "TOOL_ARGUMENTS_INVALID" } });
      const calls = requestsOf("sloppy");
      expect(calls).toHaveLength(3); // the first call, then two repair turns (the default budget)
      const repair = calls[1]!.messages.at(-1)!;
      expect(repair.role).toBe("tool");
      expect(String(repair.content)).toContain("TOOL_ARGUMENTS_INVALID");
      expect(String(repair.content)).toContain("$.expression");
    }, 30_000);

    it("policies - a tool the agent was not offered is TOOL_UNKNOWN to the model, and the run's error names the tool, not its arguments", async () => {
      const dreamer = await rig.ask("dreamer", "mail it");
      expect(dreamer).toMatchObject({ status: "failed", error: { code: "TOOL_ARGUMENTS_INVALID" } });
      expect(dreamer.error!.message).toContain('the model kept calling tool "send_email", which it was not offered');
      expect(dreamer.error!.message).toContain("offered: calculator");
      expect(String(requestsOf("dreamer")[1]!.messages.at(-1)!.content)).toContain("TOOL_UNKNOWN");
    }, 30_000);

    it("policies - a call cut off at the output limit gets no repair turn, and the run names the limit to raise", async () => {
      const cutoff = await rig.ask("cutoff", "compute");
      expect(cutoff).toMatchObject({ status: "failed", error: { code: "MODEL_OUTPUT_TRUNCATED" } });
      expect(cutoff.error!.message).toContain('max_output_tokens 64) while writing a call of "calculator"');
      expect(requestsOf("cutoff")).toHaveLength(1);
    }, 30_000);
  });

  it("scheduling - a call waiting for a full model's slot is visible as a schedule_blocked event of its run", async () => {
    await using model = await startScriptedModelServer({
      replies: [scriptedReply.text("one", { latencyMs: 800 }), scriptedReply.text("two", { latencyMs: 800 })],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("as"), {
      modelUrl: model.url,
      models: { narrow: { model: "gpt-4o-mini", max_concurrency: 1 } },
      agents: [
        { id: "first", model: "narrow" },
        { id: "second", model: "narrow" },
      ],
    });
    const results = await Promise.all([rig.ask("first", "a", { runId: "run-s1" }), rig.ask("second", "b", { runId: "run-s2" })]);
    expect(results.map((r) => r.status)).toEqual(["completed", "completed"]);
    // exactly one of the two waited behind the other's call
    const blocked = await poll(
      () => {
        const e = [...rig.eventsOf("run-s1"), ...rig.eventsOf("run-s2")].filter((x) => x.type === "schedule_blocked");
        return e.length > 0 ? e : undefined;
      },
      { timeoutMs: 5000, what: "a schedule_blocked event" },
    );
    expect(blocked).toHaveLength(1);
    expect(blocked[0]!.data).toMatchObject({ model: "narrow", policy: "round_robin", queued: 1, inFlight: 1 });
  }, 30_000);

  it("cancel - an interrupt aborts the model call in flight and the run ends cancelled", async () => {
    await using model = await startScriptedModelServer({ replies: [scriptedReply.text("slow answer", { latencyMs: 20_000 }), scriptedReply.text("next")] });
    await using rig = await startAgentRig(nats.url, uniqueCluster("ac"), { modelUrl: model.url, agents: [{ id: "slow", model: "main" }] });
    const pending = rig.ask("slow", "take your time", { runId: "run-c" });
    await model.waitForRequests(1);
    await rig.host.host.signal("slow", "interrupt");
    const r = await pending;
    expect(r).toMatchObject({ status: "cancelled", runId: "run-c", output: "" });
    await poll(() => model.requests[0]!.clientClosed, { timeoutMs: 5000, what: "the provider request to be aborted" });
    await poll(() => rig.eventsOf("run-c").some((e) => e.type === "run_cancelled"), { timeoutMs: 5000, what: "run_cancelled" });
    expect(await rig.ask("slow", "again")).toMatchObject({ status: "completed", output: "next" });
  }, 30_000);

  it("time limits - a tool that never settles and a model call that hangs are stopped at time_budget_ms / the deadline: the run fails RUN_LIMIT_EXCEEDED and the agent answers the next task", async () => {
    let calls = 0;
    const hang = defineTool({
      name: "hang",
      description: "never answers and ignores its signal",
      parameters: { type: "object" },
      idempotent: true,
      run: () => {
        calls++;
        return new Promise<never>(() => undefined);
      },
    });
    await using model = await startScriptedModelServer({
      replies: [
        scriptedReply.toolCalls([{ name: "hang", arguments: {} }]),
        scriptedReply.text("slow answer", { latencyMs: 20_000 }),
        scriptedReply.text("next"),
      ],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("al"), {
      modelUrl: model.url,
      tools: [hang],
      agents: [{ id: "hanger", model: "main", tools: ["hang"], run: { timeBudgetMs: 1000 } }],
    });
    let started = Date.now();
    const r = await rig.ask("hanger", "go", { runId: "run-hang" });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(calls).toBe(1);
    expect(r).toMatchObject({ status: "failed", runId: "run-hang", error: { code: "RUN_LIMIT_EXCEEDED" } });
    expect(r.error?.message).toContain("time_budget_ms");
    await poll(() => rig.eventsOf("run-hang").some((e) => e.type === "run_failed"), { timeoutMs: 5000, what: "run_failed" });

    // A model call in flight is aborted at the task's deadline, before the time budget.
    started = Date.now();
    const late = await rig.ask("hanger", "answer slowly", { runId: "run-late", constraints: { deadline: Date.now() + 500 } });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(late).toMatchObject({ status: "failed", error: { code: "RUN_LIMIT_EXCEEDED" } });
    expect(late.error?.message).toContain("deadline");
    await poll(() => model.requests[1]!.clientClosed, { timeoutMs: 5000, what: "the provider request to be aborted" });

    expect(await rig.ask("hanger", "again")).toMatchObject({ status: "completed", output: "next" });
  }, 30_000);

  it("tools - a tool defined in code gets the run's ids and an idempotency key; its failure goes back to the model as a structured error", async () => {
    const seen: Array<{ runId: string; key: string }> = [];
    const flaky = defineTool({
      name: "lookup",
      description: "looks things up",
      parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] },
      idempotent: true,
      run: (args: { q: string }, ctx) => {
        seen.push({ runId: ctx.runId, key: ctx.idempotencyKey });
        if (args.q === "bad") throw new Error("backend down");
        return { hit: args.q };
      },
    });
    await using model = await startScriptedModelServer({
      replies: [
        scriptedReply.toolCalls([
          { name: "lookup", arguments: { q: "bad" } },
          { name: "lookup", arguments: { q: "good" } },
        ]),
        scriptedReply.text("ok"),
      ],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("at"), {
      modelUrl: model.url,
      tools: [flaky],
      agents: [{ id: "looker", model: "main", tools: ["lookup"] }],
    });
    expect(await rig.ask("looker", "find", { runId: "run-t" })).toMatchObject({ status: "completed", output: "ok" });
    expect(seen.map((s) => s.runId)).toEqual(["run-t", "run-t"]);
    expect(new Set(seen.map((s) => s.key)).size).toBe(2);
    const results = model.requests[1]!.messages.filter((m) => m.role === "tool").map((m) => String(m.content));
    expect(JSON.parse(results[0]!)).toMatchObject({ error: { code: "TOOL_FAILED" } });
    expect(JSON.parse(results[1]!)).toEqual({ hit: "good" });
    expect(hasNoOrphans(wireMessages(model.requests[1]!))).toBe(true);
  }, 30_000);

  it("tools - a tool that requires approval is never run without it: no decision in time, the model is told why", async () => {
    let ran = 0;
    const guarded = defineTool({
      name: "wire_money",
      description: "moves money",
      parameters: { type: "object", properties: { amount: { type: "number" } }, required: ["amount"] },
      idempotent: false,
      requiresApproval: true,
      run: () => ++ran,
    });
    await using model = await startScriptedModelServer({
      replies: [scriptedReply.toolCalls([{ name: "wire_money", arguments: { amount: 5 } }]), scriptedReply.text("I could not send it.")],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("aa"), {
      modelUrl: model.url,
      tools: [guarded],
      agents: [{ id: "payer", model: "main", tools: ["wire_money"], approval: { tools: [], timeoutMs: 300 } }],
    });
    expect(await rig.ask("payer", "send 5")).toMatchObject({ status: "completed", output: "I could not send it." });
    expect(ran).toBe(0);
    const toolMsg = model.requests[1]!.messages.at(-1)!;
    expect(JSON.parse(String(toolMsg.content))).toMatchObject({ error: { code: "TOOL_APPROVAL_TIMEOUT" } });
  }, 30_000);
});
