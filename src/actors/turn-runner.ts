import { sleep, ErrorCode, isKovaError, KovaError, toWire, newId, type Logger, markPhase, timedPhase } from "../core/index.js";
import { isInfrastructureFailure, type A2AEnvelope, type MailboxContext } from "../bus/index.js";
import { makeContext } from "./actor-context.js";
import { localCheckpoint, localWindow, type Checkpoint, type CheckpointReply } from "./checkpoint-store.js";
import { crashPoint } from "./crash-points.js";
import { ActorDlqReason, ActorFailedError, CheckpointConflictError, isLeaseLost, TurnInterruptedError, ActorErrorCode } from "./errors.js";
import { localCheckpointKey, localWindowKey, type ActorMemory } from "./memory.js";
import type { PauseGate } from "./pause-gate.js";
import type { HostDeps } from "./ports.js";
import { deliverReply, type ReplyingActor } from "./replies.js";
import { supervise, supervisionFor, type SupervisionPolicy } from "./supervision.js";
import { TurnJournal, type JournalIo } from "./turn-journal.js";
import type { ActorJournal } from "./step-journal.js";
import { mergeTurn, newTurnRecord, TURN_KIND, type TurnRecord } from "./turn-record.js";
import type { ActorDefinition, ActorHandler } from "./types.js";

/** What a turn needs from its actor. */
export interface TurnActor extends ReplyingActor {
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
  /**
   * The actor's step journal on NATS, claimed for this host on first use (after the fence);
   * undefined when the host keeps journals in its WAL only.
   * @throws LeaseLostError when the fence fails; JournalUnavailableError when NATS does not answer
   */
  journal(): Promise<ActorJournal | undefined>;
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
  /** Set by runTurn to the turn's record as soon as it has one (the caller parks it if journaling fails). */
  record?: TurnRecord;
  /**
   * Set by runTurn once the turn is committed and answered: the WAL completion of its
   * record, still in flight when runTurn resolves (the caller acks without waiting for it).
   */
  completion?: Promise<void>;
}

export type TurnOutcome =
  | { kind: "done"; result: unknown }
  | { kind: "duplicate" }
  | { kind: "interrupted"; by: "interrupt" | "kill" | "stop" }
  | { kind: "failed"; error: unknown; attempts: number }
  | { kind: "lease_lost"; error: unknown };

/**
 * Runs one message as a journaled, supervised turn (docs/actors.md, "Turn protocol"):
 * WAL append (or the recovered record, merged with what the step journal on NATS holds)
 * → handler, each step a `wal.replace` and (with the NATS journal) an append there → reply
 * saved with the checkpoint to NATS KV → the reply → `wal.complete`
 * with the local checkpoint. The caller acks the mailbox message when this resolves, and
 * naks it when this throws (an infrastructure failure: the record stays PENDING and the
 * redelivery resumes it). The completion is issued, not awaited (`src.completion`): see below.
 */
export async function runTurn(actor: TurnActor, env: A2AEnvelope, src: TurnSource): Promise<TurnOutcome> {
  const { deps, memory } = actor;
  markPhase("turn.start", actor.id);
  let remote: ActorJournal | undefined;
  try {
    remote = await timedPhase("journal.open", actor.id, () => actor.journal());
  } catch (err) {
    if (!isLeaseLost(err)) throw err;
    const outcome: TurnOutcome = { kind: "lease_lost", error: err };
    return src.recovered ? abandon(actor, src.recovered.seq, outcome) : outcome;
  }
  if (memory.has(env.id) || src.recovered?.record.committed) {
    await settleDuplicate(actor, env, src, remote);
    return { kind: "duplicate" };
  }
  const handler = actor.def.handlers[env.type] as ActorHandler<unknown> | undefined;
  if (handler === undefined) throw new KovaError(ErrorCode.INTERNAL, `no handler for ${env.type}: the caller routes unhandled types`);

  // The turn's previous host (another node, or this one before a restart) left it open on NATS.
  const open = remote?.openTurn(env.id);
  // A turn its definition replays from the checkpoint and the message writes no record
  // (docs/actors.md, "Turns without a record"); a redelivery, which may follow a crash of
  // this very turn, is recorded so that supervision counts the crashes.
  const bare = !src.recovered && !open && (src.mailbox?.deliveryCount ?? 1) <= 1 && unrecorded(actor, env);
  let afterCrash = src.afterCrash === true;
  let record: TurnRecord;
  let appended: Promise<number>;
  if (src.recovered) {
    appended = Promise.resolve(src.recovered.seq);
    record = open ? mergeTurn(src.recovered.record, open) : src.recovered.record;
  } else {
    try {
      await fenced(actor);
    } catch (err) {
      if (isLeaseLost(err)) return { kind: "lease_lost", error: err };
      throw err;
    }
    record = newTurnRecord(actor.id, actor.def.type, env, src.mailbox?.seq);
    if (open) {
      // Taken over mid-turn: resumed like a crash recovery, from what the old host recorded.
      record = mergeTurn(record, open);
      if (open.yielded) record.yielded = true;
      afterCrash = true;
      actor.event("actor_turn_taken_over", { envelopeId: env.id, steps: open.steps.length, from: open.nodes });
    }
    // Awaited before the handler starts: a turn whose handler ran always has its PENDING
    // record, so a restart knows it (resumes or abandons it) instead of learning of it only
    // from a redelivery. Running the handler during the append saved ~1 ms on tmpfs and
    // nothing measurable on disk (docs/benchmarks.md), not worth the weaker rule.
    appended = bare
      ? Promise.resolve(NO_RECORD)
      : Promise.resolve(await timedPhase("wal.append", actor.id, () => deps.wal.append(TURN_KIND, record, { owner: actor.id })));
  }
  if (!bare) remote?.begin(env.id);
  src.record = record;
  const slot = { seq: -1 };
  const written = appended.then((seq) => {
    slot.seq = seq;
  });
  // Awaited by every write; a failure seen only here (a handler that made no write) is
  // awaited again before the commit.
  written.catch(() => undefined);
  const signal = src.abort.signal;
  const io: JournalIo = {
    persist: async (r, change) => {
      // Nothing of a turn without a record is written: a redelivery runs it again whole.
      if (bare) return;
      const local = written
        .then(() => timedPhase("wal.replace", actor.id, () => deps.wal.replace(slot.seq, r)))
        .then((s) => {
          slot.seq = s;
        });
      let shared: Promise<void> | undefined;
      if (remote && change) {
        shared =
          "steps" in change
            ? timedPhase("journal.append", actor.id, () => appendSteps(remote, r, change.steps))
            : remote.yielded(r).catch((err: unknown) => actor.log.warn({ err }, "could not mark the turn yielded in the step journal"));
      }
      const [a, b] = await Promise.allSettled([local, shared]);
      if (a.status === "rejected") throw a.reason;
      if (b.status === "rejected") {
        // Deposed (another host claimed the journal): the turn is over here, even if the
        // handler catches this and carries on.
        if (isLeaseLost(b.reason) && !src.abort.signal.aborted) src.abort.abort(b.reason);
        throw b.reason;
      }
    },
    fence: () => fenced(actor),
    gate: () => actor.gate.wait(signal),
    signal,
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
  let crashLoop = false;
  if (afterCrash) {
    // A crash during an attempt counts as a failed attempt, so a handler that brings its
    // process down still ends Failed instead of crash-looping every node it lands on.
    if (record.yielded) record.yielded = false;
    else record.attempt += 1;
    if (record.attempt > policy.maxAttempts) {
      const error = new ActorFailedError(actor.id, policy.maxAttempts, "the process ended during every attempt of this turn");
      outcome = { kind: "failed", error, attempts: policy.maxAttempts };
      crashLoop = true;
    } else {
      await io.persist(record);
    }
  }
  outcome ??= await supervised(actor, env, record, policy, run, io, signal);
  // The turn's record is in the WAL before anything below (abandon, commit, complete) names it.
  await written;
  if (signal.aborted && isLeaseLost(signal.reason)) outcome = { kind: "lease_lost", error: signal.reason };

  if (outcome.kind === "lease_lost") return abandon(actor, slot.seq, outcome);
  // A stop that could not wait: the record stays PENDING, so if this node hosts the actor
  // again it resumes the turn with its recorded steps; if another node takes the actor, it
  // resumes from the step journal on NATS, and this node abandons the record at its next
  // start (ActorHost.abandon).
  if (outcome.kind === "interrupted" && outcome.by === "stop") {
    record.yielded = true;
    await io.persist(record, { yielded: true });
    return outcome;
  }
  // Not the handler's failure: the message is redelivered and the PENDING record resumes,
  // instead of a dead letter.
  if (outcome.kind === "failed" && isInfrastructureFailure(outcome.error)) throw outcome.error;

  if (outcome.kind === "interrupted") {
    if (outcome.by === "kill") await deps.bus.deadLetter(env, ActorDlqReason.killed, { error: signal.reason });
    actor.event("actor_turn_interrupted", { envelopeId: env.id, by: outcome.by });
  } else if (outcome.kind === "failed") {
    await turnFailed(actor, env, outcome.error, crashLoop ? "crash" : "threw");
    await deps.bus.deadLetter(env, ActorDlqReason.handlerFailed, { error: outcome.error });
  }
  // Only a finished handler changes the state; the message's id is recorded either way.
  if (outcome.kind !== "done") finalState = base;

  const answer = env.replyTo ? replyOf(actor.id, env, outcome, src.mailbox) : undefined;
  const cp = memory.next(finalState, env.id, { type: actor.def.type, nodeId: deps.nodeId, ts: Date.now() }, answer);
  crashPoint("before-checkpoint", actor.id);
  try {
    await commit(actor, record, cp);
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
  crashPoint("after-checkpoint", actor.id);
  // The turn is committed: its journal entries on NATS are spent (a reader finds the turn's
  // id in the checkpoint; the next turn's first entry purges them). Nothing is written.
  remote?.done(env.id);
  // A reply that cannot be sent is owed (saved with the checkpoint, retried on a timer) and
  // keeps the record PENDING (the caller naks; the redelivery is a duplicate that sends the
  // saved reply), so an asker is never left without one.
  if (answer) await timedPhase("reply", actor.id, () => deliverReply(actor, env, answer));
  crashPoint("after-reply", actor.id);
  // The turn is committed and answered: the completion only spares the next start a look
  // at this record, so the message is acked without waiting for it (the actor's next
  // message is delivered after that ack: a flushed write less between two turns). Should
  // it be lost (a crash) or fail (the WAL then refuses every write and the node hands its
  // actors over), the next start finds the record PENDING with its message gone from the
  // mailbox or named by the checkpoint, and settles it without running it.
  // Deferred as well: it rides in the transaction of the WAL's next write (the next turn's
  // record, typically), instead of costing a commit and a flush of its own.
  // A checkpoint that stores its window anew writes it in the same transaction.
  // A turn without a record writes the local copy alone, so that the copy and the window it
  // names stay each other's (a copy left behind is only older: the NATS one wins the load).
  const kv = [{ key: localCheckpointKey(actor.id), value: localCheckpoint(cp) as unknown }];
  if (cp.split?.ids) kv.push({ key: localWindowKey(actor.id), value: localWindow(cp.split.base, cp.split.ids) });
  src.completion = timedPhase("wal.complete", actor.id, () => (bare ? deps.wal.putKv(kv) : deps.wal.complete(slot.seq, { kv, defer: true }))).then(() =>
    crashPoint("after-wal-complete", actor.id),
  );
  return outcome;
}

/**
 * A message whose turn is already committed (its id is in the checkpoint, or its parked
 * record was committed): send the saved reply again if it was not confirmed, forget the
 * turn on the step journal, complete a recovered record. Never runs the handler.
 */
async function settleDuplicate(actor: TurnActor, env: A2AEnvelope, src: TurnSource, remote: ActorJournal | undefined): Promise<void> {
  // The checkpoint keeps the last asked turn's reply and the owed ones; a parked record keeps its own.
  const saved = actor.memory.replyFor(env.id) ?? src.recovered?.record.reply;
  if (saved && env.replyTo) await deliverReply(actor, env, saved);
  remote?.done(env.id);
  if (src.recovered) await actor.deps.wal.complete(src.recovered.seq);
}

/**
 * Tells the actor's definition that a turn failed without its handler returning (a crash
 * loop, where the handler never runs again; or a throw on the last attempt), before the
 * dead letter and the commit, so a layer above can end what the message started (an
 * agent's run). A crash after this and before the commit calls it again for the same turn.
 */
async function turnFailed(actor: TurnActor, env: A2AEnvelope, error: unknown, cause: "crash" | "threw"): Promise<void> {
  const hook = actor.def.onTurnFailed;
  if (hook === undefined) return;
  try {
    await hook.call(actor.def, { actorId: actor.id, env, error, cause });
  } catch (err) {
    actor.log.warn({ err, envelopeId: env.id }, "onTurnFailed failed; the message is dead-lettered anyway");
  }
}

/** One entry per step, in step order (steps that ended together share one WAL write, not one entry). */
async function appendSteps(remote: ActorJournal, record: TurnRecord, steps: readonly number[]): Promise<void> {
  for (const i of [...steps].sort((a, b) => a - b)) await remote.step(record, i);
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
    const res = await supervise(
      policy,
      run,
      {
        retryable: (err) => !signal.aborted && retryable(err),
        onRetry: async (next, err, delayMs) => {
          record.attempt = next;
          await io.persist(record);
          actor.log.warn({ err, envelopeId: env.id, attempt: next, delayMs }, "handler failed; retrying");
          actor.event("actor_turn_retry", { envelopeId: env.id, attempt: next, delayMs, error: toWire(err) });
        },
        sleep: (ms) => sleep(ms, signal),
      },
      record.attempt,
    );
    return res.ok ? { kind: "done", result: res.value } : classify(res.error, signal, res.attempts);
  } catch (err) {
    return classify(err, signal, record.attempt);
  }
}

/** The actor is leaving this node: its next host redoes the turn from the redelivered message. */
async function abandon(actor: TurnActor, seq: number, outcome: TurnOutcome): Promise<TurnOutcome> {
  if (seq === NO_RECORD) return outcome;
  await actor.deps.wal.complete(seq).catch((err: unknown) => actor.log.warn({ err }, "could not abandon the turn record"));
  return outcome;
}

/** The seq of a turn without a record. */
const NO_RECORD = -1;

/** Whether the actor's definition says this message's turn needs no record (a throw: it does). */
function unrecorded(actor: TurnActor, env: A2AEnvelope): boolean {
  const test = actor.def.unrecorded;
  if (test === undefined) return false;
  try {
    return test.call(actor.def, env, actor.memory.state) === true;
  } catch (err) {
    actor.log.warn({ err, envelopeId: env.id }, "unrecorded() threw; the turn is recorded");
    return false;
  }
}

function fenced(actor: TurnActor): Promise<void> {
  return timedPhase("fence", actor.id, () => actor.deps.fence(actor.id));
}

async function fenceHolds(actor: TurnActor): Promise<boolean> {
  return actor.deps.fence(actor.id).then(
    () => true,
    () => false,
  );
}

/**
 * Checkpoint to NATS (compare-and-set), then apply it: from here the turn is processed.
 * The WAL record is completed by the caller once the reply is out.
 */
async function commit(actor: TurnActor, record: TurnRecord, cp: Checkpoint): Promise<void> {
  await fenced(actor);
  const store = await actor.deps.checkpoints();
  await timedPhase("kv.checkpoint", actor.id, () => store.save(actor.id, cp));
  record.committed = true;
  // Kept with the record too: should the reply fail, a parked record carries its own answer.
  if (cp.reply) record.reply = cp.reply;
  actor.memory.apply(cp);
}

/** What an asked message's turn answers, saved with its checkpoint. */
function replyOf(actorId: string, env: A2AEnvelope, outcome: TurnOutcome, mb: MailboxContext | undefined): CheckpointReply | undefined {
  const json = mb?.encoding === "json" ? { encoding: "json" as const } : {};
  if (outcome.kind === "done") return { for: env.id, result: outcome.result ?? null, ...json };
  if (outcome.kind === "failed") return { for: env.id, error: toWire(outcome.error), ...json };
  if (outcome.kind === "interrupted") return { for: env.id, error: toWire(new TurnInterruptedError(actorId, outcome.by)), ...json };
  return undefined;
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
