import { ErrorCode, KovaError, TimeoutError, type KovaErrorOptions } from "../core/errors.js";

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
    super(ErrorCode.NATS_UNREACHABLE, `NATS unreachable at URL ${servers}: start nats-server or set NATS_URL`, {
      retryable: true,
      data: { servers },
      ...options,
    });
  }
}

/** A core NATS request found nobody subscribed to its subject. */
export class NoRespondersError extends KovaError {
  constructor(
    readonly subject: string,
    hint: string,
    options: KovaErrorOptions = {},
  ) {
    super(ErrorCode.NO_RESPONDERS, `no responders on ${subject}: ${hint}`, {
      retryable: true,
      data: { subject },
      ...options,
    });
  }
}

/** A request, send or ask did not complete in time; the message names the subject. */
export function subjectTimeout(what: string, subject: string, ms: number, cause?: unknown): TimeoutError {
  return new TimeoutError(`${what} on ${subject}`, ms, { data: { subject }, cause });
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
      ErrorCode.STREAM_CONFLICT,
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
      ErrorCode.PAYLOAD_TOO_LARGE,
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
    super(ErrorCode.DECODE_FAILED, `${format === "json" ? "invalid JSON" : "malformed msgpack"}: ${detail}`, {
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
    super(ErrorCode.INVALID_ENVELOPE, `invalid envelope: ${field} ${detail}`, { data: { field } });
  }
}

/** An envelope whose `type` is not one this version of Kova knows. */
export class UnknownMessageTypeError extends KovaError {
  constructor(readonly type: string) {
    super(ErrorCode.UNKNOWN_MESSAGE_TYPE, `unknown message type ${JSON.stringify(type)}`, { data: { type } });
  }
}

/** The bus was closed; nothing more can be sent or received on it. */
export class BusClosedError extends KovaError {
  constructor(what: string) {
    super(ErrorCode.CONNECTION_CLOSED, `${what}: the bus connection is closed`);
  }
}
