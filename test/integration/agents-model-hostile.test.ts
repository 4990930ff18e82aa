import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { createOpenAiModel, ModelErrorCode, ModelResponseTooLargeError, type OpenAiModelConfig } from "../../src/agents/model/index.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { startAgentRig } from "../fixtures/agents/rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

/**
 * A provider that breaks the rules: every test here answers with what a real but hostile
 * (or broken) OpenAI-compatible endpoint could send, through the real `openai` client.
 */

const nats = fileServer();
const USER = [{ role: "user" as const, content: "hi" }];
const FAST = { retry: { baseDelayMs: 5, maxDelayMs: 50 } };

function model(url: string, extra: Partial<OpenAiModelConfig> = {}) {
  return createOpenAiModel({ name: "hostile", baseUrl: url, model: "m", apiKey: "k", maxRetries: 2, ...extra }, FAST);
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (err: unknown) => err,
  );
}

/** A chat-completions endpoint that answers every request with `respond`; counts requests and closed clients. */
async function rawServer(respond: (res: ServerResponse) => void) {
  const stats = { requests: 0, clientClosed: 0 };
  const server = createServer((req, res) => {
    stats.requests++;
    req.resume();
    res.on("close", () => {
      if (!res.writableFinished) stats.clientClosed++;
    });
    req.on("end", () => respond(res));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    stats,
    [Symbol.asyncDispose]: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

function sse(res: ServerResponse, chunks: unknown[]): void {
  res.writeHead(200, { "content-type": "text/event-stream" });
  // A string is sent as is: JSON.stringify cannot write what a broken server can (1e400).
  for (const c of chunks) res.write(`data: ${typeof c === "string" ? c : JSON.stringify(c)}\n\n`);
  res.end("data: [DONE]\n\n");
}

function chunk(delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) {
  return { id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: finish }], ...extra };
}

function completion(message: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return { id: "c", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message, finish_reason: "stop" }], ...extra };
}

/**
 * Writes `text` every millisecond, 800 times (50 MB of 64 KiB pieces), until the client
 * goes: slowly enough that a reader that did not abort would still be reading.
 */
function drip(res: ServerResponse, text: string, sent: { writes: number }): void {
  const timer = setInterval(() => {
    if (sent.writes >= 800 || res.destroyed) {
      clearInterval(timer);
      res.end();
      return;
    }
    sent.writes++;
    res.write(text);
  }, 1);
}

function json(res: ServerResponse, body: unknown): void {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

describe("a hostile provider (real openai client, raw HTTP)", () => {
  it("hostile - a streamed answer past max_response_bytes aborts the request at once, fails MODEL_RESPONSE_TOO_LARGE and is not retried", async () => {
    const piece = "x".repeat(64 * 1024);
    const sent = { writes: 0 };
    await using server = await rawServer((res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      drip(res, `data: ${JSON.stringify(chunk({ content: piece }))}\n\n`, sent);
    });
    const m = await model(server.url, { maxResponseBytes: 256 * 1024 });
    const err = await failure(m.complete({ messages: USER }));
    expect(err).toBeInstanceOf(ModelResponseTooLargeError);
    expect(err).toMatchObject({ code: ModelErrorCode.MODEL_RESPONSE_TOO_LARGE, retryable: false, data: { limitBytes: 256 * 1024 } });
    expect((err as Error).message).toContain("max_response_bytes");
    expect(server.stats.requests).toBe(1);
    await poll(() => (server.stats.clientClosed === 1 ? true : undefined), { timeoutMs: 2000, what: "the aborted request" });
    expect(sent.writes).toBeLessThan(40);
  });

  it("hostile - one giant streamed event (no newline) is cut off after 6x max_response_bytes, not buffered whole", async () => {
    const piece = "x".repeat(64 * 1024);
    const sent = { writes: 0 };
    await using server = await rawServer((res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":"');
      // One line.
      drip(res, piece, sent);
    });
    const m = await model(server.url, { maxResponseBytes: 64 * 1024 });
    const err = await failure(m.complete({ messages: USER }));
    expect(err).toMatchObject({ code: ModelErrorCode.MODEL_RESPONSE_TOO_LARGE, data: { limitBytes: 64 * 1024 } });
    expect(server.stats.requests).toBe(1);
    await poll(() => (server.stats.clientClosed === 1 ? true : undefined), { timeoutMs: 2000, what: "the aborted request" });
    // 6 x 64 KiB + 64 KiB is 7 pieces; the rest is what was in flight when it was cut.
    expect(sent.writes).toBeLessThan(40);
  });

  it("hostile - a non-streamed tool call with 4 MB of arguments fails MODEL_RESPONSE_TOO_LARGE without reading the whole body", async () => {
    await using server = await rawServer((res) =>
      json(
        res,
        completion({
          role: "assistant",
          content: null,
          tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: JSON.stringify({ blob: "y".repeat(4 * 1024 * 1024) }) } }],
        }),
      ),
    );
    const m = await model(server.url, { stream: false });
    const err = await failure(m.complete({ messages: USER }));
    expect(err).toMatchObject({ code: ModelErrorCode.MODEL_RESPONSE_TOO_LARGE, data: { limitBytes: 512 * 1024 } });
    expect(server.stats.requests).toBe(1);
  });

  it("hostile - a non-streamed answer one byte over max_response_bytes fails; one at the limit passes", async () => {
    await using server = await rawServer((res) => json(res, completion({ role: "assistant", content: "z".repeat(2048) })));
    const m = await model(server.url, { stream: false, maxResponseBytes: 2047 });
    expect(await failure(m.complete({ messages: USER }))).toBeInstanceOf(ModelResponseTooLargeError);
    const fits = await model(server.url, { stream: false, maxResponseBytes: 2048 });
    expect((await fits.complete({ messages: USER })).message.content).toHaveLength(2048);
  });

  it("hostile - an agent whose model streams 3 MB ends the run failed (run_failed, run_stream_end, result) and stays Idle", async () => {
    const big = "w".repeat(3 * 1024 * 1024);
    const pieces = big.match(/.{1,65536}/gs)!;
    await using server = await startScriptedModelServer({
      replies: [scriptedReply.text(big, { chunks: pieces }), scriptedReply.text("short")],
    });
    await using rig = await startAgentRig(nats.url, uniqueCluster("hm"), {
      modelUrl: server.url,
      agents: [{ id: "talker", model: "main" }],
    });
    const result = await rig.ask("talker", "say a lot", { runId: "run-big" });
    expect(result.status).toBe("failed");
    expect(result.error?.code).toBe("MODEL_RESPONSE_TOO_LARGE");
    expect(server.requests).toHaveLength(1);
    const ev = await rig.endedEvents("run-big");
    expect(ev.find((e) => e.type === "run_failed")?.data).toMatchObject({ error: { code: "MODEL_RESPONSE_TOO_LARGE" } });
    expect(ev.at(-1)).toMatchObject({ type: "run_stream_end", data: { status: "failed" } });
    const info = await rig.client.request<{ state: string }>("talker", "info_request", null);
    expect(info.state).toBe("Idle");
    expect(await rig.ask("talker", "briefly")).toMatchObject({ status: "completed", output: "short" });
  }, 40_000);

  // Raw JSON text of `usage`: 1e400 parses to Infinity.
  const badUsage = [
    '{"prompt_tokens":-5,"completion_tokens":3}',
    '{"prompt_tokens":10,"completion_tokens":1e400}',
    '{"prompt_tokens":"10","completion_tokens":3}',
    '{"prompt_tokens":10.5,"completion_tokens":3}',
    '{"prompt_tokens":1e300,"completion_tokens":3}',
    '"lots"',
  ];

  it.each(badUsage)("hostile - usage %s is treated as absent, streamed and not", async (usage) => {
    const streamed = JSON.stringify(chunk({ content: "ok" }, "stop")).replace(/}$/, `,"usage":${usage}}`);
    await using sseServer = await rawServer((res) => sse(res, [streamed]));
    const a = await (await model(sseServer.url)).complete({ messages: USER });
    expect(a.message.content).toBe("ok");
    expect(a.usage).toBeUndefined();

    await using jsonServer = await rawServer((res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(completion({ role: "assistant", content: "ok" })).replace(/}$/, `,"usage":${usage}}`));
    });
    const b = await (await model(jsonServer.url, { stream: false })).complete({ messages: USER });
    expect(b.message.content).toBe("ok");
    expect(b.usage).toBeUndefined();
  });

  it("hostile - sane usage still counts, a missing count being 0", async () => {
    await using server = await rawServer((res) => sse(res, [chunk({ content: "ok" }, "stop", { usage: { prompt_tokens: 12 } })]));
    expect((await (await model(server.url)).complete({ messages: USER })).usage).toEqual({ inputTokens: 12, outputTokens: 0 });
  });

  const brokenCompletionCalls: [string, unknown][] = [
    ["a null function name", { id: "a", type: "function", function: { name: null, arguments: "{}" } }],
    ["a numeric function name", { id: "a", type: "function", function: { name: 7, arguments: "{}" } }],
    ["no function at all", { id: "a", type: "function", function: null }],
    ["arguments as an object", { id: "a", type: "function", function: { name: "f", arguments: { x: 1 } } }],
    ["a null call", null],
  ];

  it.each(brokenCompletionCalls)("hostile - a non-streamed tool call with %s is an invalid response, retried as one", async (_what, call) => {
    await using server = await rawServer((res) => json(res, completion({ role: "assistant", content: null, tool_calls: [call] })));
    const err = await failure((await model(server.url, { stream: false })).complete({ messages: USER }));
    expect(err).toMatchObject({ code: "MODEL_CALL_FAILED", retryable: true, data: { reason: "invalid_response", attempts: 3 } });
    expect((err as Error).message).toContain("tool_calls[0]");
    expect(server.stats.requests).toBe(3);
  });

  it("hostile - a non-streamed tool call with a null or numeric id gets a generated one; null or absent arguments are empty", async () => {
    await using server = await rawServer((res) =>
      json(
        res,
        completion({
          role: "assistant",
          content: null,
          tool_calls: [
            { id: null, type: "function", function: { name: "f", arguments: "{}" } },
            { id: 42, type: "function", function: { name: "g", arguments: null } },
            { type: "function", function: { name: "h" } },
          ],
        }),
      ),
    );
    const res = await (await model(server.url, { stream: false })).complete({ messages: USER });
    expect(res.message.toolCalls).toEqual([
      { id: "call_0", name: "f", arguments: "{}" },
      { id: "call_1", name: "g", arguments: "" },
      { id: "call_2", name: "h", arguments: "" },
    ]);
  });

  const brokenFragments: [string, unknown][] = [
    ["a numeric function name", { index: 0, id: "a", function: { name: 7, arguments: "{}" } }],
    ["arguments as an object", { index: 0, id: "a", function: { name: "f", arguments: { x: 1 } } }],
    ["a numeric id", { index: 0, id: 5, function: { name: "f", arguments: "{}" } }],
    ["no name in any fragment", { index: 0, id: "a", function: { arguments: "{}" } }],
    ["a null fragment", null],
  ];

  it.each(brokenFragments)("hostile - a streamed tool call with %s is an invalid response, retried as one", async (_what, fragment) => {
    await using server = await rawServer((res) => sse(res, [chunk({ tool_calls: [fragment] }), chunk({}, "tool_calls")]));
    const err = await failure((await model(server.url)).complete({ messages: USER }));
    expect(err).toMatchObject({ code: "MODEL_CALL_FAILED", retryable: true, data: { reason: "invalid_response", attempts: 3 } });
    expect(server.stats.requests).toBe(3);
  });

  it("hostile - a streamed tool-call index of 2^40 is just a key: the call completes, in index order", async () => {
    await using server = await rawServer((res) =>
      sse(res, [
        chunk({ tool_calls: [{ index: 2 ** 40, id: "far", function: { name: "f", arguments: "{}" } }] }),
        chunk({ tool_calls: [{ index: 3, id: "near", function: { name: "g", arguments: "{}" } }] }, "tool_calls"),
      ]),
    );
    const started = performance.now();
    const res = await (await model(server.url)).complete({ messages: USER });
    // A dense array or a walk over the indices would take hours (or throw) at 2^40.
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(res.message.toolCalls?.map((c) => c.id)).toEqual(["near", "far"]);
  });

  it.each([-1, 1.5, "0"])("hostile - a streamed tool-call index of %j is an invalid response", async (index) => {
    await using server = await rawServer((res) =>
      sse(res, [chunk({ tool_calls: [{ index, id: "a", function: { name: "f", arguments: "{}" } }] }), chunk({}, "tool_calls")]),
    );
    const err = await failure((await model(server.url)).complete({ messages: USER }));
    expect(err).toMatchObject({ code: "MODEL_CALL_FAILED", data: { reason: "invalid_response" } });
    expect((err as Error).message).toContain("index");
  });

  it("hostile - more than 1000 streamed tool calls in one response is an invalid response", async () => {
    const calls = Array.from({ length: 1001 }, (_, i) => ({ index: i * 1000, id: `c${i}`, function: { name: "f", arguments: "{}" } }));
    await using server = await rawServer((res) => sse(res, [chunk({ tool_calls: calls }), chunk({}, "tool_calls")]));
    const err = await failure((await model(server.url)).complete({ messages: USER }));
    expect(err).toMatchObject({ code: "MODEL_CALL_FAILED", data: { reason: "invalid_response" } });
    expect((err as Error).message).toContain("more than 1000 tool calls");
  });

  it.each([
    ["text/html; charset=utf-8", "<html><body>Sign in to continue</body></html>"],
    ["application/json", JSON.stringify(completion({ role: "assistant", content: "not streamed" }))],
    [undefined, "data: nothing\n\n"],
  ])("hostile - a 200 answer of type %s to a streaming request is an invalid response naming the type and base_url", async (type, body) => {
    await using server = await rawServer((res) => {
      res.writeHead(200, type ? { "content-type": type } : {});
      res.end(body);
    });
    const err = await failure((await model(server.url)).complete({ messages: USER }));
    expect(err).toMatchObject({ code: "MODEL_CALL_FAILED", data: { reason: "invalid_response", attempts: 3 } });
    const message = (err as Error).message;
    expect(message).toContain(type ? `content type ${type}` : "no content type");
    expect(message).toContain("not text/event-stream");
    expect(message).toContain("check base_url");
    expect(message).not.toContain("proxies");
  });

  it("hostile - text/event-stream with a charset parameter is a stream", async () => {
    await using server = await rawServer((res) => {
      res.writeHead(200, { "content-type": "Text/Event-Stream; charset=utf-8" });
      res.end(`data: ${JSON.stringify(chunk({ content: "fine" }, "stop"))}\n\ndata: [DONE]\n\n`);
    });
    expect((await (await model(server.url)).complete({ messages: USER })).message.content).toBe("fine");
  });
});
