import { describe, expect, it } from "vitest";
import { hasNoOrphans, loadTokenCounter, NatsMemoryStore, SUMMARY_PREFIX, type ChatMessage } from "../../src/agents/index.js";
import { scriptedReply, startScriptedModelServer, type RecordedRequest } from "../../src/testing/index.js";
import { startAgentRig } from "../fixtures/agents/rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";

const nats = fileServer();

function chatMessages(r: RecordedRequest): ChatMessage[] {
  return r.messages.map((m): ChatMessage => {
    if (m.role === "tool") return { role: "tool", toolCallId: m.tool_call_id!, content: String(m.content) };
    if (m.role === "assistant") {
      return {
        role: "assistant",
        content: (m.content as string | null) ?? null,
        ...(m.tool_calls ? { toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) } : {}),
      };
    }
    return { role: m.role as "user" | "system", content: String(m.content) };
  });
}

const LONG = "This answer is deliberately long so that a few of them fill the small context window of the test agent quickly. ".repeat(3).trim();

describe("agent memory (conversations in NATS KV, fitted by policy before each call)", () => {
  it("memory - a chat session keeps its conversation across runs; a task without a session keeps none", async () => {
    await using model = await startScriptedModelServer({ handler: (req) => scriptedReply.text(`answer ${req.index}`) });
    await using rig = await startAgentRig(nats.url, uniqueCluster("mm"), {
      modelUrl: model.url,
      agents: [{ id: "chatty", model: "main", system: "Be brief." }],
    });
    expect(await rig.ask("chatty", "my name is Ada", { sessionId: "s1", chat: true })).toMatchObject({ status: "completed", sessionId: "s1" });
    await rig.ask("chatty", "what is my name?", { sessionId: "s1", chat: true });
    const second = model.requests[1]!.messages.map((m) => [m.role, m.content]);
    expect(second).toEqual([
      ["system", "Be brief."],
      ["user", "my name is Ada"],
      ["assistant", "answer 0"],
      ["user", "what is my name?"],
    ]);
    await rig.ask("chatty", "a one-off task");
    await rig.ask("chatty", "another one-off task");
    expect(model.requests[3]!.messages.map((m) => m.content)).toEqual(["Be brief.", "another one-off task"]);
    const store = await rig.runtime.memory();
    expect((await store.load("chatty", "s1")).map((m) => m.content)).toEqual(["my name is Ada", "answer 0", "what is my name?", "answer 1"]);
    expect(store).toBeInstanceOf(NatsMemoryStore);
  }, 30_000);

  it("memory - a task without a session may bring its conversation (history): the model sees each turn in its role, the memory policy fits it, nothing is kept; bad history is refused", async () => {
    await using model = await startScriptedModelServer({ handler: (req) => scriptedReply.text(`answer ${req.index}`) });
    await using rig = await startAgentRig(nats.url, uniqueCluster("mh"), {
      modelUrl: model.url,
      agents: [{ id: "chatty", model: "main", system: "Be brief.", memory: { policy: "sliding_window", window: 3 } }],
    });
    const history = [
      { role: "system" as const, content: "Answer in French." },
      { role: "user" as const, content: "my name is Ada" },
      { role: "assistant" as const, content: "noted" },
      { role: "user" as const, content: "I live in Paris" },
      { role: "assistant" as const, content: "noted too" },
    ];
    const r = await rig.ask("chatty", "where do I live?", { history });
    expect(r).toMatchObject({ status: "completed", output: "answer 0", sessionId: r.runId });
    // sliding_window keeps the last 3 of the conversation (the question included)
    expect(model.requests[0]!.messages.map((m) => [m.role, m.content])).toEqual([
      ["system", "Be brief."],
      ["user", "I live in Paris"],
      ["assistant", "noted too"],
      ["user", "where do I live?"],
    ]);
    const store = await rig.runtime.memory();
    expect(await store.load("chatty", r.runId)).toEqual([]);
    // with a session, or of the wrong shape: the run fails naming the field, and no model is called
    const withSession = await rig.ask("chatty", "hi", { history, sessionId: "s9" });
    expect(withSession).toMatchObject({ status: "failed", error: { code: "AGENT_INPUT_INVALID", message: expect.stringContaining("history") } });
    const wrongRole = await rig.ask("chatty", "hi", { history: [{ role: "tool", content: "x" }] as never });
    expect(wrongRole).toMatchObject({ status: "failed", error: { message: expect.stringContaining("history[0]") } });
    expect(model.requests).toHaveLength(1);
  }, 30_000);

  for (const policy of ["fifo", "sliding_window", "summary_first"] as const) {
    it(`memory - ${policy}: a conversation longer than the window keeps working, and no request ever has a tool result without its assistant message`, async () => {
      const counter = await loadTokenCounter("gpt-4o-mini");
      await using model = await startScriptedModelServer({
        handler: (req) => {
          const first = req.messages[0];
          if (first?.role === "system" && String(first.content).startsWith("Summarize")) return scriptedReply.text(`summary made at request ${req.index}`);
          if (req.lastMessage?.role === "user") return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: `${req.index}+1` } }]);
          return scriptedReply.text(LONG);
        },
      });
      await using rig = await startAgentRig(nats.url, uniqueCluster("me"), {
        modelUrl: model.url,
        agents: [{ id: "mem", model: "main", system: "S.", tools: ["calculator"], memory: { policy, maxTokens: 400, keepLast: 4, window: 6 } }],
      });
      for (let i = 0; i < 8; i++) {
        const r = await rig.ask("mem", `question ${i}: add one to a number`, { sessionId: "long", chat: true });
        expect(r.status, JSON.stringify(r.error)).toBe("completed");
      }
      const mainRequests = model.requests.filter((r) => !String(r.messages[0]?.content).startsWith("Summarize"));
      expect(mainRequests).toHaveLength(16);
      for (const r of model.requests) expect(hasNoOrphans(chatMessages(r)), `request ${r.index}`).toBe(true);
      // The context never outgrows the window by more than the newest unit (kept whole).
      const sizes = mainRequests.map((r) => counter.countRequest(chatMessages(r)));
      expect(Math.max(...sizes)).toBeLessThan(400 + 200);
      // Without eviction the last request would hold all 8 questions.
      const last = mainRequests.at(-1)!;
      expect(last.messages.filter((m) => m.role === "user").length).toBeLessThan(8);
      if (policy === "sliding_window") {
        for (const r of mainRequests) expect(r.messages.filter((m) => m.role !== "system").length).toBeLessThanOrEqual(6 + 2);
      }
      if (policy === "summary_first") {
        const summaries = model.requests.filter((r) => String(r.messages[0]?.content).startsWith("Summarize"));
        expect(summaries.length).toBeGreaterThan(0);
        expect(last.messages.some((m) => m.role === "system" && String(m.content).startsWith(SUMMARY_PREFIX))).toBe(true);
        const stored = await (await rig.runtime.memory()).load("mem", "long");
        expect(stored[0]).toMatchObject({ role: "system", content: expect.stringContaining("summary made at request") });
        // The summary's tokens count in the run's usage like any model call.
        const info = await rig.client.request<{ usage: { modelCalls: number } }>("mem", "info_request", null);
        expect(info.usage.modelCalls).toBe(model.requests.length);
      }
    }, 60_000);
  }
});
