/**
 * What the scripted model server answers with, and how a reply becomes chat-completions
 * wire data (a `chat.completion` body or a list of `chat.completion.chunk`s).
 */

/** Latency knobs every reply kind takes; they override the server's defaults. */
export interface ScriptedTiming {
  /** Wait before the response starts (time to first byte). */
  latencyMs?: number;
  /** Wait between streamed chunks. */
  chunkDelayMs?: number;
}

/** Token usage the reply reports; `outputTokens` becomes `completion_tokens`. */
export interface ScriptedUsage {
  inputTokens: number;
  outputTokens: number;
}

export interface ScriptedToolCall {
  /** Default `call_<request>_<position>`. */
  id?: string;
  name: string;
  /** A JSON string, sent as is (it may be invalid on purpose), or an object to serialize. */
  arguments: string | Record<string, unknown>;
  /** How the arguments string is split across stream chunks (default: three pieces). Joined, they must equal it. */
  argumentChunks?: string[];
}

/** A successful answer: text, tool calls, or both. */
export interface ScriptedCompletion extends ScriptedTiming {
  kind: "completion";
  content?: string;
  /** The exact streamed text pieces (default: one per word). Joined, they must equal `content`. */
  chunks?: string[];
  toolCalls?: ScriptedToolCall[];
  /** Default `tool_calls` when there are tool calls, else `stop`. */
  finishReason?: string;
  /** Default: an estimate (characters / 4); null sends no usage at all. */
  usage?: ScriptedUsage | null;
  /** The model named in the response; default the requested one. */
  model?: string;
}

/** An HTTP error response, e.g. a 429 with `Retry-After`. */
export interface ScriptedError extends ScriptedTiming {
  kind: "error";
  status: number;
  /** JSON body (default an OpenAI-style `{ error: { message, type } }`); a string is sent as text. */
  body?: unknown;
  headers?: Record<string, string>;
}

/**
 * The connection is cut (socket destroyed) after `afterChunks` streamed SSE events of
 * `reply` (the first event carries the role). For a non-streaming request it is cut before
 * any byte of the response.
 */
export interface ScriptedDrop extends ScriptedTiming {
  kind: "drop";
  afterChunks: number;
  reply: ScriptedCompletion;
}

export type ScriptedReply = ScriptedCompletion | ScriptedError | ScriptedDrop;

type TimingAnd<T> = T & ScriptedTiming;

/** Builders for scripted replies. */
export const scriptedReply = {
  /** A text answer. */
  text(
    content: string,
    options: TimingAnd<{ chunks?: string[]; usage?: ScriptedUsage | null; model?: string; finishReason?: string }> = {},
  ): ScriptedCompletion {
    return { kind: "completion", content, ...options };
  },
  /** An answer that calls tools (optionally with some text too). */
  toolCalls(
    calls: ScriptedToolCall[],
    options: TimingAnd<{ content?: string; chunks?: string[]; usage?: ScriptedUsage | null; model?: string; finishReason?: string }> = {},
  ): ScriptedCompletion {
    return { kind: "completion", toolCalls: calls, ...options };
  },
  /**
   * An HTTP error. `retryAfter` sets the `Retry-After` header (seconds, or an HTTP date
   * string); `message` the error body's message.
   */
  error(
    status: number,
    options: TimingAnd<{ message?: string; body?: unknown; headers?: Record<string, string>; retryAfter?: number | string }> = {},
  ): ScriptedError {
    const { message, retryAfter, headers, body, ...timing } = options;
    const out: ScriptedError = {
      kind: "error",
      status,
      body: body ?? { error: { message: message ?? `scripted error ${status}`, type: errorType(status), param: null, code: null } },
      ...timing,
    };
    const allHeaders = { ...headers };
    if (retryAfter !== undefined) allHeaders["retry-after"] = String(retryAfter);
    if (Object.keys(allHeaders).length > 0) out.headers = allHeaders;
    return out;
  },
  /** A connection cut after `afterChunks` SSE events of `reply` (default a short text answer). */
  drop(afterChunks: number, reply: ScriptedCompletion = scriptedReply.text("this answer is cut short"), timing: ScriptedTiming = {}): ScriptedDrop {
    return { kind: "drop", afterChunks, reply, ...timing };
  },
};

function errorType(status: number): string {
  if (status === 429) return "rate_limit_error";
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

/** What a completion needs from the request to be rendered. */
export interface RenderContext {
  /** Used in ids: `chatcmpl-scripted-<n>`, `call_<n>_<i>`. */
  requestIndex: number;
  requestedModel: string;
  /** Characters of the request's messages, for the default usage estimate. */
  promptChars: number;
  includeUsage: boolean;
}

interface WireToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

function toolCallsOf(reply: ScriptedCompletion, ctx: RenderContext): WireToolCall[] {
  return (reply.toolCalls ?? []).map((c, i) => ({
    id: c.id ?? `call_${ctx.requestIndex}_${i}`,
    type: "function",
    function: { name: c.name, arguments: typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments) },
  }));
}

function contentOf(reply: ScriptedCompletion): string | null {
  if (reply.content !== undefined) return reply.content;
  return reply.chunks ? reply.chunks.join("") : null;
}

function usageOf(reply: ScriptedCompletion, ctx: RenderContext, calls: WireToolCall[]) {
  if (reply.usage === null) return undefined;
  const outChars = (contentOf(reply) ?? "").length + calls.reduce((n, c) => n + c.function.name.length + c.function.arguments.length, 0);
  const u = reply.usage ?? { inputTokens: Math.ceil(ctx.promptChars / 4), outputTokens: Math.ceil(outChars / 4) };
  return { prompt_tokens: u.inputTokens, completion_tokens: u.outputTokens, total_tokens: u.inputTokens + u.outputTokens };
}

function header(reply: ScriptedCompletion, ctx: RenderContext) {
  return {
    id: `chatcmpl-scripted-${ctx.requestIndex}`,
    created: Math.floor(Date.now() / 1000),
    model: reply.model ?? ctx.requestedModel,
    system_fingerprint: null,
  };
}

function finishReasonOf(reply: ScriptedCompletion, calls: WireToolCall[]): string {
  return reply.finishReason ?? (calls.length > 0 ? "tool_calls" : "stop");
}

/** The non-streamed `chat.completion` body. */
export function renderCompletion(reply: ScriptedCompletion, ctx: RenderContext): Record<string, unknown> {
  const calls = toolCallsOf(reply, ctx);
  const message: Record<string, unknown> = { role: "assistant", content: contentOf(reply), refusal: null };
  if (calls.length > 0) message.tool_calls = calls;
  const body: Record<string, unknown> = {
    ...header(reply, ctx),
    object: "chat.completion",
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReasonOf(reply, calls) }],
  };
  const usage = usageOf(reply, ctx, calls);
  if (usage) body.usage = usage;
  return body;
}

/** Splits text after each word, keeping the spaces: "a b" → ["a", " b"]. */
function words(text: string): string[] {
  const pieces: string[] = text.match(/\s*\S+/g) ?? [];
  const trailing = text.slice(pieces.join("").length);
  if (trailing.length > 0) {
    if (pieces.length > 0) pieces[pieces.length - 1] += trailing;
    else pieces.push(trailing);
  }
  return pieces;
}

function thirds(text: string): string[] {
  if (text.length < 3) return text.length > 0 ? [text] : [];
  const a = Math.ceil(text.length / 3);
  return [text.slice(0, a), text.slice(a, 2 * a), text.slice(2 * a)];
}

/** The `chat.completion.chunk` objects of a streamed reply, in order (without `[DONE]`). */
export function renderChunks(reply: ScriptedCompletion, ctx: RenderContext): Record<string, unknown>[] {
  const base = { ...header(reply, ctx), object: "chat.completion.chunk" };
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  });
  const out: Record<string, unknown>[] = [chunk({ role: "assistant", content: "" })];
  const content = contentOf(reply);
  for (const piece of reply.chunks ?? (content ? words(content) : [])) out.push(chunk({ content: piece }));
  const calls = toolCallsOf(reply, ctx);
  calls.forEach((call, index) => {
    out.push(chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }] }));
    const pieces = reply.toolCalls?.[index]?.argumentChunks ?? thirds(call.function.arguments);
    for (const piece of pieces) out.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
  });
  out.push(chunk({}, finishReasonOf(reply, calls)));
  const usage = ctx.includeUsage ? usageOf(reply, ctx, calls) : undefined;
  if (usage) out.push({ ...base, choices: [], usage });
  return out;
}
