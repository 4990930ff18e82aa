import { sleep } from "../core/clock.js";
import { isKovaError, toWire } from "../core/errors.js";
import { newId } from "../core/ids.js";
import type { Logger } from "../core/logger.js";
import type { A2AEnvelope, MailboxContext } from "../bus/index.js";
import { makeContext } from "./actor-context.js";
import type { Checkpoint } from "./checkpoint-store.js";
import { ActorDlqReason, ActorFailedError, CheckpointConflictError, isLeaseLost, TurnInterruptedError, ActorErrorCode } from "./errors.js";
import { localCheckpointKey, type ActorMemory } from "./memory.js";
import type { PauseGate } from "./pause-gate.js";
import type { HostDeps } from "./ports.js";
import { supervise, supervisionFor, type SupervisionPolicy } from "./supervision.js";
import { TurnJournal, type JournalIo } from "./turn-journal.js";
import { newTurnRecord, TURN_KIND, type TurnRecord } from "./turn-record.js";
import type { ActorDefinition, ActorHandler } from "./types.js";
import { BusErrorCode } from "../bus/errors.js";

/** What a turn needs from its actor. */
export interface TurnActor {
  readonly id: string;
  // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
  readonly def: ActorDefinition<any>;
  readonly deps: HostDeps;
  // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
  readonly memory: ActorMemory<any>;
  readonly gate: PauseGate;
  readonly log: Logger;
  /** Reloads the committed memory from the checkpoints (after a conflict). */
  reload(): Promise<void>;
  /** Retry and failure events (state events come from the lifecycle). */
  event(type: string, data: Record<string, unknown>): void;
}

export interface TurnSource {
  /** A turn found PENDING in the WAL at start (or parked after an infrastructure failure). */
  recovered?: { seq: number; record: TurnRecord };
  /** The recovered record was found at start: the process ended during its last attempt. */
  afterCrash?: boolean;
  /** The mailbox delivery, absent for a recovered turn run before the mailbox opens. */
  mailbox?: MailboxContext;
  /** Aborted by interrupt, kill or a stop while paused; the reason is a TurnInterruptedError. */
  abort: AbortController;
}

export type TurnOutcome =
  | { kind: "done"; result: unknown }
  | { kind: "duplicate" }
  | { kind: "interrupted"; by: "interrupt" | "kill" | "stop" }
  | { kind: "failed"; error: unknown; attempts: number }
  | { kind: "lease_lost"; error: unknown };

/**
 * Runs one message as a journaled, supervised turn (docs/actors.md, "Turn protocol"):
 * WAL append (or the recovered record) → handler, each step a `wal.replace` → checkpoint
 * to NATS KV → `wal.complete` with the local checkpoint → reply. The caller acks the
 * mailbox message when this resolves, and naks it when this throws (an infrastructure
 * failure: the record stays PENDING and the redelivery resumes it).
 */
export async function runTurn(actor: TurnActor, env: A2AEnvelope, src: TurnSource): Promise<TurnOutcome> {
  const { deps, memory } = actor;
  if (memory.has(env.id)) {
    if (src.recovered) await deps.wal.complete(src.recovered.seq);
    return { kind: "duplicate" };
  }
  const handler = actor.def.handlers[env.type] as ActorHandler<unknown> | undefined;
  if (handler === undefined) throw new Error(`no handler for ${env.type}: the caller routes unhandled types`);

  let record: TurnRecord;
  let seq: number;
  if (src.recovered) {
    ({ record, seq } = src.recovered);
  } else {
    try {
      await deps.fence(actor.id);
    } catch (err) {
      if (isLeaseLost(err)) return { kind: "lease_lost", error: err };
      throw err;
    }
    record = newTurnRecord(actor.id, actor.def.type, env);
    seq = await deps.wal.append(TURN_KIND, record, { owner: actor.id });
  }
  const slot = { seq };
  const signal = src.abort.signal;
  const io: JournalIo = {
    persist: async (r) => {
      slot.seq = await deps.wal.replace(slot.seq, r);
    },
    fence: () => deps.fence(actor.id),
    gate: () => actor.gate.wait(signal),
    now: Date.now,
    random: Math.random,
    newId,
  };
  const base = memory.state;
  let finalState: unknown = base;
  const run = async (attempt: number): Promise<unknown> => {
    const journal = new TurnJournal(actor.id, record, io);
    const ctx = makeContext(actor, env, journal, attempt, structuredClone(base), src.mailbox, signal);
    // A handler that caught an interruption and returned has wrapped up: its turn is done.
    const result = await handler(ctx);
    await journal.flush();
    finalState = ctx.state;
    return result;
  };

  const policy = supervisionFor(actor.def, deps.supervision);
  let outcome: TurnOutcome | undefined;
  if (src.afterCrash) {
    // A crash during an attempt counts as a failed attempt, so a handler that brings its
    // process down still ends Failed instead of crash-looping every node it lands on.
    if (record.yielded) record.yielded = false;
    else record.attempt += 1;
    if (record.attempt > policy.maxAttempts) {
      const error = new ActorFailedError(actor.id, policy.maxAttempts, new Error("the process ended during every attempt of this turn"));
      outcome = { kind: "failed", error, attempts: policy.maxAttempts };
    } else {
      await io.persist(record);
    }
  }
  outcome ??= await supervised(actor, env, record, policy, run, io, signal);

  if (outcome.kind === "lease_lost") return abandon(actor, slot.seq, outcome);
  // A stop that could not wait: the record stays PENDING, so if this node hosts the actor
  // again it resumes the turn with its recorded steps; if another node takes the actor,
  // the node abandons the record at its next start (ActorHost.abandon).
  if (outcome.kind === "interrupted" && outcome.by === "stop") {
    record.yielded = true;
    await io.persist(record);
    return outcome;
  }
  if (outcome.kind === "failed" && isInfrastructure(outcome.error)) throw outcome.error;

  if (outcome.kind === "interrupted") {
    if (outcome.by === "kill") await deps.bus.deadLetter(env, ActorDlqReason.killed, { error: signal.reason });
    actor.event("actor_turn_interrupted", { envelopeId: env.id, by: outcome.by });
  } else if (outcome.kind === "failed") {
    await deps.bus.deadLetter(env, ActorDlqReason.handlerFailed, { error: outcome.error });
  }
  // Only a finished handler changes the state; the message's id is recorded either way.
  if (outcome.kind !== "done") finalState = base;

  const cp = memory.next(finalState, env.id, { type: actor.def.type, nodeId: deps.nodeId, ts: Date.now() });
  try {
    await commit(actor, slot.seq, cp);
  } catch (err) {
    if (err instanceof CheckpointConflictError && (await fenceHolds(actor))) {
      // Still ours, but another node wrote the checkpoint (it had not noticed losing the
      // actor yet). Take its state; the redelivered message then runs on it, or is a duplicate.
      await abandon(actor, slot.seq, outcome);
      await actor.reload();
      if (actor.memory.has(env.id)) return { kind: "duplicate" };
      throw err;
    }
    if (isLeaseLost(err)) return abandon(actor, slot.seq, { kind: "lease_lost", error: err });
    throw err;
  }
  await reply(actor, env, outcome, src.mailbox);
  return outcome;
}

/** Runs the attempts of a turn under the supervision policy; never throws. */
async function supervised(
  actor: TurnActor,
  env: A2AEnvelope,
  record: TurnRecord,
  policy: SupervisionPolicy,
  run: (attempt: number) => Promise<unknown>,
  io: JournalIo,
  signal: AbortSignal,
): Promise<TurnOutcome> {
  try {
    const res = await supervise(policy, run, {
      retryable: (err) => !signal.aborted && retryable(err),
      onRetry: async (next, err, delayMs) => {
        record.attempt = next;
        await io.persist(record);
        actor.log.warn({ err, envelopeId: env.id, attempt: next, delayMs }, "handler failed; retrying");
        actor.event("actor_turn_retry", { envelopeId: env.id, attempt: next, delayMs, error: toWire(err) });
      },
      sleep: (ms) => sleep(ms, signal),
    }, record.attempt);
    return res.ok ? { kind: "done", result: res.value } : classify(res.error, signal, res.attempts);
  } catch (err) {
    return classify(err, signal, record.attempt);
  }
}

/** The actor is leaving this node: its next host redoes the turn from the redelivered message. */
async function abandon(actor: TurnActor, seq: number, outcome: TurnOutcome): Promise<TurnOutcome> {
  await actor.deps.wal.complete(seq).catch((err: unknown) => actor.log.warn({ err }, "could not abandon the turn record"));
  return outcome;
}

async function fenceHolds(actor: TurnActor): Promise<boolean> {
  return actor.deps.fence(actor.id).then(
    () => true,
    () => false,
  );
}

/** Checkpoint to NATS (compare-and-set), then complete the WAL record with the local copy, then apply. */
async function commit(actor: TurnActor, seq: number, cp: Checkpoint): Promise<void> {
  const { deps } = actor;
  await deps.fence(actor.id);
  const store = await deps.checkpoints();
  await store.save(actor.id, cp);
  await deps.wal.complete(seq, { kv: [{ key: localCheckpointKey(actor.id), value: cp }] });
  actor.memory.apply(cp);
}

async function reply(actor: TurnActor, env: A2AEnvelope, outcome: TurnOutcome, mb: MailboxContext | undefined): Promise<void> {
  if (!env.replyTo) return;
  const opts = mb ? { encoding: mb.encoding } : {};
  try {
    if (outcome.kind === "done") await actor.deps.bus.respond(env, outcome.result, opts);
    else if (outcome.kind === "failed") await actor.deps.bus.respond(env, null, { ...opts, error: outcome.error });
    else if (outcome.kind === "interrupted") {
      await actor.deps.bus.respond(env, null, { ...opts, error: new TurnInterruptedError(actor.id, outcome.by) });
    }
  } catch (err) {
    // The turn is committed; a lost reply only makes the asker time out.
    actor.log.warn({ err, envelopeId: env.id }, "could not send the reply");
  }
}

function classify(err: unknown, signal: AbortSignal, attempts: number): TurnOutcome {
  const reason = signal.aborted ? signal.reason : err;
  if (isLeaseLost(reason)) return { kind: "lease_lost", error: reason };
  if (reason instanceof TurnInterruptedError) return { kind: "interrupted", by: reason.by };
  return { kind: "failed", error: err, attempts };
}

// Deterministic failures repeat on every attempt: retrying them only delays Failed.
function retryable(err: unknown): boolean {
  return !isLeaseLost(err) && !isKovaError(err, ActorErrorCode.REPLAY_MISMATCH) && !isKovaError(err, ActorErrorCode.STEP_OUTCOME_UNKNOWN);
}

// Failures of the runtime's own journaling (WAL, NATS) are not the handler's fault: the
// message is redelivered and the PENDING record resumes, instead of a dead letter.
function isInfrastructure(err: unknown): boolean {
  return isKovaError(err) && (err.code.startsWith("WAL_") || err.code === BusErrorCode.NATS_UNREACHABLE || err.code === BusErrorCode.CONNECTION_CLOSED);
}
