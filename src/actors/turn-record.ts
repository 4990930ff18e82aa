import { type WireError, checkFormatVersion } from "../core/index.js";
import type { CheckpointReply } from "./checkpoint-store.js";
import type { A2AEnvelope } from "./types.js";

/**
 * Format version of the turn record kept in the WAL; old versions keep loading.
 * 2: a send's envelope id is derived from the turn and the step (`derivedId`) instead of
 * being drawn from `ids`, so a replay of a v1 record keeps drawing it from `ids`.
 * 3: a parked record may carry `committed` and the saved `reply`. A build that reads only
 * 1 and 2 would ignore them and run a committed turn again, so it must refuse the record.
 * Only such a record is written as 3 (`markCommitted`); every other record stays 2, which
 * the build before 3 still reads (a rollback during a rolling upgrade keeps working).
 */
export const TURN_RECORD_VERSION = 3;
/** The version of a record that carries no commit mark. */
const UNMARKED_VERSION = 2;
/** Turn record versions this build reads. */
export const TURN_RECORD_READABLE: readonly number[] = [1, 2, 3];
/** WAL record kind of an actor turn. */
export const TURN_KIND = "actor.turn";

export type StepStatus = "started" | "done" | "failed" | "unknown";

export interface StepRecord {
  name: string;
  status: StepStatus;
  idempotent: boolean;
  result?: unknown;
  error?: WireError;
}

/**
 * The one pending WAL record of a turn. Each journaled step replaces it with a new record
 * carrying every result so far, so a crash leaves exactly what the replay needs.
 */
export interface TurnRecord {
  v: number;
  actorId: string;
  type: string;
  envelope: A2AEnvelope;
  /** Supervised attempt in progress (survives crashes, so a crash loop still ends in Failed). */
  attempt: number;
  /** Set when a stop cut the turn on purpose: resuming it is not a new attempt. */
  yielded?: boolean;
  steps: StepRecord[];
  /** Values handed out by ctx.now(), ctx.random() and ctx.newId(), in order. */
  clock: number[];
  random: number[];
  ids: string[];
  /**
   * The message's sequence in the A2A stream: a turn found PENDING whose message left the
   * stream unprocessed (dead-lettered) is dropped instead of run again.
   */
  streamSeq?: number;
  /**
   * Set once the checkpoint listing this turn is saved: a turn parked after that point is
   * recognised as processed when its message comes back, or at the next start, however many
   * ids the checkpoint's processed window has seen since. In memory for every turn; written
   * to the WAL (format v3) only when the turn is parked after its commit, which is off the
   * hot path (a reply that could not be published).
   */
  committed?: boolean;
  /**
   * The answer saved with the committed checkpoint (set with `committed`): the checkpoint
   * keeps only the actor's last asked turn's reply, so a parked turn that later messages
   * overtook re-sends its own from here.
   */
  reply?: CheckpointReply;
}

export function newTurnRecord(actorId: string, type: string, envelope: A2AEnvelope, streamSeq?: number): TurnRecord {
  return {
    v: UNMARKED_VERSION,
    actorId,
    type,
    envelope,
    attempt: 1,
    steps: [],
    clock: [],
    random: [],
    ids: [],
    ...(streamSeq === undefined ? {} : { streamSeq }),
  };
}

const RANK: Record<StepStatus, number> = { started: 1, done: 2, failed: 2, unknown: 2 };

/**
 * The union of two partial journals of the same turn (the local WAL's and the NATS one's):
 * each was written step by step from one deterministic run, so each value list is a prefix
 * of the same sequence (the longer wins), and per step a recorded outcome beats a bare start.
 * A step neither side recorded stays a hole: an idempotent step (it writes no intent) that
 * was running when the turn was cut, maybe beside concurrent steps that did record; replay
 * runs it again and reuses the others.
 */
export function mergeTurn(into: TurnRecord, other: Pick<TurnRecord, "steps" | "clock" | "random" | "ids" | "attempt">): TurnRecord {
  const longer = <T>(a: T[], b: T[]): T[] => (b.length > a.length ? [...b] : a);
  const steps = [...into.steps];
  for (let i = 0; i < other.steps.length; i++) {
    const theirs = other.steps[i];
    if (theirs == null) continue;
    const ours = steps[i];
    if (ours == null || RANK[theirs.status] > RANK[ours.status]) steps[i] = theirs;
  }
  return {
    ...into,
    attempt: Math.max(into.attempt, other.attempt),
    steps,
    clock: longer(into.clock, other.clock),
    random: longer(into.random, other.random),
    ids: longer(into.ids, other.ids),
  };
}

/**
 * Reads a turn record from the WAL, filling fields that older versions lacked. Undefined if it is not one.
 * @throws UnsupportedFormatError for a record of a newer format version
 */
export function parseTurnRecord(payload: unknown): TurnRecord | undefined {
  if (typeof payload !== "object" || payload === null) return undefined;
  const p = payload as Partial<TurnRecord>;
  if (typeof p.actorId !== "string" || typeof p.envelope !== "object" || p.envelope === null) return undefined;
  const v = checkFormatVersion(`turn record of actor ${p.actorId}`, p.v, TURN_RECORD_READABLE);
  return {
    v,
    actorId: p.actorId,
    type: p.type ?? "",
    envelope: p.envelope,
    attempt: p.attempt ?? 1,
    ...(p.yielded ? { yielded: true } : {}),
    steps: Array.isArray(p.steps) ? p.steps : [],
    clock: Array.isArray(p.clock) ? p.clock : [],
    random: Array.isArray(p.random) ? p.random : [],
    ids: Array.isArray(p.ids) ? p.ids : [],
    ...(typeof p.streamSeq === "number" ? { streamSeq: p.streamSeq } : {}),
    ...(p.committed === true ? { committed: true } : {}),
    ...(isReply(p.reply) ? { reply: p.reply } : {}),
  };
}

/**
 * Marks a parked record committed, with its saved reply: a version 3 record from here on
 * (also a v1 one: what separates 1 from 2 is how a replay draws send ids, and a committed
 * turn is never replayed).
 */
export function markCommitted(record: TurnRecord, reply: CheckpointReply | undefined): void {
  record.v = TURN_RECORD_VERSION;
  record.committed = true;
  if (reply) record.reply = reply;
}

function isReply(r: unknown): r is CheckpointReply {
  return typeof r === "object" && r !== null && typeof (r as CheckpointReply).for === "string";
}
