import { encodeChat as encodeChatGpt4o } from "gpt-tokenizer/model/gpt-4o";
import { describe, expect, it } from "vitest";
import { addCost, type ChatMessage, costOf, encodingForModel, loadTokenCounter, ZERO_COST } from "../../src/agents/model/index.js";

// The example conversation of OpenAI's cookbook "How to count tokens with tiktoken", whose
// published counts (checked there against the API's prompt_tokens) are 129 for gpt-4 and
// gpt-3.5-turbo-0613, and 124 for gpt-4o.
const COOKBOOK: ChatMessage[] = [
  { role: "system", content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English." },
  { role: "system", name: "example_user", content: "New synergies will help drive top-line growth." },
  { role: "system", name: "example_assistant", content: "Things working well together will increase revenue." },
  {
    role: "system",
    name: "example_user",
    content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
  },
  { role: "system", name: "example_assistant", content: "Let's talk later when we're less busy about how to do better." },
  { role: "user", content: "This late pivot means we don't have time to boil the ocean for the client deliverable." },
];

describe("token counting", () => {
  it("tokens - picks the encoding by model name, o200k_base for current and unknown models", async () => {
    expect(await encodingForModel("gpt-4")).toBe("cl100k_base");
    expect(await encodingForModel("gpt-4-0613")).toBe("cl100k_base");
    expect(await encodingForModel("gpt-3.5-turbo-0125")).toBe("cl100k_base");
    expect(await encodingForModel("gpt-35-turbo")).toBe("cl100k_base");
    expect(await encodingForModel("gpt-4o")).toBe("o200k_base");
    expect(await encodingForModel("gpt-4o-2024-08-06")).toBe("o200k_base");
    expect(await encodingForModel("openai/gpt-4.1-mini")).toBe("o200k_base");
    expect(await encodingForModel("llama3.1:8b")).toBe("o200k_base");
    expect(await encodingForModel("text-davinci-003")).toBe("p50k_base");
  });

  it("tokens - matches the OpenAI cookbook's counts for its example conversation", async () => {
    expect((await loadTokenCounter("gpt-4")).countRequest(COOKBOOK)).toBe(129);
    expect((await loadTokenCounter("gpt-3.5-turbo-0613")).countRequest(COOKBOOK)).toBe(129);
    expect((await loadTokenCounter("gpt-4o")).countRequest(COOKBOOK)).toBe(124);
  });

  it("tokens - agrees with gpt-tokenizer's own chat encoding for plain messages", async () => {
    const counter = await loadTokenCounter("gpt-4o");
    const chat = [
      { role: "system" as const, content: "You are terse." },
      { role: "user" as const, content: "Summarise the NATS 2.11 release notes, please." },
      { role: "assistant" as const, content: "Per-message TTLs, subject transforms in mirrors, and faster consumers." },
      { role: "user" as const, content: "Anything about JetStream?" },
    ];
    expect(counter.countRequest(chat)).toBe(encodeChatGpt4o(chat).length);
  });

  it("tokens - counts tool calls, tool results and tool definitions", async () => {
    const counter = await loadTokenCounter("gpt-4o-mini");
    const call: ChatMessage = {
      role: "assistant",
      content: null,
      toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' }],
    };
    const result: ChatMessage = { role: "tool", toolCallId: "call_1", content: '{"sky":"sunny"}' };
    expect(counter.countMessage(call)).toBe(3 + counter.countText("assistant") + counter.countText("get_weather") + counter.countText('{"city":"Paris"}') + 3);
    expect(counter.countMessage(result)).toBe(3 + counter.countText("tool") + counter.countText('{"sky":"sunny"}'));

    const messages: ChatMessage[] = [{ role: "user", content: "weather?" }];
    const tools = [
      {
        name: "get_weather",
        description: "Current weather of a city",
        parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] },
      },
    ];
    const withTools = counter.countRequest(messages, tools);
    expect(withTools - counter.countRequest(messages)).toBeGreaterThan(counter.countText("Current weather of a city get_weather city"));
  });

  it("tokens - text that looks like a special token is counted as text, not refused", async () => {
    const counter = await loadTokenCounter("gpt-4o");
    expect(counter.countText("<|endoftext|> and <|im_start|>")).toBeGreaterThan(5);
  });

  it("tokens - text without breaks or of megabytes is estimated in well under a second, ordinary text stays exact", async () => {
    const counter = await loadTokenCounter("gpt-4o");
    const encoder = await import("gpt-tokenizer/encoding/o200k_base");
    // BPE is quadratic in one unbroken run: before the bound, 100k chars took 11 s.
    for (const text of ["B".repeat(1_000_000), `${"word ".repeat(1_000_000)}${"x".repeat(5_000_000)}`, " ".repeat(200_000)]) {
      const started = performance.now();
      const n = counter.countText(text);
      // Linear work takes ~0.1 s here; the quadratic path took minutes for these sizes, so a
      // loaded machine cannot blur the two.
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(n).toBeGreaterThanOrEqual(Math.ceil(text.length / 4));
    }
    // A long run inside ordinary text is estimated (over, never under) and the rest stays exact.
    const prose = "The agent reasons about the task and cites sources. ".repeat(50);
    expect(counter.countText(prose)).toBe(encoder.countTokens(prose));
    const withRun = `${prose}${"B".repeat(10_000)}`;
    expect(counter.countText(withRun)).toBeGreaterThanOrEqual(encoder.countTokens(withRun));
    expect(counter.countText("漢字".repeat(5_000))).toBeGreaterThanOrEqual(10_000);
  });

  it("tokens - recounting a history reuses each message's count (messages are immutable once appended)", async () => {
    const counter = await loadTokenCounter("gpt-4o");
    const history: ChatMessage[] = Array.from({ length: 400 }, (_, i) => ({
      role: i % 2 === 0 ? "user" : "assistant",
      content: `Turn ${i}: ${"the agent reasons about the task and cites sources. ".repeat(10)}`,
    }));
    const first = counter.countRequest(history);
    const next: ChatMessage = { role: "user", content: "one more" };
    expect(counter.countRequest([...history, next])).toBe(first + counter.countMessage(next));
    // The count is kept per message object: changing one in place is not seen, a new object is.
    const edited = history[0] as { content: string };
    edited.content = "short";
    expect(counter.countRequest(history)).toBe(first);
    expect(counter.countRequest([{ ...history[0]! }, ...history.slice(1)])).toBeLessThan(first);
  });
});

describe("cost", () => {
  it("cost - prices input and output per million tokens", () => {
    const c = costOf({ inputTokens: 12_000, outputTokens: 3_000 }, { inputPerMtok: 0.4, outputPerMtok: 1.6 });
    expect(c).toEqual({ input: 0.0048, output: 0.0048, total: 0.0096 });
    expect(addCost(addCost(ZERO_COST, c), c)).toEqual({ input: 0.0096, output: 0.0096, total: 0.0192 });
  });

  it("cost - sums of many small calls stay exact to a nano-dollar", () => {
    let total = ZERO_COST;
    for (let i = 0; i < 1000; i++) total = addCost(total, costOf({ inputTokens: 1, outputTokens: 1 }, { inputPerMtok: 0.1, outputPerMtok: 0.3 }));
    expect(total).toEqual({ input: 0.0001, output: 0.0003, total: 0.0004 });
  });
});
