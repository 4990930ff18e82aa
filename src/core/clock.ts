/**
 * Time as a dependency. Code replayed from the WAL takes its clock from a context so
 * that replay sees the times that were recorded, not new ones.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Exponential backoff with full jitter, capped. `attempt` starts at 1. */
export function backoffMs(attempt: number, baseMs = 100, maxMs = 30_000, random = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/**
 * A point in time read from two clocks, for measuring intervals that must count time
 * the machine spent suspended. `performance.now()` (CLOCK_MONOTONIC on Linux, the same
 * on macOS through mach_absolute_time) does not advance while a VM or laptop sleeps;
 * `Date.now()` (the wall clock) does, but an NTP step or an operator can move it either
 * way. See {@link elapsedSince}.
 */
export interface TimeMark {
  readonly mono: number;
  readonly wall: number;
}

export function markTime(): TimeMark {
  return { mono: performance.now(), wall: Date.now() };
}

/**
 * Milliseconds since `mark`, never less than what either clock measured: a suspend
 * shows through the wall clock, a wall clock set back is outweighed by the monotonic
 * one. A wall clock stepped forward overstates the interval, which for a deadline means
 * expiring early: the safe side for a lease fence, never the unsafe one.
 */
export function elapsedSince(mark: TimeMark, now: TimeMark = markTime()): number {
  return Math.max(now.mono - mark.mono, now.wall - mark.wall);
}
