import { checkFormatVersion } from "../core/index.js";
import type { RunUsage } from "../agents/index.js";
import type { ExperimentBudget } from "./spec.js";
import type { Verdict } from "./verifiers.js";

/**
 * What an experiment leaves in KV `kova_<c>_evals` (docs/evals.md, "Results"): one record per
 * attempt, and the experiment's status. Both are JSON with a format version `v`, readable
 * with plain NATS tools; a reader refuses versions it does not know.
 */

export const ATTEMPT_RECORD_VERSION = 1;
export const STATUS_RECORD_VERSION = 1;
const READABLE: readonly number[] = [1];

/** Usage of an attempt: tokens and, where the model has a price, its cost (the agent protocol's). */
export type EvalUsage = RunUsage;

/**
 * How an attempt ended. `completed` and `failed` are valid (the subject answered, or failed
 * by its own doing); `infra_error` and `timeout` are infrastructure failures, replaced by
 * another attempt; `cancelled` was cut by a cancel or the budget; `judging` is an answer
 * waiting for its judge (not an end).
 */
export type AttemptStatus = "completed" | "failed" | "infra_error" | "timeout" | "cancelled" | "judging";

export interface AttemptRecord {
  v: number;
  experimentId: string;
  cell: number;
  subject: string;
  task: string;
  repetition: number;
  attempt: number;
  status: AttemptStatus;
  /** True for the cell's authoritative attempt (the earliest valid one). */
  valid: boolean;
  /** Weighted mean of the verdicts (valid attempts only; 0 for `failed`). */
  score: number | null;
  pass: boolean | null;
  verifiers: Verdict[];
  output?: string;
  outputTruncated?: boolean;
  /** Why it did not complete. */
  reason: { code: string; message: string; retryable?: boolean } | null;
  usage: EvalUsage;
  /** The judges' own usage, counted apart. */
  judgeUsage?: EvalUsage;
  durationMs: number;
  startedAt: number;
  endedAt: number;
  /** The subject's run: `kova events tail --session <experiment> --tree` shows it. */
  runId: string;
  node?: string;
}

export type ExperimentStatus = "new" | "running" | "completed" | "budget_exhausted" | "cancelled" | "failed";
export const ENDED_STATUSES: readonly ExperimentStatus[] = ["completed", "budget_exhausted", "cancelled", "failed"];

/** The experiment as `kova eval ls` lists it. */
export interface StatusRecord {
  v: number;
  experimentId: string;
  name: string;
  description?: string;
  status: ExperimentStatus;
  cells: number;
  subjects: string[];
  /** The agents and actors its subjects and judges name (what a gateway key must be allowed to see it). */
  agents: string[];
  tasks: number;
  repetitions: number;
  budget: ExperimentBudget;
  /** Runs so far: 1 after the start, one more per resume. */
  round?: number;
  /** Who started it (the client's id, or the owner it named). */
  owner?: string;
  digest: string;
  createdAt: number;
  startedAt?: number;
  endedAt?: number;
  stopReason?: { code: string; message: string };
}

/** @throws UnsupportedFormatError for a record a newer Kova wrote */
export function readAttemptRecord(key: string, value: unknown): AttemptRecord {
  checkFormatVersion(`attempt record ${key}`, (value as { v?: unknown } | null)?.v, READABLE);
  return value as AttemptRecord;
}

/** @throws UnsupportedFormatError for a record a newer Kova wrote */
export function readStatusRecord(key: string, value: unknown): StatusRecord {
  checkFormatVersion(`experiment status ${key}`, (value as { v?: unknown } | null)?.v, READABLE);
  return value as StatusRecord;
}

/** Most of an answer a record keeps: records are KV values, and a report reads thousands of them. */
export const OUTPUT_MAX_CHARS = 16 * 1024;
