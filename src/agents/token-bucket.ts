/**
 * A token bucket in tokens per minute. It may go negative: a call is charged what the
 * provider says it used, after the fact, and the next call waits until the bucket is
 * positive again. Pure (the clock is passed in), so it is tested without waiting.
 */
export class TokenBucket {
  #level: number;
  #at: number;
  readonly #perMs: number;

  constructor(
    readonly tokensPerMinute: number,
    now: number,
  ) {
    this.#level = tokensPerMinute;
    this.#at = now;
    this.#perMs = tokensPerMinute / 60_000;
  }

  level(now: number): number {
    this.#refill(now);
    return this.#level;
  }

  /** Milliseconds until a call may start (0: now). */
  waitMs(now: number): number {
    this.#refill(now);
    return this.#level > 0 ? 0 : Math.ceil((1 - this.#level) / this.#perMs);
  }

  /** Milliseconds until the bucket is full again (0: it is). */
  msUntilFull(now: number): number {
    this.#refill(now);
    return this.#level >= this.tokensPerMinute ? 0 : Math.ceil((this.tokensPerMinute - this.#level) / this.#perMs);
  }

  charge(tokens: number, now: number): void {
    this.#refill(now);
    this.#level -= tokens;
  }

  #refill(now: number): void {
    if (now > this.#at) {
      this.#level = Math.min(this.tokensPerMinute, this.#level + (now - this.#at) * this.#perMs);
      this.#at = now;
    }
  }
}
