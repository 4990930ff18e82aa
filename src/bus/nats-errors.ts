import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import { jserrors } from "@nats-io/jetstream/internal";
import { PermissionViolationError, RequestError, NoRespondersError as NatsNoResponders, TimeoutError as NatsTimeout } from "@nats-io/transport-node";

/**
 * Recognises NATS failures by nats.js's error classes and JetStream API codes, never by
 * message text (texts change between server versions; codes are the contract). The codes
 * were read off nats-server 2.9.10 (test/integration/nats-errors.test.ts keeps them honest);
 * newer servers' additions are listed where they differ.
 */
export const JsApiCode = {
  ...JetStreamApiCodes,
  StreamNameInUse: 10058,
  StreamSubjectOverlap: 10065,
  ConsumerNameInUse: 10013,
  /** 2.10+: "consumer already exists" with a different configuration. */
  ConsumerAlreadyExists: 10148,
  /** "stream store EOF": deleting a sequence past the end of the stream. */
  StreamStoreEof: 10057,
} as const;

/** The JetStream API error code of `err`, or undefined when it is not a JetStream API error. */
export function jsApiCode(err: unknown): number | undefined {
  return err instanceof JetStreamApiError ? err.code : undefined;
}

function hasCode(err: unknown, ...codes: number[]): boolean {
  const code = jsApiCode(err);
  return code !== undefined && codes.includes(code);
}

/**
 * A compare-and-set lost: a KV `create` on an existing key, an `update` at a stale revision,
 * or a publish with `Nats-Expected-Last-Subject-Sequence` that no longer matches.
 */
export function isWrongLastSequence(err: unknown): boolean {
  return hasCode(err, JsApiCode.StreamWrongLastSequence, JsApiCode.StreamWrongLastSequenceUnknown);
}

export function isConsumerNotFound(err: unknown): boolean {
  return hasCode(err, JsApiCode.ConsumerNotFound);
}

export function isStreamNotFound(err: unknown): boolean {
  return hasCode(err, JsApiCode.StreamNotFound);
}

/** The durable consumer exists with settings that cannot be applied by an add. */
export function isConsumerExists(err: unknown): boolean {
  return hasCode(err, JsApiCode.ConsumerNameInUse, JsApiCode.ConsumerAlreadyExists);
}

export function isStreamNameInUse(err: unknown): boolean {
  return hasCode(err, JsApiCode.StreamNameInUse);
}

export function isSubjectOverlap(err: unknown): boolean {
  return hasCode(err, JsApiCode.StreamSubjectOverlap);
}

/** A message delete or get found nothing at that sequence (deleted already, or past the end). */
export function isMessageGone(err: unknown): boolean {
  return hasCode(err, JsApiCode.NoMessageFound, JsApiCode.StreamStoreEof);
}

/** Nobody subscribes to the subject (core request), or the JetStream API has no responder. */
export function isNatsNoResponders(err: unknown): boolean {
  if (err instanceof NatsNoResponders) return true;
  return err instanceof RequestError && err.isNoResponders();
}

export function isNatsTimeout(err: unknown): boolean {
  return err instanceof NatsTimeout || (err instanceof RequestError && err.cause instanceof NatsTimeout);
}

/**
 * The server refused a publish or subscription this NATS user has no permission for (the
 * roles of deploy/nats/accounts.conf). nats.js rejects a request to a refused subject with
 * it, JetStream API calls as its cause, and closes a refused subscription with it.
 */
export function isPermissionDenied(err: unknown): boolean {
  return permissionViolation(err) !== undefined;
}

/** The PermissionViolationError in `err`'s cause chain (it names the operation and the subject). */
export function permissionViolation(err: unknown): PermissionViolationError | undefined {
  for (let e = err, depth = 0; e !== undefined && e !== null && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof PermissionViolationError) return e;
  }
  return undefined;
}

/** The account or server has no JetStream (not enabled, or not yet ready). */
export function isJetStreamNotEnabled(err: unknown): boolean {
  return err instanceof jserrors.JetStreamNotEnabled || hasCode(err, JsApiCode.JetStreamNotEnabledForAccount);
}

/** 503: JetStream has no leader yet (a fresh or recovering cluster electing one). */
export function isJetStreamNotReady(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.status === 503;
}

/**
 * Failures a NATS or JetStream cluster gives while it is starting, electing leaders or
 * recovering a server: worth waiting for at start-up, not worth failing over.
 */
export function isTransientNatsError(err: unknown): boolean {
  return isNatsTimeout(err) || isNatsNoResponders(err) || isJetStreamNotEnabled(err) || isJetStreamNotReady(err);
}
