import { ArgumentError, isKovaError, toWire, type WireError, silentLogger } from "../core/index.js";
import { makeContext, type ContextActor } from "./actor-context.js";
import { ActorErrorCode } from "./errors.js";
import type { HostDeps } from "./ports.js";
import type { TemplateBinding } from "./templates.js";
import { TurnJournal, type JournalIo } from "./turn-journal.js";
import type { TurnRecord } from "./turn-record.js";
import type { ActorDefinition, ActorHandler, StepInfo, StepOptions } from "./types.js";

/**
 * Replay as a tool (docs/actors.md, "Replaying a recorded turn"): a recorded turn runs again
 * against today's code, through the same context and journal a recovery uses, with nothing
 * real behind them. Recorded step results, clock readings, random numbers and ids are
 * handed back as recorded; what the record does not hold (a step past its last one, one
 * more clock reading) would have to run for real, so the replay stops there instead. The
 * report names the first place where today's code and the record part.
 */

export type ValueList = "now" | "random" | "newId";

/** Where a replay and its record part. */
export type ReplayDivergence =
  /** Today's code asks for another step at `index` than the one recorded there. */
  | { kind: "step"; index: number; recorded: string; replayed: string }
  /** The handler ended after `index` steps; the record holds more. */
  | { kind: "fewer-steps"; index: number; recorded: string }
  /** Today's code draws fewer `now()`/`random()`/`newId()` values than the record holds. */
  | { kind: "fewer-values"; value: ValueList; replayed: number; recorded: number }
  /** The record is of a finished turn, and today's code asks for more than it holds (`next`). */
  | { kind: "past-record"; next: string };

export interface ReplayReport {
  actorId: string;
  messageId: string;
  messageType: string;
  /**
   * - `matched`: today's code took every recorded step and value, and nothing more;
   * - `record-ended`: today's code took what the record holds and asks for more (`next`):
   *   a turn cut short runs on from there in a recovery, which a replay does not do;
   * - `diverged`: see `divergence`, the first place where code and record part.
   */
  outcome: "matched" | "record-ended" | "diverged";
  divergence?: ReplayDivergence;
  /** With `record-ended`: what today's code asked for next (`step #3 "tool:c1"`, `now() #2`). */
  next?: string;
  /** Recorded steps today's code took as recorded. */
  matchedSteps: number;
  recordedSteps: number;
  /** The handler's result when it returned. */
  result?: unknown;
  /** The handler's error when it threw on its own (a recorded failure it let through, say). */
  error?: WireError;
  /** The state after the replayed handler, from `state` (or the type's initial state). */
  state: unknown;
}

export interface ReplayOptions<S> {
  /** The actor's state before the turn (the checkpoint it started from); default the type's initial state. */
  state?: S;
  /**
   * The record is of a turn that ran to its end (its WAL record is COMPLETE): today's code
   * asking for more than it holds is then a divergence, not a cut turn's continuation.
   */
  complete?: boolean;
  /** The template binding of an instance (`<template>--<key>`), as its node gives it. */
  template?: TemplateBinding;
  /** The node id the context reports (default `replay`). */
  nodeId?: string;
}

/** Thrown inside the replayed handler where it would run past the record. */
class PastRecord extends Error {}

/** The recovery journal, watched: where it would run past the record, and the first mismatch. */
class ReplayJournal extends TurnJournal {
  stop: string | undefined;
  mismatch: { index: number; recorded: string; requested: string } | undefined;
  #name = "";

  override async step<R>(name: string, fn: (info: StepInfo) => Promise<R> | R, opts?: StepOptions): Promise<R> {
    // The journal calls gate() (below) synchronously from here when the step would run.
    this.#name = name;
    try {
      return await super.step(name, fn, opts);
    } catch (err) {
      if (isKovaError(err, ActorErrorCode.REPLAY_MISMATCH)) this.mismatch ??= err.data as { index: number; recorded: string; requested: string };
      throw err;
    }
  }

  pastRecord(next: string): never {
    // The first stop is the one reported: a handler that catches it and goes on stops again.
    this.stop ??= next;
    throw new PastRecord(`replay reached the end of the record at ${next}`);
  }

  stepName(): string {
    return this.#name;
  }
}

/**
 * Replays one recorded turn of `definition` against today's code.
 * @throws ArgumentError when the definition has no handler for the record's message type
 */
export async function replayTurn<S>(definition: ActorDefinition<S>, record: TurnRecord, opts: ReplayOptions<S> = {}): Promise<ReplayReport> {
  const env = record.envelope;
  const handler = definition.handlers[env.type] as ActorHandler<unknown> | undefined;
  if (handler === undefined) {
    throw new ArgumentError("definition", `type ${definition.type} has no handler for ${env.type}: replay the turn with the definition that handled it`);
  }
  // A copy: a replay never changes the record it was given (a recovery marks steps unknown in it).
  const replayed: TurnRecord = structuredClone(record);
  const aborted = new AbortController();
  const io: JournalIo = {
    persist: async () => undefined,
    fence: async () => undefined,
    // Called only when a step is about to run for real: past what the record holds for it.
    gate: async () => journal.pastRecord(`step #${journal.nextStep - 1} ${JSON.stringify(journal.stepName())}`),
    signal: aborted.signal,
    now: () => journal.pastRecord(`now() #${replayed.clock.length + 1}`),
    random: () => journal.pastRecord(`random() #${replayed.random.length + 1}`),
    newId: () => journal.pastRecord(`newId() #${replayed.ids.length + 1}`),
  };
  const journal = new ReplayJournal(record.actorId, replayed, io);
  const actor: ContextActor = {
    id: record.actorId,
    def: definition,
    ...(opts.template ? { template: opts.template } : {}),
    deps: inertDeps(opts.nodeId ?? "replay"),
    log: silentLogger(),
  };
  const state = structuredClone(opts.state ?? definition.initialState(opts.template));
  const ctx = makeContext(actor, env, journal, record.attempt, state, undefined, aborted.signal);
  let ended: { result: unknown } | { error: WireError };
  try {
    ended = { result: await handler(ctx) };
  } catch (err) {
    ended = { error: toWire(err) };
  }
  const used = journal.consumed;
  const report = {
    actorId: record.actorId,
    messageId: env.id,
    messageType: env.type,
    recordedSteps: record.steps.length,
    state: ctx.state,
  };

  if (journal.mismatch !== undefined) {
    const m = journal.mismatch;
    return { ...report, matchedSteps: m.index, outcome: "diverged", divergence: { kind: "step", index: m.index, recorded: m.recorded, replayed: m.requested } };
  }
  if (journal.stop !== undefined) {
    const next = journal.stop;
    // A stop at a step counted that step; one at a value did not.
    const matchedSteps = Math.min(next.startsWith("step") ? used.steps - 1 : used.steps, record.steps.length);
    if (opts.complete) return { ...report, matchedSteps, outcome: "diverged", divergence: { kind: "past-record", next } };
    return { ...report, matchedSteps, outcome: "record-ended", next };
  }
  if (used.steps < record.steps.length) {
    const divergence = { kind: "fewer-steps" as const, index: used.steps, recorded: record.steps[used.steps]?.name ?? "(no step recorded there)" };
    return { ...report, ...ended, matchedSteps: used.steps, outcome: "diverged", divergence };
  }
  for (const [value, replayedCount, recordedCount] of [
    ["now", used.clock, record.clock.length],
    ["random", used.random, record.random.length],
    ["newId", used.ids, record.ids.length],
  ] as const) {
    if (replayedCount < recordedCount) {
      const divergence = { kind: "fewer-values" as const, value, replayed: replayedCount, recorded: recordedCount };
      return { ...report, ...ended, matchedSteps: used.steps, outcome: "diverged", divergence };
    }
  }
  return { ...report, ...ended, matchedSteps: used.steps, outcome: "matched" };
}

/**
 * All of its host a replayed context may reach: nothing that acts. A send, an emit or any
 * other step reaches the bus only past the record, where the replay stops first; `stream`
 * (not journaled) publishes nowhere.
 */
function inertDeps(nodeId: string): HostDeps {
  return { nodeId, bus: { publishEvent: async () => undefined } } as unknown as HostDeps;
}

/** One line per report, for `kova wal replay` and logs. */
export function describeReplay(r: ReplayReport): string {
  const head = `${r.actorId} ${r.messageType} ${r.messageId}:`;
  const steps = `${r.matchedSteps} of ${r.recordedSteps} recorded steps`;
  if (r.outcome === "matched") return `${head} matched (${steps})${r.error ? `; the handler threw ${r.error.code}, as recorded` : ""}`;
  if (r.outcome === "record-ended") return `${head} record ends after ${steps}; today's code asks next for ${r.next} (a recovery runs it from there)`;
  const d = r.divergence!;
  switch (d.kind) {
    case "step":
      return `${head} diverged at step #${d.index}: recorded ${JSON.stringify(d.recorded)}, today's code asks for ${JSON.stringify(d.replayed)}`;
    case "fewer-steps":
      return `${head} diverged at step #${d.index}: today's code ends there, the record goes on with ${JSON.stringify(d.recorded)}`;
    case "fewer-values":
      return `${head} diverged after ${steps}: today's code draws ${d.replayed} ${d.value}() values, the record holds ${d.recorded}`;
    case "past-record":
      return `${head} diverged after ${steps}: the turn ran to its end there, today's code asks for ${d.next}`;
  }
}
