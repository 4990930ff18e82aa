import type { WireError } from "../core/errors.js";
import { checkFormatVersion } from "../core/format-version.js";
import type { A2AEnvelope } from "./types.js";

/** Format version of the turn record kept in the WAL; old versions keep loading. */
export const TURN_RECORD_VERSION = 1;
/** Turn record versions this build reads. */
export const TURN_RECORD_READABLE: readonly number[] = [1];
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
}

export function newTurnRecord(actorId: string, type: string, envelope: A2AEnvelope): TurnRecord {
  return { v: TURN_RECORD_VERSION, actorId, type, envelope, attempt: 1, steps: [], clock: [], random: [], ids: [] };
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
  };
}
