import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { Logger } from "../core/index.js";
import { StreamConflictError } from "./errors.js";
import type { Subjects } from "./subjects.js";
import { isStreamNameInUse, isStreamNotFound, isSubjectOverlap } from "./nats-errors.js";

export interface StreamOptions {
  /** Replicas of every Kova stream (1 on a single server, 3 on a cluster). Default 1. */
  replicas?: number;
  /** How long a resend with the same envelope id is recognised (default 2 min). */
  duplicateWindowMs?: number;
  /** Events older than this are dropped (default 7 days). */
  eventsMaxAgeMs?: number;
  /** Dead letters older than this are dropped (default 30 days). */
  dlqMaxAgeMs?: number;
}

const DAY = 24 * 60 * 60 * 1000;

type Wanted = Pick<StreamConfig, "name" | "subjects" | "retention" | "storage" | "num_replicas" | "max_age" | "duplicate_window" | "discard"> &
  Partial<Pick<StreamConfig, "allow_rollup_hdrs">>;

/** The four stream configurations Kova needs (docs/protocol.md lists them). */
export function kovaStreamConfigs(subjects: Subjects, opts: StreamOptions = {}): Wanted[] {
  const replicas = opts.replicas ?? 1;
  const dup = nanos(opts.duplicateWindowMs ?? 120_000);
  // EVENTS and DLQ keep everything until it ages out.
  const limitsStream = (name: string, subject: string, maxAgeMs: number): Wanted => ({
    name,
    subjects: [subject],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    num_replicas: replicas,
    max_age: nanos(maxAgeMs),
    duplicate_window: dup,
    discard: DiscardPolicy.Old,
  });
  return [
    {
      // WorkQueue: a message leaves the stream when its agent acks it; per-agent
      // consumers filter disjoint subjects, which WorkQueue requires.
      name: subjects.streams.a2a,
      subjects: [subjects.a2aWildcard],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      num_replicas: replicas,
      max_age: 0,
      duplicate_window: dup,
      discard: DiscardPolicy.Old,
    },
    limitsStream(subjects.streams.events, subjects.eventsWildcard, opts.eventsMaxAgeMs ?? 7 * DAY),
    limitsStream(subjects.streams.dlq, subjects.dlqWildcard, opts.dlqMaxAgeMs ?? 30 * DAY),
    {
      // The actors' step journal (src/actors/step-journal.ts): a subject per actor holding
      // its open turn's records. The record that ends a turn is a rollup (`Nats-Rollup:
      // sub`), which purges the subject down to itself in the same write, so the stream
      // holds about one message per actor plus the steps of turns in progress.
      name: subjects.streams.journal,
      subjects: [subjects.journalWildcard],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: replicas,
      max_age: 0,
      duplicate_window: dup,
      discard: DiscardPolicy.Old,
      allow_rollup_hdrs: true,
    },
  ];
}

/**
 * Creates Kova's streams, or checks that existing ones match. Safe to call from every
 * node at every start, concurrently.
 * @throws StreamConflictError naming the stream and the first differing field, also
 *   when another stream already captures Kova's subjects
 */
export async function ensureStreams(jsm: JetStreamManager, subjects: Subjects, opts: StreamOptions = {}, log?: Logger): Promise<void> {
  for (const want of kovaStreamConfigs(subjects, opts)) await ensureStream(jsm, want, log);
}

async function ensureStream(jsm: JetStreamManager, want: Wanted, log?: Logger): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const existing = await jsm.streams.info(want.name).catch((err: unknown) => {
      if (isStreamNotFound(err)) return undefined;
      throw err;
    });
    if (existing) return compare(want, existing.config);
    try {
      await jsm.streams.add(want);
      log?.info({ stream: want.name }, "created stream");
      return;
    } catch (err) {
      // Another node created it between our info and add: compare against theirs.
      // Another node created it between our info and add (nats-server 2.9 may answer the
      // loser of two concurrent creates with a subject overlap): compare against theirs.
      if ((isStreamNameInUse(err) || isSubjectOverlap(err)) && attempt === 0) continue;
      if (isSubjectOverlap(err)) {
        const msg = err instanceof Error ? err.message : String(err);
        throw new StreamConflictError(want.name, "subjects", want.subjects, `captured by another stream (${msg})`, { cause: err });
      }
      throw err;
    }
  }
}

function compare(want: Wanted, have: StreamConfig): void {
  const sameSubjects = have.subjects?.length === want.subjects.length && want.subjects.every((s) => have.subjects?.includes(s));
  if (!sameSubjects) throw new StreamConflictError(want.name, "subjects", want.subjects, have.subjects);
  for (const field of ["retention", "storage", "num_replicas", "max_age", "duplicate_window", "discard"] as const) {
    if (have[field] !== want[field]) throw new StreamConflictError(want.name, field, want[field], have[field]);
  }
  if (want.allow_rollup_hdrs && !have.allow_rollup_hdrs) throw new StreamConflictError(want.name, "allow_rollup_hdrs", true, have.allow_rollup_hdrs ?? false);
}
