import { ConfigError } from "./errors.js";

const DURATION = /^(\d+)\s*(ms|s|m|min|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * A duration as milliseconds: a number, or a string such as "500ms", "30s", "15m", "5min", "2h", "1d".
 * @throws ConfigError naming `key`
 */
export function durationMs(value: unknown, key: string): number {
  if (typeof value === "number" && Number.isInteger(value) && value > 0) return value;
  if (typeof value === "string") {
    const m = DURATION.exec(value.trim());
    if (m) return Number(m[1]) * UNIT_MS[m[2]!]!;
  }
  throw new ConfigError(key, `must be a duration: milliseconds, or a string like "30s", "15m", "2h", not ${JSON.stringify(value)}`);
}

/**
 * A duration where 0 (or "0") means "never": `idle_after`, `marker_compaction`.
 * @returns undefined when the key is absent
 * @throws ConfigError naming the key, as durationMs
 */
export function durationOrNever(value: unknown, key: string): number | undefined {
  if (value === undefined) return undefined;
  return value === 0 || value === "0" ? 0 : durationMs(value, key);
}
