import { backoffMs } from "../core/index.js";
import type { ActorDefinition, SupervisionOptions } from "./types.js";

export type SupervisionPolicy = Required<SupervisionOptions>;

export const DEFAULT_SUPERVISION: SupervisionPolicy = { maxAttempts: 3, baseBackoffMs: 200, maxBackoffMs: 10_000 };

/** The policy of a type: its `supervision`, then `maxAttempts`, then the defaults; `overrides` win (host-wide settings). */
// biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
export function supervisionFor(def: ActorDefinition<any>, overrides: SupervisionOptions = {}): SupervisionPolicy {
  return {
    maxAttempts: overrides.maxAttempts ?? def.supervision?.maxAttempts ?? def.maxAttempts ?? DEFAULT_SUPERVISION.maxAttempts,
    baseBackoffMs: overrides.baseBackoffMs ?? def.supervision?.baseBackoffMs ?? DEFAULT_SUPERVISION.baseBackoffMs,
    maxBackoffMs: overrides.maxBackoffMs ?? def.supervision?.maxBackoffMs ?? DEFAULT_SUPERVISION.maxBackoffMs,
  };
}

/** Delay before attempt `attempt + 1` after attempt `attempt` failed (exponential with jitter). */
export function retryDelayMs(policy: SupervisionPolicy, attempt: number, random: () => number = Math.random): number {
  return backoffMs(attempt, policy.baseBackoffMs, policy.maxBackoffMs, random);
}

export interface SuperviseHooks {
  /** False for errors a retry cannot fix (lease lost, interrupted, replay mismatch). */
  retryable(err: unknown): boolean;
  /** Called before waiting; persist the attempt counter here so it survives a crash. */
  onRetry(nextAttempt: number, err: unknown, delayMs: number): Promise<void> | void;
  sleep(ms: number): Promise<void>;
}

export type SupervisedResult<R> = { ok: true; value: R; attempts: number } | { ok: false; error: unknown; attempts: number };

/**
 * Runs `attempt` until it succeeds, fails with a non-retryable error, or `maxAttempts` is
 * reached. `firstAttempt` > 1 continues a count that was recorded before a crash.
 */
export async function supervise<R>(
  policy: SupervisionPolicy,
  run: (attempt: number) => Promise<R>,
  hooks: SuperviseHooks,
  firstAttempt = 1,
): Promise<SupervisedResult<R>> {
  let attempt = firstAttempt;
  for (;;) {
    try {
      return { ok: true, value: await run(attempt), attempts: attempt };
    } catch (err) {
      if (!hooks.retryable(err) || attempt >= policy.maxAttempts) return { ok: false, error: err, attempts: attempt };
      const delay = retryDelayMs(policy, attempt);
      await hooks.onRetry(attempt + 1, err, delay);
      await hooks.sleep(delay);
      attempt += 1;
    }
  }
}
