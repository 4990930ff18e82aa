import { defineDlqReasons } from "../bus/index.js";
import { classifyErrorCodes, defineErrorCodes, ErrorCode, KovaError, type KovaErrorOptions } from "../core/index.js";

/** The actors layer's error codes (stable: they travel over NATS and scripts match on them). */
export const ActorErrorCode = defineErrorCodes("actors", {
  NOT_HOSTED: "NOT_HOSTED",
  LEASE_LOST: "LEASE_LOST",
  ACTOR_FAILED: "ACTOR_FAILED",
  INVALID_TRANSITION: "INVALID_TRANSITION",
  UNKNOWN_ACTOR_TYPE: "UNKNOWN_ACTOR_TYPE",
  STEP_OUTCOME_UNKNOWN: "STEP_OUTCOME_UNKNOWN",
  REPLAY_MISMATCH: "REPLAY_MISMATCH",
  JOURNAL_UNAVAILABLE: "JOURNAL_UNAVAILABLE",
});
classifyErrorCodes({
  [ActorErrorCode.NOT_HOSTED]: "not_found",
  [ActorErrorCode.UNKNOWN_ACTOR_TYPE]: "bad_input",
  // The node lost the actor, or cannot reach its journal: the turn goes on at its next host.
  [ActorErrorCode.LEASE_LOST]: "unavailable",
  [ActorErrorCode.JOURNAL_UNAVAILABLE]: "unavailable",
});

/** The actor runtime's DLQ reasons. */
export const ActorDlqReason = defineDlqReasons("actors", {
  /** The actor has no handler for the message's type. */
  unhandled: "unhandled",
  /** The handler failed on every supervised attempt. */
  handlerFailed: "handler_failed",
  /** The actor was killed while handling the message. */
  killed: "killed",
});

/** A lifecycle transition that the state machine does not allow (a bug or a racing signal). */
export class InvalidTransitionError extends KovaError {
  constructor(actorId: string, from: string, to: string) {
    super(ActorErrorCode.INVALID_TRANSITION, `actor ${actorId}: cannot go from ${from} to ${to}`, {
      data: { actorId, from, to },
    });
  }
}

/** An actor type that no module registered. */
export class UnknownActorTypeError extends KovaError {
  constructor(type: string, known: readonly string[]) {
    super(
      ActorErrorCode.UNKNOWN_ACTOR_TYPE,
      `unknown actor type ${JSON.stringify(type)} (known types: ${known.join(", ") || "none"}): register it on every node, ` +
        "with a module named in kova.toml (modules = [...] or module = ... in [[actors]]) or ActorTypeRegistry.register(defineActor({ type: ... })) in code",
      { data: { type, known: [...known] } },
    );
  }
}

/**
 * Thrown by `fence` when this node no longer holds the actor's lease: the actor has moved,
 * so nothing more may be journaled or acknowledged here.
 */
export class LeaseLostError extends KovaError {
  constructor(actorId: string, options: KovaErrorOptions = {}) {
    super(ActorErrorCode.LEASE_LOST, `actor ${actorId}: this node no longer holds its lease`, {
      ...options,
      data: { actorId, ...(options.data as object | undefined) },
    });
  }
}

/**
 * The shared checkpoint changed under this host (compare-and-set failed): another node
 * wrote it, so this one may have lost the actor. A LeaseLostError unless the fence says
 * the actor is still ours (then a node that had not yet noticed its loss wrote last).
 */
export class CheckpointConflictError extends LeaseLostError {
  constructor(actorId: string, cause: unknown) {
    super(actorId, { cause, data: { checkpoint: "revision changed by another writer" } });
  }
}

/**
 * The actor's step journal on NATS has a record this host did not write or read: another
 * node took the actor over and claimed its journal, so this host's turn is stopped before
 * it records anything more (storage-level fencing: `Nats-Expected-Last-Subject-Sequence`).
 */
export class JournalFencedError extends LeaseLostError {
  constructor(actorId: string, expected: number, cause: unknown) {
    super(actorId, { cause, data: { journal: "another host wrote the actor's step journal", expectedSeq: expected } });
  }
}

/**
 * The step journal on NATS could not be written or read in time (NATS away, no JetStream
 * leader). Not the handler's fault: the message is redelivered and the turn resumes.
 */
export class JournalUnavailableError extends KovaError {
  constructor(actorId: string, what: string, cause: unknown) {
    super(
      ActorErrorCode.JOURNAL_UNAVAILABLE,
      `actor ${actorId}: the step journal on NATS could not be ${what}; the turn resumes when NATS answers (check \`nats stream info\` for the JOURNAL stream)`,
      { cause, retryable: true, data: { actorId } },
    );
  }
}

/**
 * A non-idempotent step was started before a crash and left no recorded result: it may or
 * may not have taken effect. The handler decides (an LLM agent reports it to the model).
 */
export class StepOutcomeUnknownError extends KovaError {
  readonly outcome = "unknown" as const;
  constructor(
    readonly actorId: string,
    readonly step: string,
    readonly index: number,
  ) {
    super(
      ActorErrorCode.STEP_OUTCOME_UNKNOWN,
      `actor ${actorId}: step ${JSON.stringify(step)} (#${index}) started before a crash and recorded no result; ` +
        `it is not idempotent, so it was not run again and its outcome is unknown`,
      { data: { actorId, step, index, outcome: "unknown" } },
    );
  }
}

/** Replayed code asked for a different step than the one recorded: the handler is not deterministic. */
export class ReplayMismatchError extends KovaError {
  constructor(actorId: string, index: number, recorded: string, requested: string) {
    super(
      ActorErrorCode.REPLAY_MISMATCH,
      `actor ${actorId}: replay diverged at step #${index}: recorded ${JSON.stringify(recorded)}, ` +
        `handler asked for ${JSON.stringify(requested)}; take clock, random numbers and ids from the context ` +
        `and branch only on recorded step results`,
      { data: { actorId, index, recorded, requested } },
    );
  }
}

/** A handler that kept failing after every supervised attempt. */
export class ActorFailedError extends KovaError {
  constructor(actorId: string, attempts: number, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(ActorErrorCode.ACTOR_FAILED, `actor ${actorId} failed after ${attempts} attempt(s): ${reason}`, {
      cause,
      data: { actorId, attempts },
    });
  }
}

/** The actor is not hosted by this host (or this node); `why` says more when there is more to say. */
export class NotHostedError extends KovaError {
  constructor(actorId: string, why?: string, options: KovaErrorOptions = {}) {
    super(ActorErrorCode.NOT_HOSTED, `actor ${actorId} is not hosted here${why ? `: ${why}` : ""}`, {
      ...options,
      data: { actorId, ...(options.data as object | undefined) },
    });
  }
}

export function isLeaseLost(err: unknown): err is LeaseLostError {
  return err instanceof KovaError && err.code === ActorErrorCode.LEASE_LOST;
}

/** The turn was stopped by a signal (`interrupt`, `kill`) or by a stop that could not wait for it; it is not retried. */
export class TurnInterruptedError extends KovaError {
  constructor(
    readonly actorId: string,
    readonly by: "interrupt" | "kill" | "stop",
  ) {
    super(ErrorCode.INTERRUPTED, `actor ${actorId}: turn stopped by ${by}`, { data: { actorId, by } });
  }
}
