import type OpenAI from "openai";
import { sleep, ArgumentError, type Logger, componentLogger } from "../../core/index.js";
import { ModelCallAbortedError, ModelCallError, type ModelCallErrorData, ModelResponseTooLargeError } from "./errors.js";
import {
  type AssembledResponse,
  ChatStreamAssembler,
  fromCompletion,
  InvalidResponseError,
  ResponseTooLargeError,
  StreamIncompleteError,
  toWireMessages,
  toWireTools,
} from "./openai-wire.js";
import { lineBoundedFetch } from "./line-bounded-fetch.js";
import { DEFAULT_RETRY_POLICY, type HeaderLookup, type RetryPolicy, retryAfterMs, retryDelayMs } from "./retry.js";
import type { ModelClient, ModelDelta, ModelFailureReason, ModelRequest, ModelResponse } from "./types.js";

type OpenAiModule = typeof import("openai");

/** What OpenAiModel needs from a `[models.<name>]` entry (ModelConfig has all of it). */
export interface OpenAiModelConfig {
  /** Config name, e.g. `fast`. */
  name: string;
  /** Chat-completions base URL, e.g. `http://127.0.0.1:11434/v1`. */
  baseUrl: string;
  /** Undefined for local servers that need none. */
  apiKey?: string;
  /** Provider model id. */
  model: string;
  /** Stream responses (default true); false sends `stream: false` and reads one JSON body. */
  stream?: boolean;
  /** Time limit of one attempt, from sending the request to the last chunk (default 300,000). */
  timeoutMs?: number;
  /** Retries after the first attempt for transient failures (default 4: five attempts). */
  maxRetries?: number;
  /** Bytes of text plus tool-call arguments one response may carry (default DEFAULT_MAX_RESPONSE_BYTES). */
  maxResponseBytes?: number;
}

export interface OpenAiModelOptions {
  logger?: Logger;
  retry?: Partial<RetryPolicy>;
  /**
   * Which body field carries `maxTokens`. OpenAI's newer models accept only
   * `max_completion_tokens`; many compatible servers know only `max_tokens`. Default:
   * `max_completion_tokens` for api.openai.com, `max_tokens` elsewhere.
   */
  maxTokensField?: "max_tokens" | "max_completion_tokens";
  /** Jitter source (tests pin it). */
  random?: () => number;
  /**
   * Whether the client follows HTTP redirects (default true). An endpoint the node calls for
   * someone else (an experiment's external subject) does not: a redirect could lead to an
   * address the SSRF guard refuses.
   */
  followRedirects?: boolean;
}

export const DEFAULT_MODEL_TIMEOUT_MS = 300_000;
export const DEFAULT_MODEL_MAX_RETRIES = 4;
/**
 * 512 KiB: half of NATS's default max_payload (1 MiB), so the journaled step, the
 * `run_completed` event and the result that carry the answer still fit one message.
 */
export const DEFAULT_MAX_RESPONSE_BYTES = 512 * 1024;
/**
 * A non-streamed body, or one streamed event, is JSON: escapes (`\n`, `\uXXXX` from servers
 * that write ASCII-only JSON) can make it up to 6 times the text it carries. Past this many
 * raw bytes per allowed byte (plus room for the envelope) it is cut off unread.
 */
const RAW_BODY_FACTOR = 6;
const RAW_BODY_ENVELOPE_BYTES = 64 * 1024;

/**
 * Makes a ModelClient for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
 * Ollama, llama.cpp server). The `openai` package is imported here, on first use, so a
 * node whose config names no model never loads it (about 190 ms measured on this machine).
 * @throws ArgumentError when `config.baseUrl` is not a URL
 */
export async function createOpenAiModel(config: OpenAiModelConfig, options: OpenAiModelOptions = {}): Promise<OpenAiModel> {
  const sdk = await import("openai");
  return new OpenAiModel(sdk, config, options);
}

/** A failed attempt, classified. */
class AttemptFailure extends Error {
  constructor(
    readonly reason: ModelFailureReason,
    detail: string,
    readonly status?: number,
    readonly headers?: HeaderLookup,
    cause?: unknown,
    readonly providerCode?: string,
  ) {
    super(detail, cause === undefined ? undefined : { cause });
  }
}

/** An error thrown by the caller's own callback: passed through, never retried. */
class CallbackFailure extends Error {}

/**
 * A ModelClient over the `openai` package. The SDK's own retries are off: this class
 * retries 429, 5xx, connection errors, timeouts and streams cut short, with exponential
 * backoff and jitter, honouring `Retry-After` / `retry-after-ms`, and re-takes a provider
 * slot (`request.acquireSlot`) for every attempt.
 */
export class OpenAiModel implements ModelClient {
  readonly name: string;
  readonly model: string;
  /** The base URL without credentials or query, as errors and logs show it. */
  readonly endpoint: string;
  private readonly client: OpenAI;
  private readonly stream: boolean;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly maxResponseBytes: number;
  private readonly retry: RetryPolicy;
  private readonly maxTokensField: "max_tokens" | "max_completion_tokens";
  private readonly random: () => number;
  private readonly log: Logger | undefined;

  /**
   * Use createOpenAiModel, which loads the SDK.
   * @throws ArgumentError when `config.baseUrl` is not a URL
   */
  constructor(
    private readonly sdk: OpenAiModule,
    config: OpenAiModelConfig,
    options: OpenAiModelOptions = {},
  ) {
    this.name = config.name;
    this.model = config.model;
    this.endpoint = publicEndpoint(config.baseUrl);
    this.stream = config.stream ?? true;
    this.timeoutMs = config.timeoutMs ?? DEFAULT_MODEL_TIMEOUT_MS;
    this.maxRetries = config.maxRetries ?? DEFAULT_MODEL_MAX_RETRIES;
    this.maxResponseBytes = config.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.retry = { ...DEFAULT_RETRY_POLICY, ...options.retry };
    let host: string;
    try {
      host = new URL(config.baseUrl).hostname;
    } catch {
      throw new ArgumentError("baseUrl", `${JSON.stringify(config.baseUrl)} is not a URL: give the endpoint as http(s)://host:port/v1`);
    }
    this.maxTokensField = options.maxTokensField ?? (host === "api.openai.com" ? "max_completion_tokens" : "max_tokens");
    this.random = options.random ?? Math.random;
    this.log = options.logger && componentLogger(options.logger, "model", { model: config.name });
    this.client = new sdk.OpenAI({
      baseURL: config.baseUrl,
      // The SDK refuses to start without a key; local servers ignore this one.
      apiKey: config.apiKey ?? "no-key",
      organization: null,
      project: null,
      maxRetries: 0,
      // Our own timer covers the whole attempt including the streamed body; the SDK's
      // (headers only) gets a margin so it never fires first.
      timeout: this.timeoutMs + 1_000,
      logLevel: "off",
      fetch: lineBoundedFetch(
        this.rawBodyLimit(),
        this.maxResponseBytes,
        options.followRedirects === false ? (input, init) => fetch(input, { ...init, redirect: "manual" }) : fetch,
      ),
    });
  }

  /**
   * @throws ModelCallError after the last attempt, or at once when the provider rejects the request
   * @throws ModelCallAbortedError when `request.signal` aborts
   * @throws ModelResponseTooLargeError when a response passes `maxResponseBytes` (not retried)
   * @throws whatever `onDelta` / `onRetry` throw, without retrying
   */
  async complete(request: ModelRequest): Promise<ModelResponse> {
    const signal = request.signal;
    for (let attempt = 1; ; attempt++) {
      if (signal?.aborted) throw new ModelCallAbortedError(this.name, "calling", signal.reason);
      let emitted = false;
      const userOnDelta = request.onDelta;
      const onDelta = userOnDelta
        ? (d: ModelDelta) => {
            emitted = true;
            userOnDelta(d);
          }
        : undefined;
      let failure: AttemptFailure;
      // Outside the try: a slot wait that fails (aborted, scheduler closed) is not a provider failure.
      const release = request.acquireSlot ? await request.acquireSlot() : undefined;
      try {
        const result = await this.attempt(request, onDelta);
        return { ...result, attempts: attempt };
      } catch (err) {
        if (err instanceof CallbackFailure) throw err.cause;
        if (err instanceof ResponseTooLargeError) throw this.tooLarge(err);
        if (signal?.aborted) throw new ModelCallAbortedError(this.name, "calling", signal.reason);
        failure = this.classify(err);
      } finally {
        release?.();
      }
      const hint = retryAfterMs(failure.headers);
      const delayMs = failure.reason === "rejected" || attempt > this.maxRetries ? undefined : retryDelayMs(attempt, hint, this.retry, this.random);
      if (delayMs === undefined) throw this.finalError(failure, attempt, hint);
      this.log?.warn({ attempt, reason: failure.reason, status: failure.status, delayMs }, `model call failed (${failure.message}); retrying`);
      request.onRetry?.({ attempt, delayMs, reason: failure.reason, ...opt("status", failure.status), ...opt("retryAfterMs", hint) });
      if (emitted) onDelta?.({ type: "restart", attempt: attempt + 1 });
      try {
        await sleep(delayMs, signal);
      } catch {
        throw new ModelCallAbortedError(this.name, "calling", signal?.reason);
      }
    }
  }

  /** One HTTP exchange, bounded by the timeout and the caller's signal. */
  private async attempt(request: ModelRequest, onDelta: ((d: ModelDelta) => void) | undefined): Promise<AssembledResponse> {
    const controller = new AbortController();
    const caller = request.signal;
    const onAbort = () => controller.abort(caller?.reason);
    caller?.addEventListener("abort", onAbort, { once: true });
    // Aborted while the slot was being acquired: the listener came too late to hear it.
    if (caller?.aborted) onAbort();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.timeoutMs);
    try {
      const result = this.stream ? await this.streamed(request, controller.signal, onDelta) : await this.single(request, controller.signal);
      if (timedOut) throw new AttemptFailure("timeout", `no complete response within ${this.timeoutMs} ms`);
      return result;
    } catch (err) {
      if (timedOut) throw new AttemptFailure("timeout", `no complete response within ${this.timeoutMs} ms`, undefined, undefined, err);
      throw err;
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener("abort", onAbort);
    }
  }

  private body(request: ModelRequest) {
    const body: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming = {
      model: this.model,
      messages: toWireMessages(request.messages),
    };
    if (request.tools?.length) body.tools = toWireTools(request.tools);
    if (request.maxTokens !== undefined) body[this.maxTokensField] = request.maxTokens;
    if (request.temperature !== undefined) body.temperature = request.temperature;
    return body;
  }

  /** Reads the body itself (not through the SDK) so an oversized one is cut off, not buffered whole. */
  private async single(request: ModelRequest, signal: AbortSignal): Promise<AssembledResponse> {
    const response = await this.client.chat.completions
      .create({ ...this.body(request), stream: false }, { signal, ...opt("headers", request.headers) })
      .asResponse();
    const text = await readBounded(response, this.rawBodyLimit(), this.maxResponseBytes);
    let completion: OpenAI.Chat.ChatCompletion;
    try {
      completion = JSON.parse(text) as OpenAI.Chat.ChatCompletion;
    } catch (err) {
      const type = response.headers.get("content-type") ?? "no content type";
      throw new InvalidResponseError(`the response body is not JSON (${type}): ${JSON.stringify(text.slice(0, 80))}`, { cause: err });
    }
    if (typeof completion !== "object" || completion === null) throw new InvalidResponseError("the response body is not a JSON object");
    return fromCompletion(completion, this.model, this.maxResponseBytes);
  }

  private async streamed(request: ModelRequest, signal: AbortSignal, onDelta: ((d: ModelDelta) => void) | undefined): Promise<AssembledResponse> {
    const { data: stream, response } = await this.client.chat.completions
      .create({ ...this.body(request), stream: true, stream_options: { include_usage: true } }, { signal, ...opt("headers", request.headers) })
      .withResponse();
    // A login page or proxy error answered with 200 parses as an empty stream, which would
    // pass for a stream cut short and be blamed on proxies: name what came back instead.
    const contentType = response.headers.get("content-type");
    if (!/^\s*text\/event-stream\s*(;|$)/i.test(contentType ?? "")) {
      stream.controller.abort();
      throw new InvalidResponseError(
        `a streamed request was answered with ${contentType ? `content type ${contentType}` : "no content type"}, not text/event-stream`,
      );
    }
    const assembler = new ChatStreamAssembler(this.model, this.maxResponseBytes);
    let chunks = 0;
    try {
      for await (const chunk of stream) {
        chunks++;
        for (const delta of assembler.push(chunk)) {
          try {
            onDelta?.(delta);
          } catch (err) {
            throw new CallbackFailure("onDelta threw", { cause: err });
          }
        }
      }
    } catch (err) {
      // Thrown inside the loop, a ResponseTooLargeError ends the iteration, and the SDK aborts the request.
      if (err instanceof CallbackFailure || err instanceof ResponseTooLargeError || err instanceof InvalidResponseError || err instanceof this.sdk.APIError)
        throw err;
      if (err instanceof SyntaxError) throw new AttemptFailure("invalid_response", `unreadable stream chunk: ${err.message}`, undefined, undefined, err);
      throw new AttemptFailure("stream_interrupted", `the stream broke after ${chunks} chunk(s): ${describe(err)}`, undefined, undefined, err);
    }
    // The SDK ends iteration quietly when its request is aborted; the caller checks why.
    if (signal.aborted) throw new AttemptFailure("stream_interrupted", `the stream was aborted after ${chunks} chunk(s)`);
    try {
      return assembler.result();
    } catch (err) {
      if (err instanceof InvalidResponseError) throw err;
      throw new AttemptFailure("stream_interrupted", `${(err as Error).message} after ${chunks} chunk(s)`, undefined, undefined, err);
    }
  }

  private classify(err: unknown): AttemptFailure {
    if (err instanceof AttemptFailure) return err;
    const sdk = this.sdk;
    if (err instanceof sdk.APIConnectionTimeoutError) return new AttemptFailure("timeout", "the connection timed out", undefined, undefined, err);
    if (err instanceof sdk.APIUserAbortError) return new AttemptFailure("connection", "the request was aborted", undefined, undefined, err);
    if (err instanceof sdk.APIConnectionError) {
      return new AttemptFailure("connection", `cannot reach the endpoint: ${describe(err.cause ?? err)}`, undefined, undefined, err);
    }
    if (err instanceof sdk.APIError) {
      const detail = providerMessage(err);
      const status = err.status;
      const code = typeof err.code === "string" ? err.code : undefined;
      if (status === undefined) return new AttemptFailure("server_error", `error event in the stream: ${detail}`, undefined, undefined, err, code);
      const headers = err.headers;
      if (status === 429) return new AttemptFailure("rate_limited", detail, status, headers, err, code);
      if (status === 408) return new AttemptFailure("timeout", detail, status, headers, err, code);
      if (status === 409 || status >= 500) return new AttemptFailure("server_error", detail, status, headers, err, code);
      return new AttemptFailure("rejected", detail, status, headers, err, code);
    }
    if (err instanceof InvalidResponseError) return new AttemptFailure("invalid_response", err.message, undefined, undefined, err);
    if (err instanceof StreamIncompleteError) return new AttemptFailure("stream_interrupted", err.message, undefined, undefined, err);
    return new AttemptFailure("connection", describe(err), undefined, undefined, err);
  }

  /** Raw bytes of one JSON body or one SSE line that can still carry an allowed response. */
  private rawBodyLimit(): number {
    return RAW_BODY_FACTOR * this.maxResponseBytes + RAW_BODY_ENVELOPE_BYTES;
  }

  private tooLarge(err: ResponseTooLargeError): ModelResponseTooLargeError {
    const data = { name: this.name, model: this.model, endpoint: this.endpoint, limitBytes: err.limitBytes, receivedBytes: err.receivedBytes };
    this.log?.warn(data, "model response too large; request aborted");
    return new ModelResponseTooLargeError(data);
  }

  private finalError(failure: AttemptFailure, attempts: number, hint: number | undefined): ModelCallError {
    const data: ModelCallErrorData = {
      name: this.name,
      model: this.model,
      endpoint: this.endpoint,
      reason: failure.reason,
      attempts,
    };
    if (failure.status !== undefined) data.status = failure.status;
    if (hint !== undefined) data.retryAfterMs = hint;
    if (failure.providerCode !== undefined) data.providerCode = failure.providerCode;
    let detail = failure.message;
    if (hint !== undefined && hint > this.retry.maxDelayMs) {
      detail += ` (the provider asks to wait ${hint} ms, more than the ${this.retry.maxDelayMs} ms this client waits)`;
    }
    this.log?.warn({ ...data }, "model call failed");
    return new ModelCallError(data, detail, { cause: failure.cause ?? failure });
  }
}

/**
 * The body as text, reading at most `maxRawBytes`; past that the body is cancelled (which
 * ends the request) and ResponseTooLargeError reports `limitBytes`, the configured limit.
 */
async function readBounded(response: Response, maxRawBytes: number, limitBytes: number): Promise<string> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const parts: Uint8Array[] = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    received += value.byteLength;
    if (received > maxRawBytes) {
      await reader.cancel().catch(() => undefined);
      throw new ResponseTooLargeError(limitBytes, received);
    }
    parts.push(value);
  }
  return Buffer.concat(parts).toString("utf8");
}

/** `{ key: value }` when value is defined, else `{}`: absent fields stay absent in journaled JSON, not `undefined`. */
function opt<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return value === undefined ? {} : ({ [key]: value } as { [P in K]?: V });
}

function providerMessage(err: InstanceType<OpenAiModule["APIError"]>): string {
  const body = err.error as { message?: unknown } | undefined;
  if (body && typeof body.message === "string" && body.message.length > 0) return body.message;
  return err.message;
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
  return `${err.message}${cause}`;
}

/** The URL without user, password or query string: safe to log and to put in errors. */
export function publicEndpoint(baseUrl: string): string {
  try {
    const url = new URL(baseUrl);
    url.username = "";
    url.password = "";
    url.search = "";
    url.hash = "";
    return url.toString().replace(/\/$/, "");
  } catch {
    return "(invalid URL)";
  }
}
