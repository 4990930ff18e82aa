import { ArgumentError, ConfigError } from "./errors.js";

/**
 * Every duration Kova reads, in kova.toml, in workflow files, on the CLI and on the wire
 * (`constraints.deadline`), is read here, so the same text means the same time everywhere:
 * a number with a unit, decimals allowed, any case, spaces between the two allowed.
 */
const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  sec: 1000,
  secs: 1000,
  m: 60_000,
  min: 60_000,
  mins: 60_000,
  h: 3_600_000,
  hr: 3_600_000,
  hrs: 3_600_000,
  d: 86_400_000,
};
const DURATION_TEXT = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*$/i;

/**
 * The milliseconds a duration string names (`"500ms"`, `"30s"`, `"1.5h"`, `"5min"`, `"2d"`),
 * rounded; `undefined` when the text is no duration. A number without a unit is read as
 * milliseconds only with `unitOptional` (a deadline's `"30000"`); in config a unit is required.
 */
export function parseDuration(text: string, opts: { unitOptional?: boolean } = {}): number | undefined {
  const m = DURATION_TEXT.exec(text);
  if (!m) return undefined;
  if (m[2] === undefined && !opts.unitOptional) return undefined;
  const unit = UNIT_MS[(m[2] ?? "ms").toLowerCase()];
  return unit === undefined ? undefined : Math.round(Number(m[1]) * unit);
}

/** How a duration read from the wire or an argument (not a config file) fails: ArgumentError. */
export const AS_ARGUMENT = (field: string, why: string): Error => new ArgumentError(field, why);

/**
 * A duration as a positive number of milliseconds: a number (rounded), or a duration
 * string (parseDuration, unit required).
 * @param fail builds the error: a ConfigError naming `key` by default, AS_ARGUMENT for the wire
 * @throws ConfigError (or what `fail` builds) naming `key`
 */
export function durationMs(value: unknown, key: string, fail: (key: string, why: string) => Error = configError): number {
  const ms = typeof value === "number" && Number.isFinite(value) ? Math.round(value) : typeof value === "string" ? parseDuration(value) : undefined;
  if (ms !== undefined && ms > 0) return ms;
  throw fail(key, `must be a duration: milliseconds, or a string like "500ms", "30s", "5min", "2h", not ${JSON.stringify(value)}`);
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

function configError(key: string, why: string): Error {
  return new ConfigError(key, why);
}
