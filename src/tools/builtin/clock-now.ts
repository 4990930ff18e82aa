import { systemClock, type Clock, ArgumentError } from "../../core/index.js";
import { defineTool } from "../define-tool.js";
import type { Tool } from "../types.js";

export interface ClockNowResult {
  /** UTC, ISO 8601. */
  iso: string;
  epoch_ms: number;
  timezone: string;
  /** Wall-clock time in `timezone`, `YYYY-MM-DD HH:mm:ss`. */
  local: string;
  /** Offset of `timezone` from UTC, `+HH:MM`. */
  utc_offset: string;
  weekday: string;
}

/**
 * `clock_now`: the current time, in UTC and in a time zone. Idempotent: it changes nothing,
 * and on replay the recorded result is reused, so the model sees the time it saw first.
 * @param clock the time source (tests pass a fixed one)
 */
export function createClockTools(clock: Clock = systemClock): Tool[] {
  return [
    defineTool<{ timezone: string }, ClockNowResult>({
      name: "clock_now",
      description: 'Returns the current date and time: UTC ISO 8601, epoch milliseconds, and the local time in an IANA time zone (default "UTC").',
      idempotent: true,
      parameters: {
        type: "object",
        properties: {
          timezone: { type: "string", default: "UTC", description: 'IANA time zone such as "Europe/Paris" or "America/New_York".', maxLength: 64 },
        },
        additionalProperties: false,
      },
      run: ({ timezone }) => clockNow(clock.now(), timezone),
    }),
  ];
}

/**
 * The time `epochMs` as clock_now reports it.
 * @throws ArgumentError for a time zone the runtime does not know
 */
export function clockNow(epochMs: number, timezone: string): ClockNowResult {
  let parts: Record<string, string>;
  try {
    const fmt = new Intl.DateTimeFormat("en-US", {
      timeZone: timezone,
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      weekday: "long",
      timeZoneName: "longOffset",
    });
    parts = Object.fromEntries(fmt.formatToParts(epochMs).map((p) => [p.type, p.value]));
  } catch {
    throw new ArgumentError("timezone", `unknown time zone ${JSON.stringify(timezone)}: use an IANA name such as "Europe/Paris" or "UTC"`);
  }
  const offset = (parts.timeZoneName ?? "GMT").replace(/^GMT/, "") || "+00:00";
  return {
    iso: new Date(epochMs).toISOString(),
    epoch_ms: epochMs,
    timezone,
    local: `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}`,
    utc_offset: offset,
    weekday: parts.weekday ?? "",
  };
}
