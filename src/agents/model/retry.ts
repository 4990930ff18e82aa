import { backoffMs } from "../../core/index.js";

/** How a model client spaces its retries. */
export interface RetryPolicy {
  /** First backoff step (default 500 ms); each later one doubles. */
  baseDelayMs: number;
  /**
   * The longest wait between attempts (default 30 s). A provider that asks for a longer
   * wait (`Retry-After`) gets no retry from us: the call fails at once, retryable, with
   * the hint in `retryAfterMs`, so no slot or turn sits idle that long.
   */
  maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { baseDelayMs: 500, maxDelayMs: 30_000 };

/** Minimal view of response headers: the Fetch API's Headers fits. */
export interface HeaderLookup {
  get(name: string): string | null;
}

/**
 * The provider's wait hint in milliseconds: `retry-after-ms` (OpenAI's, fractional ms),
 * else `Retry-After` as seconds or as an HTTP date. Undefined when absent or unreadable.
 */
export function retryAfterMs(headers: HeaderLookup | undefined, now = Date.now()): number | undefined {
  if (!headers) return undefined;
  const ms = parseNumber(headers.get("retry-after-ms"));
  if (ms !== undefined) return Math.ceil(ms);
  const raw = headers.get("retry-after");
  if (raw === null) return undefined;
  // A number is seconds (a negative one is garbage, not a date: Date.parse("-3") is a year).
  if (/^\s*[-+]?[\d.]/.test(raw)) {
    const seconds = parseNumber(raw);
    return seconds === undefined ? undefined : Math.ceil(seconds * 1000);
  }
  const date = Date.parse(raw);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

function parseNumber(raw: string | null): number | undefined {
  if (raw === null || raw.trim() === "") return undefined;
  const n = Number(raw.trim());
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}

/**
 * The wait before the attempt after `attempt` (from 1): the provider's hint plus up to 10%
 * jitter, so a crowd of clients told "1 s" does not return in the same millisecond; without
 * a hint, exponential backoff with jitter. Undefined when the hint exceeds the cap.
 */
export function retryDelayMs(attempt: number, hintMs: number | undefined, policy: RetryPolicy, random: () => number = Math.random): number | undefined {
  if (hintMs !== undefined) {
    if (hintMs > policy.maxDelayMs) return undefined;
    return Math.min(policy.maxDelayMs, Math.ceil(hintMs * (1 + random() / 10)));
  }
  return backoffMs(attempt, policy.baseDelayMs, policy.maxDelayMs, random);
}
