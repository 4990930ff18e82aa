import { defineErrorCodes, KovaError, type KovaErrorOptions } from "../../core/index.js";
import type { ModelFailureReason } from "./types.js";

export const ModelErrorCode = defineErrorCodes("agents", {
  MODEL_CALL_FAILED: "MODEL_CALL_FAILED",
  MODEL_CALL_ABORTED: "MODEL_CALL_ABORTED",
  MODEL_SCHEDULER_CLOSED: "MODEL_SCHEDULER_CLOSED",
  MODEL_RESPONSE_TOO_LARGE: "MODEL_RESPONSE_TOO_LARGE",
  MODEL_OUTPUT_TRUNCATED: "MODEL_OUTPUT_TRUNCATED",
});

/** What a ModelCallError carries in `data` (and so on the wire). */
export interface ModelCallErrorData {
  /** Config name of the model (`[models.<name>]`). */
  name: string;
  /** Provider model id. */
  model: string;
  /**
   * Base URL without credentials or query: for operators (logs, events), never in the
   * message, which reaches end users through answers and the gateway.
   */
  endpoint: string;
  reason: ModelFailureReason;
  /** HTTP status of the last attempt, when there was a response. */
  status?: number;
  attempts: number;
  /** The provider's wait hint, when it gave one. */
  retryAfterMs?: number;
  /** The provider's own error code (`error.code` in the body), e.g. `context_length_exceeded`. */
  providerCode?: string;
}

const ADVICE: Record<ModelFailureReason, string> = {
  rate_limited: "the provider is rate limiting: lower max_concurrency for this model or raise the provider's limit",
  server_error: "the provider is failing: try again later or switch the agent to another model",
  connection: "check that base_url is right and the server is up and reachable from this node",
  stream_interrupted: "the provider kept closing the stream early: check proxies between this node and the provider",
  timeout: "the provider did not finish in time: raise timeout_ms or ask for fewer tokens",
  invalid_response: "the endpoint does not answer like an OpenAI-compatible chat-completions API: check base_url",
  rejected: "the provider refused the request; retrying cannot help",
};

const STATUS_ADVICE: Record<number, string> = {
  401: "the API key was refused: check the variable or file named by api_key_env / api_key_file",
  403: "the API key may not use this model or endpoint: check its permissions",
  404: "the model or endpoint does not exist: check model and base_url",
};

/**
 * A provider call failed for good: after the last retry for a transient failure
 * (`retryable` true: the caller may try again later), or at once for a request the
 * provider rejected (`retryable` false).
 */
export class ModelCallError extends KovaError {
  declare readonly data: ModelCallErrorData;

  constructor(data: ModelCallErrorData, detail: string, options: KovaErrorOptions = {}) {
    const status = data.status === undefined ? "" : `HTTP ${data.status}: `;
    const advice = (data.status !== undefined && STATUS_ADVICE[data.status]) || ADVICE[data.reason];
    super(ModelErrorCode.MODEL_CALL_FAILED, `model ${data.name} (${data.model}) failed after ${data.attempts} attempt(s): ${status}${detail}; ${advice}`, {
      retryable: data.reason !== "rejected",
      ...options,
      data,
    });
  }
}

/** The caller aborted the call (its signal fired) while it waited for a slot or talked to the provider. */
export class ModelCallAbortedError extends KovaError {
  constructor(
    readonly model: string,
    readonly phase: "queued" | "calling",
    cause: unknown,
  ) {
    super(ModelErrorCode.MODEL_CALL_ABORTED, `model ${model}: call aborted by the caller while ${phase}`, {
      cause,
      data: { model, phase },
    });
  }
}

/** The scheduler was closed (node shutting down) while the call waited for a slot. */
export class SchedulerClosedError extends KovaError {
  constructor(model: string) {
    super(ModelErrorCode.MODEL_SCHEDULER_CLOSED, `model ${model}: the call scheduler closed (node stopping) before a slot was free`, {
      retryable: true,
      data: { model },
    });
  }
}

/**
 * One response carried more text and tool-call arguments than `max_response_bytes`. The
 * request was aborted there, so no more of it was read. Not retried: the same prompt
 * would most likely produce the same runaway answer, and the run must end failed
 * rather than publish a message NATS refuses (max_payload).
 */
export class ModelResponseTooLargeError extends KovaError {
  constructor(data: { name: string; model: string; endpoint: string; limitBytes: number; receivedBytes: number }) {
    super(
      ModelErrorCode.MODEL_RESPONSE_TOO_LARGE,
      `model ${data.name} (${data.model}) sent a response over ${data.limitBytes} bytes ` +
        `(${data.receivedBytes} bytes of text and tool-call arguments when the request was aborted): ` +
        "ask for a shorter answer (max_output_tokens), or raise max_response_bytes if the node's NATS max_payload allows it",
      { retryable: false, data },
    );
  }
}

/**
 * The model stopped at its output limit (`finish_reason: "length"`) while writing tool
 * calls: their arguments are cut off. Sending them back for repair would only be cut at the
 * same place again, so the run ends with what to raise.
 */
export class ModelOutputTruncatedError extends KovaError {
  constructor(data: { model: string; tools: string[]; maxOutputTokens?: number }) {
    super(
      ModelErrorCode.MODEL_OUTPUT_TRUNCATED,
      `model ${data.model} reached its output limit${data.maxOutputTokens !== undefined ? ` (max_output_tokens ${data.maxOutputTokens})` : ""} ` +
        `while writing a call of ${data.tools.map((t) => JSON.stringify(t)).join(", ")}, so its arguments are cut off: ` +
        "raise the agent's max_output_tokens, or ask for smaller tool inputs",
      { retryable: false, data },
    );
  }
}

export function isModelCallError(err: unknown): err is ModelCallError {
  return err instanceof ModelCallError;
}
