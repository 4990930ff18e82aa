import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { ChatStreamAssembler, StreamIncompleteError } from "../../src/agents/model/openai-wire.js";
import { retryAfterMs, retryDelayMs } from "../../src/agents/model/retry.js";
import { createOpenAiModel, publicEndpoint } from "../../src/agents/model/index.js";
import { ArgumentError } from "../../src/core/errors.js";

type Chunk = OpenAI.Chat.ChatCompletionChunk;
type Delta = OpenAI.Chat.ChatCompletionChunk.Choice.Delta;

function chunk(delta: Delta, finish: Chunk["choices"][number]["finish_reason"] = null): Chunk {
  return { id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] };
}

const headers = (h: Record<string, string>) => new Headers(h);

describe("retry timing", () => {
  it("retry - reads Retry-After as seconds or an HTTP date, and retry-after-ms first", () => {
    const now = Date.parse("2025-01-01T00:00:00Z");
    expect(retryAfterMs(headers({ "retry-after": "2" }), now)).toBe(2000);
    expect(retryAfterMs(headers({ "retry-after": "0.25" }), now)).toBe(250);
    expect(retryAfterMs(headers({ "retry-after": "Wed, 01 Jan 2025 00:00:07 GMT" }), now)).toBe(7000);
    expect(retryAfterMs(headers({ "retry-after": "Tue, 31 Dec 2024 23:00:00 GMT" }), now)).toBe(0);
    expect(retryAfterMs(headers({ "retry-after-ms": "120.5", "retry-after": "9" }), now)).toBe(121);
    expect(retryAfterMs(headers({ "retry-after": "soon" }), now)).toBeUndefined();
    expect(retryAfterMs(headers({ "retry-after": "-3" }), now)).toBeUndefined();
    expect(retryAfterMs(headers({}), now)).toBeUndefined();
    expect(retryAfterMs(undefined, now)).toBeUndefined();
  });

  it("retry - waits at least the hint plus at most 10% jitter, and gives up on hints past the cap", () => {
    const policy = { baseDelayMs: 100, maxDelayMs: 10_000 };
    expect(retryDelayMs(1, 1000, policy, () => 0)).toBe(1000);
    expect(retryDelayMs(1, 1000, policy, () => 0.999)).toBe(1100);
    expect(retryDelayMs(1, 10_001, policy, () => 0)).toBeUndefined();
  });

  it("retry - without a hint, backs off exponentially with jitter up to the cap", () => {
    const policy = { baseDelayMs: 100, maxDelayMs: 1_000 };
    const top = (attempt: number) => retryDelayMs(attempt, undefined, policy, () => 1)!;
    const bottom = (attempt: number) => retryDelayMs(attempt, undefined, policy, () => 0)!;
    expect([1, 2, 3, 4, 5, 6].map(top)).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect([1, 2, 3].map(bottom)).toEqual([50, 100, 200]);
  });
});

describe("stream assembly", () => {
  it("wire - a call without index continues the last call unless it brings a new id", () => {
    const a = new ChatStreamAssembler("m");
    a.push(chunk({ tool_calls: [{ id: "x", function: { name: "one", arguments: '{"a"' } } as never] }));
    a.push(chunk({ tool_calls: [{ function: { arguments: ":1}" } } as never] }));
    a.push(chunk({ tool_calls: [{ id: "y", function: { name: "two", arguments: "{}" } } as never] }, "tool_calls"));
    expect(a.result().message.toolCalls).toEqual([
      { id: "x", name: "one", arguments: '{"a":1}' },
      { id: "y", name: "two", arguments: "{}" },
    ]);
  });

  it("wire - a name sent again with every fragment is kept once; a call without id gets one", () => {
    const a = new ChatStreamAssembler("m");
    a.push(chunk({ tool_calls: [{ index: 0, function: { name: "lookup", arguments: '{"q":' } }] }));
    a.push(chunk({ tool_calls: [{ index: 0, function: { name: "lookup", arguments: '"nats"}' } }] }, "tool_calls"));
    expect(a.result().message.toolCalls).toEqual([{ id: "call_0", name: "lookup", arguments: '{"q":"nats"}' }]);
  });

  it("wire - a stream without a finish reason is incomplete", () => {
    const a = new ChatStreamAssembler("m");
    a.push(chunk({ role: "assistant", content: "Hal" }));
    expect(() => a.result()).toThrow(StreamIncompleteError);
  });

  it("wire - the usage chunk and the served model name are picked up", () => {
    const a = new ChatStreamAssembler("alias");
    a.push({ ...chunk({ content: "hi" }, "stop"), model: "gpt-4o-2024-08-06" });
    a.push({
      id: "c",
      object: "chat.completion.chunk",
      created: 0,
      model: "gpt-4o-2024-08-06",
      choices: [],
      usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
    });
    expect(a.result()).toEqual({
      message: { role: "assistant", content: "hi" },
      finishReason: "stop",
      usage: { inputTokens: 9, outputTokens: 1 },
      model: "gpt-4o-2024-08-06",
    });
  });

  it("wire - a model with a base URL that is not a URL is refused at construction", async () => {
    const err = await createOpenAiModel({ name: "x", baseUrl: "llm.example.com", model: "m" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ArgumentError);
    expect((err as Error).message).toContain("baseUrl");
  });

  it("wire - errors and logs show the endpoint without credentials or query", () => {
    expect(publicEndpoint("https://user:secret@llm.example.com/v1/?api-key=abc")).toBe("https://llm.example.com/v1");
    expect(publicEndpoint("http://127.0.0.1:11434/v1")).toBe("http://127.0.0.1:11434/v1");
  });
});
