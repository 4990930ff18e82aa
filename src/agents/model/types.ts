import type { JsonSchema } from "../../tools/index.js";

/**
 * The provider-neutral model interface the agent loop talks to, shaped after the OpenAI
 * Agents SDK's small `Model`: one call in, one response out, streamed deltas on the side.
 * Everything here is plain JSON so a response can be journaled as a step and replayed
 * without calling the provider again.
 */

export interface SystemMessage {
  role: "system";
  content: string;
  name?: string;
}

export interface UserMessage {
  role: "user";
  content: string;
  name?: string;
}

/** One tool call as the model sent it. */
export interface ToolCall {
  /** The provider's call id; a `tool` message answers it with the same id. */
  id: string;
  name: string;
  /**
   * The arguments exactly as the model produced them: a JSON string that may be invalid
   * or not match the tool's schema. The tools layer parses and validates it.
   */
  arguments: string;
}

export interface AssistantMessage {
  role: "assistant";
  /** Text of the answer; null when the model only called tools. */
  content: string | null;
  toolCalls?: ToolCall[];
}

/** The result of one tool call, sent back to the model. */
export interface ToolMessage {
  role: "tool";
  toolCallId: string;
  content: string;
}

export type ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage;

/** A tool as the model sees it. */
export interface ToolSpec {
  name: string;
  description: string;
  parameters: JsonSchema;
}

/**
 * A piece of a response while it streams. `restart` means the call is being retried after
 * the stream died part-way: every delta received before it belongs to the failed attempt
 * and must be discarded (a chat UI clears the partial answer).
 */
export type ModelDelta =
  | { type: "text"; text: string }
  | {
      type: "tool_call";
      /** Position of the call in the response; fragments of one call share it. */
      index: number;
      /** Present on the first fragment of a call. */
      id?: string;
      name?: string;
      /** A fragment of the arguments JSON, to be appended to the earlier ones. */
      arguments: string;
    }
  | { type: "restart"; attempt: number };

/** Why a call is being retried (for `rate_limited` events and logs). */
export interface RetryInfo {
  /** The attempt that failed, from 1. */
  attempt: number;
  /** How long the client waits before the next attempt. */
  delayMs: number;
  reason: ModelFailureReason;
  /** HTTP status of the failed attempt, when there was a response. */
  status?: number;
  /** The provider's own wait hint (`Retry-After` / `retry-after-ms`), when it gave one. */
  retryAfterMs?: number;
}

/**
 * What went wrong in a provider call: `rate_limited` (429), `server_error` (5xx, or an
 * error event inside a stream), `connection` (refused, reset, DNS), `stream_interrupted`
 * (the stream ended before its finish reason), `timeout` (the per-request time limit),
 * `invalid_response` (no choices, unparsable), `rejected` (400/401/403/404/422 and other
 * client errors: retrying cannot help).
 */
export type ModelFailureReason = "rate_limited" | "server_error" | "connection" | "stream_interrupted" | "timeout" | "invalid_response" | "rejected";

/** Takes one provider-call slot (see ModelCallScheduler) and resolves to its release. */
export type AcquireSlot = () => Promise<() => void>;

export interface ModelRequest {
  messages: readonly ChatMessage[];
  tools?: readonly ToolSpec[];
  /** Upper bound on generated tokens. */
  maxTokens?: number;
  temperature?: number;
  /** Aborting it aborts the HTTP request; the call then fails with ModelCallAbortedError. */
  signal?: AbortSignal;
  /** Streamed text and tool-call fragments, in order. Not called for non-streaming models. */
  onDelta?: (delta: ModelDelta) => void;
  /** Called before each retry's wait. */
  onRetry?: (info: RetryInfo) => void;
  /**
   * Taken before every attempt and released when that attempt ends, so a call holds a
   * provider slot only while it talks to the provider, never during a backoff wait.
   */
  acquireSlot?: AcquireSlot;
  /**
   * Extra HTTP headers for this call. A test can route replies by them on the scripted
   * server (e.g. `x-kova-agent`). They go to the provider: never put secrets here.
   */
  headers?: Record<string, string>;
}

/** Token usage as the provider reported it: the source of truth for accounting. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

/** `stop`, `tool_calls`, `length`, `content_filter`, or whatever else a provider says. */
export type FinishReason = "stop" | "tool_calls" | "length" | "content_filter" | (string & {});

export interface ModelResponse {
  message: AssistantMessage;
  finishReason: FinishReason;
  /** Undefined when the provider sent no usage (some local servers do not). */
  usage?: Usage;
  /** The model the provider says it used (may differ from the requested alias). */
  model: string;
  /** Attempts it took, from 1. */
  attempts: number;
}

/** A configured model the agent loop can call. */
export interface ModelClient {
  /** The config name (`[models.<name>]`), used in events, stats and errors. */
  readonly name: string;
  /** The provider's model id sent in requests, e.g. `gpt-4.1-mini`. */
  readonly model: string;
  /**
   * Runs one chat completion, with retries on transient failures.
   * @throws ModelCallError after the last attempt, or at once for a rejected request
   * @throws ModelCallAbortedError when `request.signal` aborts
   */
  complete(request: ModelRequest): Promise<ModelResponse>;
}
