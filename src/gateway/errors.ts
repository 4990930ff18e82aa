import { defineErrorCodes, KovaError, type KovaErrorOptions } from "../core/index.js";

/** The gateway layer's error codes (stable: HTTP bodies carry them and scripts match on them). */
export const GatewayErrorCode = defineErrorCodes("gateway", {
  /** No API key, or one the gateway does not know. HTTP 401. */
  UNAUTHORIZED: "UNAUTHORIZED",
  /** A known key that may not use this endpoint. HTTP 403. (What another principal owns is 404, NOT_FOUND or UNKNOWN_AGENT: a key learns nothing of it.) */
  FORBIDDEN: "FORBIDDEN",
  /** No such thing, or another principal's (a session, a task). HTTP 404. */
  NOT_FOUND: "NOT_FOUND",
  /** The key sent more requests than its rate allows. HTTP 429. */
  RATE_LIMITED: "RATE_LIMITED",
  /** The request body is larger than `[gateway] max_body_bytes`. HTTP 413. */
  BODY_TOO_LARGE: "BODY_TOO_LARGE",
  /** The request body nests objects and arrays deeper than the gateway takes (body-depth.ts). HTTP 400. */
  BODY_TOO_DEEP: "BODY_TOO_DEEP",
  /** The request is not what the endpoint takes (bad JSON, missing fields). HTTP 400. */
  BAD_REQUEST: "BAD_REQUEST",
  /** No Kova node answered (e.g. the activation of a template instance). HTTP 503. */
  NO_NODE: "NO_NODE",
  /** The agent's run ended failed or cancelled, or gave no answer in time. */
  RUN_FAILED: "RUN_FAILED",
  /** A streamed answer whose model stream was retried and said otherwise than what was already sent (openai.ts). */
  STREAM_DIVERGED: "STREAM_DIVERGED",
});

/** An HTTP-facing failure: the status to answer with, and a code and message for the body. */
export class GatewayHttpError extends KovaError {
  constructor(
    readonly status: number,
    code: string,
    message: string,
    options: KovaErrorOptions = {},
  ) {
    super(code, message, options);
  }
}
