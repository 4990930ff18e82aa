/** How a crashed or unreachable server is retried. */
export interface RestartPolicy {
  /** Delay before the first retry (default 500 ms). */
  initialDelayMs: number;
  /** Cap of the doubling delay (default 30 s): a broken server costs one spawn per cap. */
  maxDelayMs: number;
  /**
   * A connection that stayed up this long counts as healthy (default 60 s): its next failure
   * starts again from `initialDelayMs` instead of the grown delay.
   */
  healthyAfterMs: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicy = { initialDelayMs: 500, maxDelayMs: 30_000, healthyAfterMs: 60_000 };

/**
 * Exponential backoff between restarts. No jitter: each node restarts its own child
 * process, so there is no herd of clients to spread out.
 */
export class Backoff {
  #failures = 0;

  constructor(private readonly policy: RestartPolicy) {}

  /** Failures since the last healthy period. */
  get failures(): number {
    return this.#failures;
  }

  /**
   * Records a failure and returns the delay before the next attempt.
   * @param upForMs how long the connection that just failed had been up (0 when it never came up)
   */
  next(upForMs: number): number {
    if (upForMs >= this.policy.healthyAfterMs) this.#failures = 0;
    const delay = Math.min(this.policy.maxDelayMs, this.policy.initialDelayMs * 2 ** this.#failures);
    this.#failures++;
    return delay;
  }
}
