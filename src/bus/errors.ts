import {
  classifyErrorCodes,
  defineErrorCodes,
  ErrorCode,
  errorFamilyOf,
  isKovaError,
  KovaError,
  KovaTimeoutError,
  type KovaErrorOptions,
} from "../core/index.js";
import { isNatsTimeout, isTransientNatsError, permissionViolation } from "./nats-errors.js";

/** The bus layer's error codes (stable: they travel over NATS and scripts match on them). */
export const BusErrorCode = defineErrorCodes("bus", {
  INVALID_ENVELOPE: "INVALID_ENVELOPE",
  DECODE_FAILED: "DECODE_FAILED",
  PAYLOAD_TOO_LARGE: "PAYLOAD_TOO_LARGE",
  UNKNOWN_MESSAGE_TYPE: "UNKNOWN_MESSAGE_TYPE",
  NATS_UNREACHABLE: "NATS_UNREACHABLE",
  NO_RESPONDERS: "NO_RESPONDERS",
  STREAM_CONFLICT: "STREAM_CONFLICT",
  CONNECTION_CLOSED: "CONNECTION_CLOSED",
  JETSTREAM_UNAVAILABLE: "JETSTREAM_UNAVAILABLE",
  NATS_AUTH_FAILED: "NATS_AUTH_FAILED",
  /** The NATS server refused a publish or subscription to this user (its account's permissions). */
  PERMISSION_DENIED: "PERMISSION_DENIED",
  UNKNOWN_AGENT: "UNKNOWN_AGENT",
  BUCKET_NOT_FOUND: "BUCKET_NOT_FOUND",
  /** A KV record kept changing under a compare-and-set update (every try lost; retryable). */
  KV_CONFLICT: "KV_CONFLICT",
  /** A KV value is not JSON: written by hand or damaged. */
  KV_RECORD_CORRUPT: "KV_RECORD_CORRUPT",
});
classifyErrorCodes({
  [BusErrorCode.INVALID_ENVELOPE]: "bad_input",
  [BusErrorCode.DECODE_FAILED]: "bad_input",
  [BusErrorCode.PAYLOAD_TOO_LARGE]: "bad_input",
  [BusErrorCode.UNKNOWN_MESSAGE_TYPE]: "bad_input",
  [BusErrorCode.UNKNOWN_AGENT]: "not_found",
  [BusErrorCode.NATS_UNREACHABLE]: "unavailable",
  [BusErrorCode.CONNECTION_CLOSED]: "unavailable",
  [BusErrorCode.JETSTREAM_UNAVAILABLE]: "unavailable",
});

/**
 * True for a failure of the infrastructure, not of the run or its caller: an error whose
 * code is of the `infrastructure` family (core's ErrorFamily: a timeout, the WAL, the NATS
 * connection, the step journal, a lost lease), or a nats.js failure of a cluster that is
 * starting or electing leaders. The one place that decides it: the turn runner keeps the
 * message and resumes the turn on it, and an agent or coordinator run lets it propagate
 * instead of ending `failed`.
 */
export function isInfrastructureFailure(err: unknown): boolean {
  return (isKovaError(err) && errorFamilyOf(err.code) === "infrastructure") || isTransientNatsError(err);
}

/**
 * The bus's typed failures. Each names what the caller needs to act on: the subject,
 * the stream and field, the size limit. Codes are the stable part (see ErrorCode).
 */

/** The first connection to NATS failed: nothing listens at the URL, or it refused us. */
export class NatsUnreachableError extends KovaError {
  constructor(
    readonly servers: string,
    options: KovaErrorOptions = {},
  ) {
    super(BusErrorCode.NATS_UNREACHABLE, `NATS unreachable at URL ${servers}: start nats-server or set NATS_URL`, {
      retryable: true,
      data: { servers },
      ...options,
    });
  }
}

/** A core NATS request found nobody subscribed to its subject. */
export class KovaNoRespondersError extends KovaError {
  constructor(
    readonly subject: string,
    hint: string,
    options: KovaErrorOptions = {},
  ) {
    super(BusErrorCode.NO_RESPONDERS, `no responders on ${subject}: ${hint}`, {
      retryable: true,
      data: { subject },
      ...options,
    });
  }
}

/** A request, send or ask did not complete in time; the message names the subject. */
export function subjectTimeout(what: string, subject: string, ms: number, cause?: unknown): KovaTimeoutError {
  return new KovaTimeoutError(`${what} on ${subject}`, ms, { data: { subject }, cause });
}

/** An existing stream's configuration differs from the one Kova needs. */
export class StreamConflictError extends KovaError {
  constructor(
    readonly stream: string,
    readonly field: string,
    expected: unknown,
    actual: unknown,
    options: KovaErrorOptions = {},
  ) {
    super(
      BusErrorCode.STREAM_CONFLICT,
      `stream ${stream} exists with ${field}=${JSON.stringify(actual)} but Kova needs ${JSON.stringify(expected)}: ` +
        `delete or edit the stream (nats stream edit ${stream}) or use another cluster name`,
      { data: { stream, field, expected, actual }, ...options },
    );
  }
}

/** The encoded message would exceed the server's max_payload (or the codec's limit). */
export class PayloadTooLargeError extends KovaError {
  constructor(
    readonly size: number,
    readonly limit: number,
    subject: string,
  ) {
    super(
      BusErrorCode.PAYLOAD_TOO_LARGE,
      `message for ${subject} is ${size} bytes, over the limit of ${limit} bytes (server max_payload): ` +
        `send a reference (e.g. an object store key) instead of the data`,
      { data: { size, limit, subject } },
    );
  }
}

/** Bytes that are not a message: malformed msgpack, invalid JSON, too deep, too big. */
export class DecodeError extends KovaError {
  constructor(
    readonly format: "msgpack" | "json",
    detail: string,
    options: KovaErrorOptions = {},
  ) {
    super(BusErrorCode.DECODE_FAILED, `${format === "json" ? "invalid JSON" : "malformed msgpack"}: ${detail}`, {
      data: { format },
      ...options,
    });
  }
}

/** A decoded value that is not a valid A2A envelope; `field` names the first bad field. */
export class InvalidEnvelopeError extends KovaError {
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(BusErrorCode.INVALID_ENVELOPE, `invalid envelope: ${field} ${detail}`, { data: { field } });
  }
}

/** An envelope whose `type` this process does not take (not core, not registered, or malformed). */
export class UnknownMessageTypeError extends KovaError {
  constructor(readonly type: string) {
    super(
      BusErrorCode.UNKNOWN_MESSAGE_TYPE,
      `unknown message type ${JSON.stringify(type)}: use a core A2A type (task_delegate, info_request, result_notify, capability_query, capability_reply) or a namespaced type (<namespace>.<name>) that the receiving node registers`,
      { data: { type } },
    );
  }
}

/** The bus was closed; nothing more can be sent or received on it. */
export class BusClosedError extends KovaError {
  constructor(what: string) {
    super(BusErrorCode.CONNECTION_CLOSED, `${what}: the bus connection is closed`);
  }
}

/**
 * The server answers but has no JetStream for this account: not enabled, or not ready yet
 * (a fresh cluster electing its leaders). Retryable, since the second case passes.
 */
export class JetStreamUnavailableError extends KovaError {
  constructor(
    readonly server: string,
    options: KovaErrorOptions = {},
  ) {
    super(
      BusErrorCode.JETSTREAM_UNAVAILABLE,
      `JetStream is not available on NATS at ${server}: start nats-server with -js (or jetstream {} in its config); a new NATS cluster needs a few seconds to elect its leaders`,
      {
        retryable: true,
        data: { server },
        ...options,
      },
    );
  }
}

/** The NATS server refused this user a publish or subscription (its account's permissions, the roles of deploy/nats/accounts.conf). */
export class PermissionDeniedError extends KovaError {
  constructor(what: string, options: KovaErrorOptions & { operation?: string; subject?: string } = {}) {
    const { operation, subject, ...rest } = options;
    super(
      BusErrorCode.PERMISSION_DENIED,
      `${what}: refused by the NATS server's permissions (this user may not ${operation ?? "use"} ${subject ?? "that subject"}); connect as a user whose role allows it (see deploy/nats/accounts.conf)`,
      { data: { operation, subject }, ...rest },
    );
  }
}

/**
 * A nats.js failure that the caller did not handle itself, as Kova's typed error: a
 * permission refusal becomes PERMISSION_DENIED (naming the subject), a timeout TIMEOUT;
 * a KovaError or anything else is returned as it is. For `throw typedNatsError(err, what)`
 * after recognising the failures a call expects (a missing stream, a lost CAS).
 */
export function typedNatsError(err: unknown, what: string): unknown {
  if (err instanceof KovaError) return err;
  const refused = permissionViolation(err);
  if (refused !== undefined) return new PermissionDeniedError(what, { operation: refused.operation, subject: refused.subject, cause: err });
  if (isNatsTimeout(err)) {
    return new KovaError(ErrorCode.TIMEOUT, `${what}: NATS gave no answer in time; the server may be overloaded or electing leaders, retry`, {
      retryable: true,
      cause: err,
    });
  }
  return err;
}

/** A message addressed to an agent id that no configuration or spawn declared. */
export class UnknownAgentError extends KovaError {
  constructor(
    readonly agentId: string,
    detail = `no agent ${agentId} is declared in this cluster`,
    fix = "check the id with kova agents ls, or declare it ([[agents]] / [[actors]] in kova.toml, or kova spawn)",
  ) {
    super(BusErrorCode.UNKNOWN_AGENT, `${detail}: ${fix}`, {
      data: { agentId },
    });
  }
}

/** A KV bucket that was to be read does not exist (its stream `KV_<bucket>` is missing). */
export class BucketNotFoundError extends KovaError {
  constructor(
    readonly bucket: string,
    options: KovaErrorOptions = {},
  ) {
    super(
      BusErrorCode.BUCKET_NOT_FOUND,
      `KV bucket ${bucket} does not exist (no stream KV_${bucket}): check the cluster name, or start a node that creates it`,
      {
        data: { bucket },
        ...options,
      },
    );
  }
}

/** True for Kova's NO_RESPONDERS (nobody hosts the agent or answers the subject). */
export function isNoResponders(err: unknown): err is KovaError {
  return isKovaError(err, BusErrorCode.NO_RESPONDERS);
}
