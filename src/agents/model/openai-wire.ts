import type OpenAI from "openai";
import type { AssistantMessage, ChatMessage, FinishReason, ModelDelta, ToolCall, ToolSpec, Usage } from "./types.js";

type WireMessage = OpenAI.Chat.ChatCompletionMessageParam;
type WireTool = OpenAI.Chat.ChatCompletionTool;
type Chunk = OpenAI.Chat.ChatCompletionChunk;
type Completion = OpenAI.Chat.ChatCompletion;

/** Our neutral messages in the chat-completions wire form. */
export function toWireMessages(messages: readonly ChatMessage[]): WireMessage[] {
  return messages.map(toWireMessage);
}

function toWireMessage(m: ChatMessage): WireMessage {
  switch (m.role) {
    case "system":
    case "user":
      return m.name === undefined ? { role: m.role, content: m.content } : { role: m.role, content: m.content, name: m.name };
    case "assistant":
      if (!m.toolCalls?.length) return { role: "assistant", content: m.content };
      return {
        role: "assistant",
        content: m.content,
        tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })),
      };
    case "tool":
      return { role: "tool", tool_call_id: m.toolCallId, content: m.content };
  }
}

export function toWireTools(tools: readonly ToolSpec[]): WireTool[] {
  return tools.map((t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: t.parameters },
  }));
}

/** A response reduced to what the agent loop needs. */
export interface AssembledResponse {
  message: AssistantMessage;
  finishReason: FinishReason;
  usage?: Usage;
  model: string;
}

/** Raised when a response cannot be read as a chat completion. */
export class InvalidResponseError extends Error {}

/** Raised when a stream ends without a finish reason: the provider or a proxy cut it short. */
export class StreamIncompleteError extends Error {}

/** Raised when a response's text and tool-call arguments pass the byte limit. */
export class ResponseTooLargeError extends Error {
  constructor(
    readonly limitBytes: number,
    readonly receivedBytes: number,
  ) {
    super(`the response passed ${limitBytes} bytes (${receivedBytes} received)`);
  }
}

/** Counts the UTF-8 bytes of a response's text and arguments against a limit. */
class ByteLimit {
  private used = 0;
  constructor(private readonly limitBytes: number) {}
  /** @throws ResponseTooLargeError once the total passes the limit */
  add(text: string | null | undefined): void {
    if (!text) return;
    this.used += Buffer.byteLength(text, "utf8");
    if (this.used > this.limitBytes) throw new ResponseTooLargeError(this.limitBytes, this.used);
  }
}

/**
 * The provider's usage, or undefined when it sent none or a count that is not a finite
 * non-negative integer (a string, NaN, Infinity, -5): one such count would corrupt the
 * agent's totals and shared budgets, so the run estimates the usage instead.
 */
function usageOf(u: OpenAI.CompletionUsage | null | undefined): Usage | undefined {
  if (typeof u !== "object" || u === null) return undefined;
  const inputTokens = tokenCount(u.prompt_tokens);
  const outputTokens = tokenCount(u.completion_tokens);
  if (inputTokens === undefined || outputTokens === undefined) return undefined;
  return { inputTokens, outputTokens };
}

/** An absent count is 0 (some servers send only one); anything but a safe non-negative integer is unusable. */
function tokenCount(raw: unknown): number | undefined {
  if (raw === undefined || raw === null) return 0;
  return typeof raw === "number" && Number.isSafeInteger(raw) && raw >= 0 ? raw : undefined;
}

/**
 * Reads a non-streamed `chat.completion`.
 * @throws InvalidResponseError
 * @throws ResponseTooLargeError when text and arguments pass `maxBytes`
 */
export function fromCompletion(completion: Completion, requestedModel: string, maxBytes = Number.POSITIVE_INFINITY): AssembledResponse {
  const choice = completion.choices?.[0];
  if (!choice?.message) throw new InvalidResponseError("the response has no choices");
  const toolCalls = completedToolCalls(choice.message.tool_calls as unknown);
  const content: unknown = choice.message.content ?? null;
  if (content !== null && typeof content !== "string") throw new InvalidResponseError(`message.content is ${describeValue(content)}, not a string`);
  const message: AssistantMessage = { role: "assistant", content };
  const limit = new ByteLimit(maxBytes);
  limit.add(message.content);
  for (const c of toolCalls) limit.add(c.arguments);
  if (toolCalls.length > 0) message.toolCalls = toolCalls;
  const out: AssembledResponse = {
    message,
    finishReason: choice.finish_reason ?? (toolCalls.length > 0 ? "tool_calls" : "stop"),
    model: completion.model || requestedModel,
  };
  const usage = usageOf(completion.usage);
  if (usage) out.usage = usage;
  return out;
}

/**
 * The function calls of a non-streamed message, checked: the rest of Kova reads id, name
 * and arguments as strings. A call without an id gets one (the tool message must answer
 * some id); one without a name, or with arguments that are not a string, is unusable.
 * @throws InvalidResponseError
 */
function completedToolCalls(raw: unknown): ToolCall[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw new InvalidResponseError(`message.tool_calls is ${describeValue(raw)}, not an array`);
  const calls: ToolCall[] = [];
  raw.forEach((c: unknown, i) => {
    if (typeof c !== "object" || c === null) throw new InvalidResponseError(`tool_calls[${i}] is ${describeValue(c)}, not an object`);
    const call = c as { id?: unknown; type?: unknown; function?: unknown };
    // Other kinds (OpenAI's `custom` tools) are not ours to run: skipped as before.
    if (call.type !== "function") return;
    const fn = call.function as { name?: unknown; arguments?: unknown } | null | undefined;
    const name = fn?.name;
    if (typeof name !== "string" || name === "") throw new InvalidResponseError(`tool_calls[${i}].function.name is ${describeValue(name)}, not a tool name`);
    const args = fn?.arguments ?? "";
    if (typeof args !== "string") throw new InvalidResponseError(`tool_calls[${i}].function.arguments is ${describeValue(args)}, not a JSON string`);
    calls.push({ id: typeof call.id === "string" && call.id !== "" ? call.id : `call_${i}`, name, arguments: args });
  });
  return calls;
}

/** A short description of a value from the wire for an error message (never the whole value). */
export function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === "object") return "an object";
  return `${typeof value} ${String(value)}`;
}

/**
 * Builds one response from `chat.completion.chunk`s. Tool calls arrive as fragments keyed
 * by `index`: the first carries id and name, later ones append to the arguments string.
 * Some servers omit `index` (one call per chunk) or send the name again with every
 * fragment; both are tolerated.
 */
export class ChatStreamAssembler {
  private content = "";
  private sawContent = false;
  /** By the provider's `index`: a Map, not an array, so index 1e9 is one entry, not a sparse array to walk. */
  private readonly calls = new Map<number, ToolCall>();
  private highestIndex = -1;
  private finishReason: FinishReason | undefined;
  private usage: Usage | undefined;
  private model = "";
  private readonly limit: ByteLimit;

  /** `maxBytes` bounds the text and tool-call arguments of the whole response. */
  constructor(
    private readonly requestedModel: string,
    maxBytes = Number.POSITIVE_INFINITY,
  ) {
    this.limit = new ByteLimit(maxBytes);
  }

  /**
   * Adds a chunk and returns the deltas it carried, in order.
   * @throws ResponseTooLargeError as soon as the response passes its byte limit
   */
  push(chunk: Chunk): ModelDelta[] {
    const deltas: ModelDelta[] = [];
    if (chunk.model) this.model = chunk.model;
    const usage = usageOf(chunk.usage);
    if (usage) this.usage = usage;
    const choice = chunk.choices?.[0];
    if (!choice) return deltas;
    const delta = choice.delta ?? {};
    if (typeof delta.content === "string" && delta.content.length > 0) {
      this.limit.add(delta.content);
      this.content += delta.content;
      this.sawContent = true;
      deltas.push({ type: "text", text: delta.content });
    }
    const fragments: unknown = delta.tool_calls ?? [];
    if (!Array.isArray(fragments)) throw new InvalidResponseError(`delta.tool_calls is ${describeValue(fragments)}, not an array`);
    for (const raw of fragments) {
      const fragment = checkedFragment(raw);
      const index = fragment.index === undefined || fragment.index === null ? this.indexWithout(fragment.id) : checkedIndex(fragment.index);
      let call = this.calls.get(index);
      if (!call) {
        if (this.calls.size >= MAX_TOOL_CALLS) throw new InvalidResponseError(`more than ${MAX_TOOL_CALLS} tool calls in one response`);
        call = { id: "", name: "", arguments: "" };
        this.calls.set(index, call);
        this.highestIndex = Math.max(this.highestIndex, index);
      }
      const out: Extract<ModelDelta, { type: "tool_call" }> = { type: "tool_call", index, arguments: fragment.arguments };
      this.limit.add(out.arguments);
      if (fragment.id) {
        call.id = fragment.id;
        out.id = fragment.id;
      }
      const name = fragment.name;
      if (name && name !== call.name) {
        call.name = call.name === "" ? name : call.name + name;
        out.name = name;
      }
      call.arguments += out.arguments;
      deltas.push(out);
    }
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    return deltas;
  }

  /** Without an index, a fragment with a new id starts a call; one without an id continues the last. */
  private indexWithout(id: string | undefined): number {
    const last = this.highestIndex;
    if (last < 0) return 0;
    return id && this.calls.get(last)?.id !== id ? last + 1 : last;
  }

  /**
   * @throws StreamIncompleteError when no chunk carried a finish reason
   * @throws InvalidResponseError when a tool call never got a name
   */
  result(): AssembledResponse {
    if (this.finishReason === undefined) {
      throw new StreamIncompleteError("the stream ended before the model finished (no finish_reason)");
    }
    const message: AssistantMessage = { role: "assistant", content: this.sawContent ? this.content : null };
    const calls = [...this.calls.entries()].sort(([a], [b]) => a - b).map(([, call]) => call);
    calls.forEach((c, i) => {
      if (c.name === "") throw new InvalidResponseError(`streamed tool call ${i} never got a function name`);
      // A provider that sends no call ids still needs one for the tool message to answer.
      if (c.id === "") c.id = `call_${i}`;
    });
    if (calls.length > 0) message.toolCalls = calls;
    const out: AssembledResponse = { message, finishReason: this.finishReason, model: this.model || this.requestedModel };
    if (this.usage) out.usage = this.usage;
    return out;
  }
}

/**
 * Calls one streamed response may start. Far more than any model sends (OpenAI caps
 * parallel calls well below it); past it the provider is looping or hostile.
 */
const MAX_TOOL_CALLS = 1000;

/** @throws InvalidResponseError for an index that is not a non-negative integer */
function checkedIndex(raw: unknown): number {
  if (typeof raw === "number" && Number.isSafeInteger(raw) && raw >= 0) return raw;
  throw new InvalidResponseError(`a streamed tool call's index is ${describeValue(raw)}, not an integer of 0 or more`);
}

/** A streamed tool-call fragment with its fields checked; absent strings are undefined ("" for arguments). */
interface CheckedFragment {
  index?: unknown;
  id?: string;
  name?: string;
  arguments: string;
}

/** @throws InvalidResponseError for a fragment whose id, name or arguments are not strings */
function checkedFragment(raw: unknown): CheckedFragment {
  if (typeof raw !== "object" || raw === null) throw new InvalidResponseError(`a streamed tool call is ${describeValue(raw)}, not an object`);
  const f = raw as { index?: unknown; id?: unknown; function?: unknown };
  const fn: unknown = f.function ?? {};
  if (typeof fn !== "object" || fn === null) throw new InvalidResponseError(`a streamed tool call's function is ${describeValue(fn)}, not an object`);
  const { name, arguments: args } = fn as { name?: unknown; arguments?: unknown };
  const out: CheckedFragment = { index: f.index, arguments: optionalString(args, "function.arguments") ?? "" };
  const id = optionalString(f.id, "id");
  if (id) out.id = id;
  const checkedName = optionalString(name, "function.name");
  if (checkedName) out.name = checkedName;
  return out;
}

function optionalString(value: unknown, field: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new InvalidResponseError(`a streamed tool call's ${field} is ${describeValue(value)}, not a string`);
  return value;
}
