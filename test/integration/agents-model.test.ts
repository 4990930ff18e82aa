import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import {
  createOpenAiModel,
  ModelCallAbortedError,
  ModelCallError,
  ModelCallScheduler,
  type ModelDelta,
  type OpenAiModelConfig,
  type RetryInfo,
} from "../../src/agents/model/index.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

const USER = [{ role: "user" as const, content: "What is the weather in Paris?" }];
// Short backoff so retry tests take milliseconds; Retry-After tests set their own hint.
const FAST = { retry: { baseDelayMs: 5, maxDelayMs: 5_000 } };

function model(url: string, extra: Partial<OpenAiModelConfig> = {}) {
  return createOpenAiModel({ name: "fast", baseUrl: url, model: "scripted-model", apiKey: "test-key", ...extra }, FAST);
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (err: unknown) => err,
  );
}

describe("agents model over the real openai client and the scripted server", () => {
  it("openai model - streams text deltas in order and reports usage", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text("It is sunny.", { chunks: ["It", " is", " sun", "ny."], usage: { inputTokens: 17, outputTokens: 4 } })],
    });
    const m = await model(server.url);
    const deltas: ModelDelta[] = [];
    const res = await m.complete({ messages: USER, onDelta: (d) => deltas.push(d), maxTokens: 50, temperature: 0 });

    expect(deltas).toEqual([
      { type: "text", text: "It" },
      { type: "text", text: " is" },
      { type: "text", text: " sun" },
      { type: "text", text: "ny." },
    ]);
    expect(res).toEqual({
      message: { role: "assistant", content: "It is sunny." },
      finishReason: "stop",
      usage: { inputTokens: 17, outputTokens: 4 },
      model: "scripted-model",
      attempts: 1,
    });
    const [req] = server.requests;
    expect(req!.stream).toBe(true);
    expect(req!.body!.stream_options).toEqual({ include_usage: true });
    expect(req!.body!.max_tokens).toBe(50);
    expect(req!.body!.temperature).toBe(0);
    expect(req!.messages).toEqual([{ role: "user", content: "What is the weather in Paris?" }]);
    expect(req!.headers.authorization).toBe("Bearer test-key");
  });

  it("openai model - assembles several tool calls whose arguments arrive split across chunks", async () => {
    await using server = await startScriptedModelServer({
      replies: [
        scriptedReply.toolCalls([
          { id: "call_a", name: "get_weather", arguments: '{"city":"Paris","unit":"C"}', argumentChunks: ['{"ci', 'ty":"Par', 'is","unit":"C"}'] },
          { id: "call_b", name: "get_time", arguments: { zone: "Europe/Paris" } },
        ]),
        scriptedReply.text("Sunny, 21 C, 14:00."),
      ],
    });
    const m = await model(server.url);
    const deltas: ModelDelta[] = [];
    const tools = [
      { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } } } },
      { name: "get_time", description: "Time in a zone", parameters: { type: "object", properties: { zone: { type: "string" } } } },
    ];
    const first = await m.complete({ messages: USER, tools, onDelta: (d) => deltas.push(d) });

    expect(first.finishReason).toBe("tool_calls");
    expect(first.message).toEqual({
      role: "assistant",
      content: null,
      toolCalls: [
        { id: "call_a", name: "get_weather", arguments: '{"city":"Paris","unit":"C"}' },
        { id: "call_b", name: "get_time", arguments: '{"zone":"Europe/Paris"}' },
      ],
    });
    const fragments = deltas.filter((d) => d.type === "tool_call");
    expect(fragments.filter((d) => d.index === 0).map((d) => d.arguments)).toEqual(["", '{"ci', 'ty":"Par', 'is","unit":"C"}']);
    expect(fragments.filter((d) => d.index === 1).length).toBeGreaterThan(2);
    expect(fragments[0]).toMatchObject({ index: 0, id: "call_a", name: "get_weather" });
    expect(server.requests[0]!.tools.map((t) => t.function.name)).toEqual(["get_weather", "get_time"]);

    // The answers go back in the wire form the provider expects.
    await m.complete({
      messages: [
        ...USER,
        first.message,
        { role: "tool", toolCallId: "call_a", content: '{"sky":"sunny","temp":21}' },
        { role: "tool", toolCallId: "call_b", content: '"14:00"' },
      ],
      tools,
    });
    expect(server.requests[1]!.messages.slice(1)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris","unit":"C"}' } },
          { id: "call_b", type: "function", function: { name: "get_time", arguments: '{"zone":"Europe/Paris"}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_a", content: '{"sky":"sunny","temp":21}' },
      { role: "tool", tool_call_id: "call_b", content: '"14:00"' },
    ]);
  });

  it("openai model - non-streaming mode reads one chat.completion with tool calls and usage", async () => {
    await using server = await startScriptedModelServer({
      replies: [
        scriptedReply.toolCalls([{ id: "c1", name: "clock_now", arguments: "{}" }], {
          content: "Let me check.",
          usage: { inputTokens: 30, outputTokens: 9 },
          model: "scripted-model-2025",
        }),
      ],
    });
    const m = await model(server.url, { stream: false });
    const deltas: ModelDelta[] = [];
    const res = await m.complete({ messages: USER, onDelta: (d) => deltas.push(d) });

    expect(server.requests[0]!.stream).toBe(false);
    expect(res.message).toEqual({ role: "assistant", content: "Let me check.", toolCalls: [{ id: "c1", name: "clock_now", arguments: "{}" }] });
    expect(res.usage).toEqual({ inputTokens: 30, outputTokens: 9 });
    expect(res.model).toBe("scripted-model-2025");
    expect(deltas).toEqual([]);
  });

  it("openai model - a provider that sends no usage gives a response without usage", async () => {
    await using server = await startScriptedModelServer({ replies: [scriptedReply.text("hi", { usage: null })] });
    const res = await (await model(server.url)).complete({ messages: USER });
    expect(res.message.content).toBe("hi");
    expect(res.usage).toBeUndefined();
  });

  it("openai model - a 429 with Retry-After: 1 is retried after at least a second and succeeds", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.error(429, { retryAfter: 1, message: "slow down" }), scriptedReply.text("ok")],
    });
    const retries: RetryInfo[] = [];
    const res = await (await model(server.url)).complete({ messages: USER, onRetry: (r) => retries.push(r) });

    expect(res.message.content).toBe("ok");
    expect(res.attempts).toBe(2);
    expect(server.requests).toHaveLength(2);
    expect(server.requests[1]!.at - server.requests[0]!.endedAt!).toBeGreaterThanOrEqual(1000);
    expect(retries).toHaveLength(1);
    expect(retries[0]).toMatchObject({ attempt: 1, reason: "rate_limited", status: 429, retryAfterMs: 1000 });
    expect(retries[0]!.delayMs).toBeGreaterThanOrEqual(1000);
  });

  it("openai model - retry-after-ms is honoured before Retry-After", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.error(503, { headers: { "retry-after-ms": "300", "retry-after": "20" } }), scriptedReply.text("ok")],
    });
    const retries: RetryInfo[] = [];
    const res = await (await model(server.url)).complete({ messages: USER, onRetry: (r) => retries.push(r) });
    expect(res.attempts).toBe(2);
    expect(retries[0]).toMatchObject({ reason: "server_error", status: 503, retryAfterMs: 300 });
    expect(server.requests[1]!.at - server.requests[0]!.endedAt!).toBeGreaterThanOrEqual(300);
  });

  it("openai model - a Retry-After longer than the cap fails at once, retryable, with the hint", async () => {
    await using server = await startScriptedModelServer({ replies: [scriptedReply.error(429, { retryAfter: 3600 })] });
    const err = await failure((await model(server.url)).complete({ messages: USER }));
    expect(err).toBeInstanceOf(ModelCallError);
    const e = err as ModelCallError;
    expect(e.retryable).toBe(true);
    expect(e.data).toMatchObject({ reason: "rate_limited", status: 429, attempts: 1, retryAfterMs: 3_600_000 });
    expect(server.requests).toHaveLength(1);
  });

  it("openai model - a connection dropped mid-stream is retried, and the partial deltas are voided by a restart", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.drop(3, scriptedReply.text("Partial answer that never ends")), scriptedReply.text("Whole answer.")],
    });
    const deltas: ModelDelta[] = [];
    const retries: RetryInfo[] = [];
    const res = await (await model(server.url)).complete({ messages: USER, onDelta: (d) => deltas.push(d), onRetry: (r) => retries.push(r) });

    expect(res.message.content).toBe("Whole answer.");
    expect(res.attempts).toBe(2);
    expect(server.requests.map((r) => r.outcome)).toEqual(["drop", "completion"]);
    expect(retries[0]!.reason).toBe("stream_interrupted");
    expect(deltas).toEqual([
      { type: "text", text: "Partial" },
      { type: "text", text: " answer" },
      { type: "restart", attempt: 2 },
      { type: "text", text: "Whole" },
      { type: "text", text: " answer." },
    ]);
  });

  it("openai model - five consecutive 500s end in MODEL_CALL_FAILED naming model and status; the endpoint is in its data, not its message (which reaches end users)", async () => {
    const fiveErrors = Array.from({ length: 5 }, () => scriptedReply.error(500, { message: "upstream exploded" }));
    await using server = await startScriptedModelServer({ replies: [...fiveErrors, scriptedReply.text("too late")] });
    const err = await failure((await model(server.url, { maxRetries: 4 })).complete({ messages: USER }));

    expect(err).toBeInstanceOf(ModelCallError);
    const e = err as ModelCallError;
    expect(e.code).toBe("MODEL_CALL_FAILED");
    expect(e.retryable).toBe(true);
    expect(e.data).toEqual({ name: "fast", model: "scripted-model", endpoint: server.url, reason: "server_error", status: 500, attempts: 5 });
    expect(e.message).toContain("scripted-model");
    expect(e.message).not.toContain(server.url);
    expect(e.message).not.toContain("127.0.0.1");
    expect(e.message).toContain("HTTP 500");
    expect(e.message).toContain("upstream exploded");
    expect(server.requests).toHaveLength(5);
    expect(server.pendingReplies).toBe(1);
  });

  it("openai model - a 401 fails at once, not retryable, and says to check the key", async () => {
    await using server = await startScriptedModelServer({ apiKey: "right-key", replies: [scriptedReply.text("never")] });
    const err = await failure((await model(server.url, { apiKey: "wrong-key" })).complete({ messages: USER }));

    expect(err).toBeInstanceOf(ModelCallError);
    const e = err as ModelCallError;
    expect(e.retryable).toBe(false);
    expect(e.data).toMatchObject({ reason: "rejected", status: 401, attempts: 1 });
    expect(e.message).toContain("api_key_env");
    expect(e.message).not.toContain("wrong-key");
    expect(server.requests.map((r) => r.outcome)).toEqual(["unauthorized"]);
  });

  it("openai model - a 400 is not retried, and the provider's error code is kept", async () => {
    const tooLong = {
      error: { message: "maximum context length is 8192 tokens", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" },
    };
    await using server = await startScriptedModelServer({ replies: [scriptedReply.error(400, { body: tooLong }), scriptedReply.text("no")] });
    const err = (await failure((await model(server.url)).complete({ messages: USER }))) as ModelCallError;
    expect(err.data).toMatchObject({ reason: "rejected", status: 400, attempts: 1, providerCode: "context_length_exceeded" });
    expect(err.retryable).toBe(false);
    expect(err.message).toContain("maximum context length");
    expect(server.requests).toHaveLength(1);
  });

  it("openai model - a call slower than timeout_ms fails with reason timeout and the request is cut", async () => {
    await using server = await startScriptedModelServer({ replies: [scriptedReply.text("late", { latencyMs: 10_000 })] });
    const started = performance.now();
    const err = (await failure((await model(server.url, { timeoutMs: 300, maxRetries: 0 })).complete({ messages: USER }))) as ModelCallError;

    expect(err).toBeInstanceOf(ModelCallError);
    expect(err.data).toMatchObject({ reason: "timeout", attempts: 1 });
    expect(err.retryable).toBe(true);
    expect(performance.now() - started).toBeLessThan(8_000); // the timeout, not the 10 s reply
    await poll(() => server.requests[0]?.clientClosed, { timeoutMs: 5_000, what: "the server to see the client leave" });
  });

  it("openai model - a timed-out attempt is retried and the next one succeeds", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text("slow", { latencyMs: 60_000 }), scriptedReply.text("fast")],
    });
    // 3 s leaves a loaded machine room to answer the second attempt inside its timeout.
    const res = await (await model(server.url, { timeoutMs: 3_000, maxRetries: 2 })).complete({ messages: USER });
    expect(res.message.content).toBe("fast");
    expect(res.attempts).toBe(2);
  });

  it("openai model - the stream's time counts too: a stream that stalls past timeout_ms times out", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text("one two three four", { chunkDelayMs: 400 })],
    });
    const err = (await failure((await model(server.url, { timeoutMs: 500, maxRetries: 0 })).complete({ messages: USER }))) as ModelCallError;
    expect(err.data).toMatchObject({ reason: "timeout", attempts: 1 });
  });

  it("openai model - aborting the signal aborts the HTTP request", async () => {
    await using server = await startScriptedModelServer({ replies: [scriptedReply.text("never sent", { latencyMs: 10_000 })] });
    const m = await model(server.url);
    const controller = new AbortController();
    const call = failure(m.complete({ messages: USER, signal: controller.signal }));
    await server.waitForRequests(1);
    controller.abort(new Error("user pressed stop"));
    const err = await call;

    expect(err).toBeInstanceOf(ModelCallAbortedError);
    expect((err as ModelCallAbortedError).code).toBe("MODEL_CALL_ABORTED");
    await poll(() => server.requests[0]?.clientClosed, { timeoutMs: 5_000, what: "the server to see the request cut" });
    expect(server.requests).toHaveLength(1);
  });

  it("openai model - aborting mid-stream stops the stream and is not retried", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text("a b c d e f g h", { chunkDelayMs: 100 }), scriptedReply.text("retry must not happen")],
    });
    const controller = new AbortController();
    const deltas: ModelDelta[] = [];
    const err = await failure(
      (await model(server.url)).complete({
        messages: USER,
        signal: controller.signal,
        onDelta: (d) => {
          deltas.push(d);
          if (deltas.length === 2) controller.abort();
        },
      }),
    );
    expect(err).toBeInstanceOf(ModelCallAbortedError);
    await poll(() => server.requests[0]?.clientClosed, { timeoutMs: 5_000, what: "the server to see the stream cut" });
    expect(server.requests).toHaveLength(1);
  });

  it("openai model - a refused connection is retried and then fails with reason connection", async () => {
    const server = await startScriptedModelServer();
    const url = server.url;
    await server.close();
    const err = (await failure((await model(url, { maxRetries: 2 })).complete({ messages: USER }))) as ModelCallError;
    expect(err.data).toMatchObject({ reason: "connection", attempts: 3, endpoint: url });
    expect(err.data.status).toBeUndefined();
  });

  it("openai model - a slot is held per attempt, not across the backoff: another call runs while one waits out a 429", async () => {
    await using server = await startScriptedModelServer({
      handler: (req) => {
        const agent = req.headers["x-kova-agent"];
        if (agent === "a" && !server.requests.some((r) => r.index < req.index && r.headers["x-kova-agent"] === "a")) {
          return scriptedReply.error(429, { retryAfter: "0.5" });
        }
        return scriptedReply.text(`hello ${agent}`);
      },
    });
    const scheduler = new ModelCallScheduler([["fast", { maxConcurrency: 1 }]]);
    const m = await model(server.url);
    const callA = m.complete({ messages: USER, headers: { "x-kova-agent": "a" }, acquireSlot: scheduler.slotFor({ model: "fast", agentId: "a" }) });
    await server.waitForRequests(1);
    const callB = m.complete({ messages: USER, headers: { "x-kova-agent": "b" }, acquireSlot: scheduler.slotFor({ model: "fast", agentId: "b" }) });
    const [a, b] = await Promise.all([callA, callB]);

    expect(a.message.content).toBe("hello a");
    expect(b.message.content).toBe("hello b");
    expect(server.requests.map((r) => `${r.headers["x-kova-agent"]}:${r.outcome}`)).toEqual(["a:error", "b:completion", "a:completion"]);
    expect(scheduler.stats()[0]).toMatchObject({ inFlight: 0, queued: 0, granted: 3 });
  });
});

describe("scripted model server", () => {
  it("scripted server - a request with no reply left gets a 500 that says so, and is logged", async () => {
    await using server = await startScriptedModelServer();
    const err = (await failure((await model(server.url, { maxRetries: 0 })).complete({ messages: USER }))) as ModelCallError;
    expect(err.message).toContain("no reply left for request #0");
    expect(server.requests[0]).toMatchObject({ outcome: "script_empty", status: 500, model: "scripted-model" });
  });

  it("scripted server - queued replies go first, then the handler routes by model and last message", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text("from the queue")],
      handler: (req) => (req.model === "big" ? scriptedReply.text(`big saw ${String(req.lastMessage?.content)}`) : undefined),
    });
    const client = new OpenAI({ baseURL: server.url, apiKey: "k", maxRetries: 0 });
    const ask = async (modelId: string, content: string) =>
      (await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content }] })).choices[0]!.message.content;

    expect(await ask("big", "one")).toBe("from the queue");
    expect(await ask("big", "two")).toBe("big saw two");
    await expect(ask("small", "three")).rejects.toThrow(/no reply left/);
    expect(server.requests.map((r) => r.outcome)).toEqual(["completion", "completion", "script_empty"]);
  });

  it("scripted server - a handler that throws gets the request a 500 naming the handler", async () => {
    await using server = await startScriptedModelServer({
      handler: () => {
        throw new Error("routing table missing");
      },
    });
    const client = new OpenAI({ baseURL: server.url, apiKey: "k", maxRetries: 0 });
    await expect(client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] })).rejects.toThrow(
      /handler threw for request #0: Error: routing table missing/,
    );
    expect(server.requests[0]).toMatchObject({ outcome: "handler_error", status: 500 });
  });

  it("scripted server - streams SSE chunks a raw openai client reads, with a usage chunk only when asked", async () => {
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text("a b", { usage: { inputTokens: 5, outputTokens: 2 } }), scriptedReply.text("c")],
    });
    const client = new OpenAI({ baseURL: server.url, apiKey: "k", maxRetries: 0 });
    const withUsage = [];
    for await (const chunk of await client.chat.completions.create({
      model: "m",
      messages: [{ role: "user", content: "x" }],
      stream: true,
      stream_options: { include_usage: true },
    })) {
      withUsage.push(chunk);
    }
    expect(withUsage.map((c) => c.object)).toEqual(Array(withUsage.length).fill("chat.completion.chunk"));
    expect(withUsage.at(-1)!.usage).toEqual({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
    expect(withUsage.at(-2)!.choices[0]!.finish_reason).toBe("stop");

    const without = [];
    for await (const chunk of await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }], stream: true })) {
      without.push(chunk);
    }
    expect(without.some((c) => c.usage)).toBe(false);
    expect(without.at(-1)!.choices[0]!.finish_reason).toBe("stop");
  });

  it("scripted server - lists its models and rejects a body that is not a chat request", async () => {
    await using server = await startScriptedModelServer({ models: ["alpha", "beta"] });
    const client = new OpenAI({ baseURL: server.url, apiKey: "k", maxRetries: 0 });
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(["alpha", "beta"]);

    const res = await fetch(`${server.url}/chat/completions`, { method: "POST", body: "not json", headers: { "content-type": "application/json" } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    expect(server.requests[0]).toMatchObject({ outcome: "invalid", status: 400 });
  });

  it("scripted server - close() cuts a reply still waiting on its latency", async () => {
    const server = await startScriptedModelServer({ latencyMs: 30_000, replies: [scriptedReply.text("never")] });
    const client = new OpenAI({ baseURL: server.url, apiKey: "k", maxRetries: 0 });
    const pending = client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    await server.waitForRequests(1);
    const started = performance.now();
    await server.close();
    expect(await pending).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(performance.now() - started).toBeLessThan(15_000); // the close, not the 30 s latency
  });
});
