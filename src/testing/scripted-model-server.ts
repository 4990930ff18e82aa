import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { type RenderContext, renderChunks, renderCompletion, type ScriptedCompletion, type ScriptedReply } from "./scripted-model-replies.js";

/**
 * A local HTTP server that speaks the OpenAI chat-completions wire protocol with scripted
 * replies, so a test runs the real `openai` client (and Kova's agent code) over real HTTP:
 *
 * ```ts
 * await using server = await startScriptedModelServer({
 *   replies: [scriptedReply.error(429, { retryAfter: 1 }), scriptedReply.text("hello")],
 * });
 * const client = new OpenAI({ baseURL: server.url, apiKey: "test" });
 * // ... run the code under test, then:
 * expect(server.requests).toHaveLength(2);
 * ```
 *
 * Endpoints: `POST /v1/chat/completions` (JSON with `stream: false`, SSE with
 * `stream: true`, a usage chunk when `stream_options.include_usage`) and `GET /v1/models`.
 *
 * Each chat request is answered by the first of: the next queued reply (`replies`,
 * `enqueue`), else the handler (`handler`, `setHandler`) when it returns a reply. When
 * neither has one the script has run dry: the request gets a 500 whose message says so,
 * and its log entry has outcome `script_empty`.
 */
export interface ScriptedModelServerOptions {
  /** Replies served in order, one per chat request. */
  replies?: ScriptedReply[];
  /** Answers requests the queue does not (route by model, last message, headers...). */
  handler?: ScriptedHandler;
  /** Default wait before each response starts (default 0). */
  latencyMs?: number;
  /** Default wait between streamed chunks (default 0). */
  chunkDelayMs?: number;
  /** Model ids listed by `GET /v1/models` (default `["scripted-model"]`). */
  models?: string[];
  /** When set, a request without `Authorization: Bearer <apiKey>` gets a 401. */
  apiKey?: string;
  /**
   * False: requests are answered and numbered but not kept, so `requests` stays empty and
   * `waitForRequests` never resolves (a benchmark's hundreds of thousands of requests).
   * Default true.
   */
  keepRequests?: boolean;
}

/** A chat message as it arrived on the wire (OpenAI's shape, snake_case). */
export interface WireChatMessage {
  role: string;
  content?: unknown;
  name?: string;
  tool_calls?: Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
}

/** A tool as it arrived on the wire. */
export interface WireTool {
  type: string;
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** A chat request as the handler sees it. */
export interface ScriptedRequest {
  /** Order of arrival among chat requests, from 0. */
  index: number;
  /** Epoch ms when the body had been read. */
  at: number;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  /** The parsed JSON body; undefined when it was not JSON. */
  body: Record<string, unknown> | undefined;
  model: string;
  messages: WireChatMessage[];
  tools: WireTool[];
  stream: boolean;
  /** The last message, handy for routing (`lastMessage?.role === "tool"`). */
  lastMessage: WireChatMessage | undefined;
}

/**
 * What happened to a request: `completion`, `error` and `drop` are scripted replies;
 * `script_empty` means no reply was left (500); `invalid` a body that is not a chat request
 * (400); `unauthorized` a missing or wrong API key (401); `handler_error` a handler that threw (500).
 */
export type ScriptedOutcome = "pending" | "completion" | "error" | "drop" | "script_empty" | "invalid" | "unauthorized" | "handler_error";

/** One entry of the request log. */
export interface RecordedRequest extends ScriptedRequest {
  outcome: ScriptedOutcome;
  /** HTTP status sent; 0 for a dropped connection. */
  status: number;
  /** True when the client went away before the reply was complete (it aborted or timed out). */
  clientClosed: boolean;
  /** Epoch ms when the reply ended (complete, dropped, or the client left). */
  endedAt?: number;
}

/** Chooses a reply for a request; undefined means "not mine" (the script runs dry if nothing else answers). */
export type ScriptedHandler = (request: ScriptedRequest) => ScriptedReply | undefined | Promise<ScriptedReply | undefined>;

const MAX_BODY_BYTES = 16 * 1024 * 1024;

/**
 * Starts a scripted server on 127.0.0.1 with a free port.
 * @throws Error when the port cannot be bound
 */
export async function startScriptedModelServer(options: ScriptedModelServerOptions = {}): Promise<ScriptedModelServer> {
  const server = new ScriptedModelServer(options);
  await server.listen();
  return server;
}

/** See ScriptedModelServerOptions. Make one with startScriptedModelServer. */
export class ScriptedModelServer {
  private readonly http: Server;
  private readonly queue: ScriptedReply[];
  private handler: ScriptedHandler | undefined;
  private readonly log: RecordedRequest[] = [];
  private received = 0;
  private readonly waiters = new Set<() => void>();
  private readonly inFlight = new Set<AbortController>();
  private port = 0;
  private closing: Promise<void> | undefined;

  constructor(private readonly options: ScriptedModelServerOptions = {}) {
    this.queue = [...(options.replies ?? [])];
    this.handler = options.handler;
    this.http = createServer((req, res) => {
      this.route(req, res).catch((err: unknown) => {
        if (!res.headersSent) sendJson(res, 500, errorBody(`scripted model server failed: ${String(err)}`, "server_error"));
        else res.destroy();
      });
    });
  }

  /** @internal started by startScriptedModelServer */
  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.http.once("error", reject);
      this.http.listen(0, "127.0.0.1", () => {
        this.http.off("error", reject);
        resolve();
      });
    });
    this.port = (this.http.address() as AddressInfo).port;
  }

  /** The base URL to give an OpenAI client: `http://127.0.0.1:<port>/v1`. */
  get url(): string {
    return `http://127.0.0.1:${this.port}/v1`;
  }

  /** Every chat request so far, in order of arrival (entries update as replies finish). */
  get requests(): readonly RecordedRequest[] {
    return this.log;
  }

  /** Queued replies not yet served. */
  get pendingReplies(): number {
    return this.queue.length;
  }

  /** Adds replies to the end of the queue. */
  enqueue(...replies: ScriptedReply[]): void {
    this.queue.push(...replies);
  }

  /** Replaces the handler (undefined removes it). */
  setHandler(handler: ScriptedHandler | undefined): void {
    this.handler = handler;
  }

  /**
   * Resolves with the log once it holds at least `count` chat requests.
   * @throws Error naming how many arrived when `timeoutMs` (default 10,000) passes first
   */
  async waitForRequests(count: number, timeoutMs = 10_000): Promise<readonly RecordedRequest[]> {
    if (this.log.length >= count) return this.log;
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.log.length < count) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve(this.log);
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`scripted model server: waited ${timeoutMs} ms for ${count} request(s), got ${this.log.length}`));
      }, timeoutMs);
      this.waiters.add(check);
    });
  }

  /** Stops listening, cuts open connections and cancels replies still waiting on latency. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      for (const c of this.inFlight) c.abort();
      this.http.close(() => resolve());
      this.http.closeAllConnections();
    });
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0]!.replace(/\/+$/, "");
    if (req.method === "GET" && path === "/v1/models") {
      const created = Math.floor(Date.now() / 1000);
      const data = (this.options.models ?? ["scripted-model"]).map((id) => ({ id, object: "model", created, owned_by: "kova-scripted" }));
      return sendJson(res, 200, { object: "list", data });
    }
    if (req.method === "POST" && path === "/v1/chat/completions") return this.chat(req, res);
    sendJson(res, 404, errorBody(`no route ${req.method} ${req.url}: this server answers POST /v1/chat/completions and GET /v1/models`, "not_found_error"));
  }

  private async chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readBody(req);
    const entry = this.record(req, raw);
    const closed = new AbortController();
    this.inFlight.add(closed);
    res.on("close", () => {
      if (entry.endedAt === undefined) {
        entry.clientClosed = true;
        entry.endedAt = Date.now();
      }
      closed.abort();
      this.inFlight.delete(closed);
    });
    const finish = (outcome: ScriptedOutcome, status: number) => {
      entry.outcome = outcome;
      entry.status = status;
    };
    const end = () => {
      entry.endedAt ??= Date.now();
    };

    if (this.options.apiKey !== undefined && entry.headers.authorization !== `Bearer ${this.options.apiKey}`) {
      finish("unauthorized", 401);
      end();
      return sendJson(res, 401, errorBody("Incorrect API key provided (scripted server)", "authentication_error", "invalid_api_key"));
    }
    const problem = invalidRequest(entry);
    if (problem) {
      finish("invalid", 400);
      end();
      return sendJson(res, 400, errorBody(problem, "invalid_request_error"));
    }

    let reply: ScriptedReply | undefined = this.queue.shift();
    if (!reply && this.handler) {
      try {
        reply = await this.handler(entry);
      } catch (err) {
        finish("handler_error", 500);
        end();
        return sendJson(res, 500, errorBody(`scripted model server: the handler threw for request #${entry.index}: ${String(err)}`, "server_error"));
      }
    }
    if (!reply) {
      finish("script_empty", 500);
      end();
      const last = JSON.stringify(String(entry.lastMessage?.content ?? "")).slice(0, 80);
      return sendJson(
        res,
        500,
        errorBody(
          `scripted model server: no reply left for request #${entry.index} (model ${entry.model}, last message ${last}): ` +
            "enqueue more replies or set a handler that answers it",
          "script_empty",
        ),
      );
    }

    if (!(await pause(reply.latencyMs ?? this.options.latencyMs ?? 0, closed.signal))) return;
    const chunkDelayMs = reply.chunkDelayMs ?? this.options.chunkDelayMs ?? 0;
    if (reply.kind === "error") {
      finish("error", reply.status);
      end();
      const headers = { ...reply.headers };
      if (typeof reply.body === "string") {
        res.writeHead(reply.status, { "content-type": "text/plain; charset=utf-8", ...headers }).end(reply.body);
      } else sendJson(res, reply.status, reply.body ?? {}, headers);
      return;
    }
    const completion = reply.kind === "drop" ? reply.reply : reply;
    const ctx: RenderContext = {
      requestIndex: entry.index,
      requestedModel: entry.model,
      promptChars: promptChars(entry.messages),
      includeUsage: includeUsage(entry.body),
    };
    if (!entry.stream) {
      if (reply.kind === "drop") {
        finish("drop", 0);
        end();
        res.socket?.destroy();
        return;
      }
      finish("completion", 200);
      end();
      return sendJson(res, 200, renderCompletion(completion, ctx));
    }
    await this.streamReply(res, entry, completion, ctx, chunkDelayMs, reply.kind === "drop" ? reply.afterChunks : undefined, closed.signal);
  }

  private async streamReply(
    res: ServerResponse,
    entry: RecordedRequest,
    reply: ScriptedCompletion,
    ctx: RenderContext,
    chunkDelayMs: number,
    dropAfter: number | undefined,
    closed: AbortSignal,
  ): Promise<void> {
    entry.outcome = dropAfter === undefined ? "completion" : "drop";
    entry.status = dropAfter === undefined ? 200 : 0;
    res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive" });
    res.flushHeaders();
    const chunks = renderChunks(reply, ctx);
    let flushed = Promise.resolve();
    for (let i = 0; i <= chunks.length; i++) {
      if (dropAfter !== undefined && i >= dropAfter) {
        entry.endedAt = Date.now();
        // Cut only once the events written so far reached the socket, so the client sees exactly `dropAfter`.
        await flushed;
        res.socket?.destroy();
        return;
      }
      if (i === chunks.length) break;
      if (i > 0 && !(await pause(chunkDelayMs, closed))) return;
      if (closed.aborted) return;
      flushed = new Promise<void>((resolve) => res.write(`data: ${JSON.stringify(chunks[i])}\n\n`, () => resolve()));
    }
    entry.endedAt = Date.now();
    res.end("data: [DONE]\n\n");
  }

  private record(req: IncomingMessage, raw: string): RecordedRequest {
    let body: Record<string, unknown> | undefined;
    try {
      const parsed: unknown = JSON.parse(raw);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
    } catch {
      body = undefined;
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(", ") : v;
    const messages = Array.isArray(body?.messages) ? (body.messages as WireChatMessage[]) : [];
    const entry: RecordedRequest = {
      index: this.received++,
      at: Date.now(),
      headers,
      body,
      model: typeof body?.model === "string" ? body.model : "",
      messages,
      tools: Array.isArray(body?.tools) ? (body.tools as WireTool[]) : [],
      stream: body?.stream === true,
      lastMessage: messages[messages.length - 1],
      outcome: "pending",
      status: 0,
      clientClosed: false,
    };
    if (this.options.keepRequests === false) return entry;
    this.log.push(entry);
    for (const w of [...this.waiters]) w();
    return entry;
  }
}

function invalidRequest(entry: RecordedRequest): string | undefined {
  if (!entry.body) return "the body must be a JSON object (a chat-completions request)";
  if (entry.model === "") return "you must provide a model parameter";
  if (!Array.isArray(entry.body.messages) || entry.messages.length === 0) return "'messages' must be a non-empty array";
  for (const [i, m] of entry.messages.entries()) {
    if (!m || typeof m !== "object" || typeof m.role !== "string") return `messages[${i}] must be an object with a role`;
  }
  return undefined;
}

function includeUsage(body: Record<string, unknown> | undefined): boolean {
  const so = body?.stream_options as { include_usage?: unknown } | undefined;
  return so?.include_usage === true;
}

function promptChars(messages: WireChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    n += typeof m.content === "string" ? m.content.length : m.content ? JSON.stringify(m.content).length : 0;
    for (const c of m.tool_calls ?? []) n += c.function.name.length + c.function.arguments.length;
  }
  return n;
}

function errorBody(message: string, type: string, code: string | null = null) {
  return { error: { message, type, param: null, code } };
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers }).end(text);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of req as AsyncIterable<Buffer>) {
    size += part.length;
    if (size > MAX_BODY_BYTES) break;
    parts.push(part);
  }
  return Buffer.concat(parts).toString("utf8");
}

/** Waits `ms`; false when the client left (or the server closed) first. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
