import { describe, expect, it } from "vitest";
import { defineTool } from "../../src/tools/define-tool.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { startAgentRig, type AgentRig } from "../fixtures/agents/rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";

const nats = fileServer();

describe("agent budgets, model switch and hooks", () => {
  it("budgets - a group shared by agents on two nodes stops both at its limit, within one request's tokens", async () => {
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("ok", { usage: { inputTokens: 100, outputTokens: 50 } }) });
    const cluster = uniqueCluster("bg");
    const groups = new Map([["team", { maxTokens: 1000 }]]);
    await using n1 = await startAgentRig(nats.url, cluster, {
      modelUrl: model.url,
      nodeId: "n1",
      budgetGroups: groups,
      agents: [{ id: "a1", model: "main", budget: { group: "team" } }],
    });
    await using n2 = await startAgentRig(nats.url, cluster, {
      modelUrl: model.url,
      nodeId: "n2",
      budgetGroups: groups,
      agents: [{ id: "a2", model: "main", budget: { group: "team" } }],
    });
    const outcomes: Array<[string, string]> = [];
    for (let i = 0; i < 12; i++) {
      const [rig, id] = i % 2 === 0 ? [n1, "a1"] : [n2, "a2"];
      const r = await rig.ask(id, `task ${i}`);
      outcomes.push([id, r.status === "failed" ? r.error!.code : r.status]);
    }
    const completed = outcomes.filter(([, s]) => s === "completed").length;
    // 1000 / 150 per call: six calls see less than the limit used, the seventh is refused.
    expect(completed).toBe(7);
    expect(outcomes.slice(completed).every(([, s]) => s === "BUDGET_EXCEEDED")).toBe(true);
    expect(new Set(outcomes.slice(completed).map(([id]) => id))).toEqual(new Set(["a1", "a2"]));
    const used = await (await n1.runtime.ledger()).used("group.team");
    expect(used).toBeLessThanOrEqual(1000 + 150);
    const refused = await n2.ask("a2", "one more");
    expect(refused.error?.message).toContain("group:team");
    expect(model.requests).toHaveLength(completed);
  }, 60_000);

  it("budgets - max_tokens_per_run and constraints.max_tokens end a tool loop before the next model call", async () => {
    await using model = await startScriptedModelServer({
      handler: () => scriptedReply.toolCalls([{ name: "clock_now", arguments: {} }], { usage: { inputTokens: 300, outputTokens: 20 } }),
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("br"), {
      modelUrl: model.url,
      agents: [{ id: "spender", model: "main", tools: ["clock_now"], budget: { maxTokensPerRun: 700 } }],
    });
    const r = await rig.ask("spender", "loop");
    expect(r).toMatchObject({ status: "failed", error: { code: "BUDGET_EXCEEDED" }, usage: { inputTokens: 900, outputTokens: 60 } });
    expect(r.error!.message).toContain("max_tokens_per_run");
    const capped = await rig.ask("spender", "loop", { constraints: { max_tokens: 100 } });
    expect(capped).toMatchObject({ status: "failed", error: { code: "BUDGET_EXCEEDED" }, usage: { inputTokens: 300 } });
    expect(capped.error!.message).toContain("constraints.max_tokens");
  }, 30_000);

  it("switch - a model switch during a run is used from the next model call, and by later runs", async () => {
    let rig!: AgentRig;
    const switcher = defineTool({
      name: "switch_model",
      description: "test tool: switches the agent's model like `kova signal <agent> model=alt`",
      parameters: { type: "object", properties: {} },
      idempotent: true,
      run: async (_args, ctx) => {
        await rig.runtime.switchModel(ctx.agentId, "alt");
        return "switched";
      },
    });
    await using model = await startScriptedModelServer({
      replies: [
        scriptedReply.text("first"),
        scriptedReply.toolCalls([{ name: "switch_model", arguments: {} }]),
        scriptedReply.text("second"),
        scriptedReply.text("third"),
      ],
    });
    rig = await startAgentRig(nats.url, uniqueCluster("ms"), {
      modelUrl: model.url,
      tools: [switcher],
      models: { alt: { model: "gpt-4.1" } },
      agents: [{ id: "sw", model: "main", tools: ["switch_model"] }],
    });
    await using _rig = rig;
    expect((await rig.ask("sw", "one", { sessionId: "conv", chat: true })).output).toBe("first");
    expect((await rig.ask("sw", "two", { sessionId: "conv", chat: true })).output).toBe("second");
    expect((await rig.ask("sw", "three", { sessionId: "conv", chat: true })).output).toBe("third");
    expect(model.requests.map((r) => r.model)).toEqual(["gpt-4o-mini", "gpt-4o-mini", "gpt-4.1", "gpt-4.1"]);
    const info = await rig.client.request<{ model: string; usage: { byModel: Record<string, { calls: number }> } }>("sw", "info_request", null);
    expect(info.model).toBe("alt");
    expect(info.usage.byModel).toMatchObject({ main: { calls: 2 }, alt: { calls: 2 } });
    await expect(rig.runtime.switchModel("sw", "nope")).rejects.toMatchObject({ code: "UNKNOWN_MODEL" });
  }, 30_000);

  it("hooks - before_user_message, after_turn and after_loop run in order, can rewrite the message, stop the loop and add to memory", async () => {
    const order: string[] = [];
    await using model = await startScriptedModelServer({
      replies: [
        scriptedReply.toolCalls([{ name: "clock_now", arguments: {} }]),
        scriptedReply.text("final"),
        scriptedReply.toolCalls([{ name: "clock_now", arguments: {} }]),
      ],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("hk"), {
      modelUrl: model.url,
      agents: [
        {
          id: "hooked",
          model: "main",
          tools: ["clock_now"],
          hooks: {
            beforeUserMessage: (m) => {
              order.push(`before:${m}`);
              return { message: `${m} (rewritten)` };
            },
            afterTurn: (t) => {
              order.push(`turn:${t.index}:${t.toolCalls}`);
              return undefined;
            },
            afterLoop: (r, ctx) => {
              order.push(`loop:${r.output}:${ctx.messages.length}`);
              return { output: `${r.output}!`, addToMemory: [{ role: "system", content: "remember: user was polite" }] };
            },
          },
        },
        { id: "stopper", model: "main", tools: ["clock_now"], hooks: { afterTurn: () => ({ stop: true, output: "stopped by hook" }) } },
      ],
    });
    const r = await rig.ask("hooked", "hello", { sessionId: "h1", chat: true });
    expect(r.output).toBe("final!");
    expect(order).toEqual(["before:hello", "turn:0:1", "turn:1:0", "loop:final:4"]);
    expect(model.requests[0]!.messages.at(-1)).toMatchObject({ role: "user", content: "hello (rewritten)" });
    const stored = await (await rig.runtime.memory()).load("hooked", "h1");
    expect(stored.map((m) => m.content)).toEqual(["hello (rewritten)", null, expect.any(String), "final!", "remember: user was polite"]);
    const s = await rig.ask("stopper", "go");
    expect(s).toMatchObject({ status: "completed", output: "stopped by hook" });
    expect(model.requests).toHaveLength(3);
  }, 30_000);
});
