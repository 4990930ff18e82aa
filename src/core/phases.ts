import { channel } from "node:diagnostics_channel";

/**
 * The `node:diagnostics_channel` name on which Kova reports how long each phase of a turn
 * takes (mailbox delivery, WAL writes, step-journal appends, event publishes, KV round
 * trips, checkpoint, reply): what `bench/agents-overhead.mjs` uses to say where a run's
 * time goes. Nothing is measured, allocated or published while nobody subscribes.
 */
export const PHASE_CHANNEL = "kova:phase";

/** One timed phase, in `performance.now()` milliseconds of the process that ran it. */
export interface PhaseSpan {
  /** e.g. `wal.append`, `journal.append`, `event:run_completed`, `kv.checkpoint`. */
  phase: string;
  /** The actor (agent) it worked for, when it was working for one. */
  actorId?: string;
  start: number;
  /** Equal to `start` for an instant (a mark). */
  end: number;
}

const phases = channel(PHASE_CHANNEL);

/** True while someone listens: callers that would build a phase name can skip it otherwise. */
export function tracingPhases(): boolean {
  return phases.hasSubscribers;
}

/**
 * Runs `work` and reports it as one phase when someone listens (success or failure alike);
 * otherwise only runs it. The promise returned is `work`'s own.
 */
export function timedPhase<T>(phase: string, actorId: string | undefined, work: () => Promise<T>): Promise<T> {
  if (!phases.hasSubscribers) return work();
  const start = performance.now();
  const p = work();
  const done = () => {
    phases.publish({ phase, ...(actorId !== undefined ? { actorId } : {}), start, end: performance.now() } satisfies PhaseSpan);
  };
  p.then(done, done);
  return p;
}

/** Reports an instant (a message delivered, an ack sent) when someone listens. */
export function markPhase(phase: string, actorId?: string): void {
  if (!phases.hasSubscribers) return;
  const t = performance.now();
  phases.publish({ phase, ...(actorId !== undefined ? { actorId } : {}), start: t, end: t } satisfies PhaseSpan);
}
