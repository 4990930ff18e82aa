import { CronExpressionParser } from "cron-parser";
import { ConfigError } from "../core/errors.js";
import { rejectUnknown, stringValue, tableAt, type ConfigTable } from "../core/config-table.js";
import { isValidId } from "../core/ids.js";
import { durationMs } from "../core/duration.js";
import { isWellFormedType, type MessageType } from "../bus/index.js";

export { durationMs };

/**
 * A schedule: send a message to an agent (or a template instance, or a workflow run's
 * inbox) on a cron expression or an interval.
 *
 * ```toml
 * [[schedules]]
 * id = "daily-report"
 * cron = "0 8 * * 1-5"          # or every = "15m" (ms, or s/m/h/d)
 * tz = "Europe/Berlin"          # cron only; default UTC
 * to = "reporter"
 * type = "task_delegate"        # default
 * payload = { input = "Write the daily report" }
 * catch_up = "skip"             # after an outage: "skip" missed ticks, or "run_once" for them
 * ```
 */
export interface ScheduleSpec {
  id: string;
  cron?: string;
  everyMs?: number;
  tz?: string;
  to: string;
  type: MessageType;
  payload: unknown;
  catchUp: "skip" | "run_once";
}

/**
 * Checks one schedule table (from `[[schedules]]` or `kova schedules add`).
 * @param key how the table is named in errors, e.g. `schedules[2]`
 * @throws ConfigError naming the key and the fix
 */
export function parseSchedule(raw: unknown, key: string): ScheduleSpec {
  const t: ConfigTable = tableAt(raw, key);
  rejectUnknown(t, ["id", "cron", "every", "tz", "to", "type", "payload", "catch_up"], `${key}.`);
  const id = stringValue(t.id, `${key}.id`);
  // Short enough that `sched-<id>-<tick>` is still one message id.
  if (!id || !isValidId(id) || id.length > 100) throw new ConfigError(`${key}.id`, "is required: 1-100 characters of [A-Za-z0-9_-]");
  const to = stringValue(t.to, `${key}.to`);
  if (!to || !isValidId(to)) throw new ConfigError(`${key}.to`, "is required: the agent id (or template instance id) the message goes to");
  const type = (stringValue(t.type, `${key}.type`) ?? "task_delegate") as MessageType;
  if (!isWellFormedType(type))
    throw new ConfigError(`${key}.type`, `${JSON.stringify(type)} is not a message type (task_delegate, or a namespaced type such as workflow.signal)`);
  if ((t.cron === undefined) === (t.every === undefined)) throw new ConfigError(key, 'give exactly one of cron = "…" or every = "…"');
  const spec: ScheduleSpec = { id, to, type, payload: t.payload ?? null, catchUp: "skip" };
  if (t.cron !== undefined) {
    spec.cron = stringValue(t.cron, `${key}.cron`)!;
    const tz = stringValue(t.tz, `${key}.tz`);
    if (tz !== undefined) {
      if (!isTimeZone(tz)) throw new ConfigError(`${key}.tz`, `${JSON.stringify(tz)} is not a time zone: use an IANA name such as "Europe/Berlin" or "UTC"`);
      spec.tz = tz;
    }
    try {
      CronExpressionParser.parse(spec.cron, { currentDate: Date.now(), ...(spec.tz ? { tz: spec.tz } : {}), strict: false });
    } catch (err) {
      throw new ConfigError(
        `${key}.cron`,
        `${JSON.stringify(spec.cron)} is not a cron expression: write minute hour day-of-month month day-of-week (optionally seconds first), e.g. "0 8 * * 1-5" (${(err as Error).message})`,
        { cause: err },
      );
    }
  } else {
    if (t.tz !== undefined) throw new ConfigError(`${key}.tz`, "applies to cron schedules only");
    spec.everyMs = durationMs(t.every, `${key}.every`);
    if (spec.everyMs < 100) throw new ConfigError(`${key}.every`, "must be at least 100 ms");
  }
  const catchUp = t.catch_up ?? "skip";
  if (catchUp !== "skip" && catchUp !== "run_once") throw new ConfigError(`${key}.catch_up`, `must be "skip" or "run_once", not ${JSON.stringify(catchUp)}`);
  spec.catchUp = catchUp;
  return spec;
}

/**
 * The first tick strictly after `after` (epoch ms). Interval schedules tick at
 * `anchor + k × every`, so every node computes the same ticks.
 */
export function nextTick(spec: ScheduleSpec, after: number, anchor: number): number {
  if (spec.everyMs !== undefined) {
    const k = Math.floor((after - anchor) / spec.everyMs) + 1;
    return anchor + Math.max(1, k) * spec.everyMs;
  }
  const it = CronExpressionParser.parse(spec.cron!, { currentDate: after, ...(spec.tz ? { tz: spec.tz } : {}) });
  return it.next().getTime();
}

/**
 * What a scheduler does at `now` for a schedule whose last handled tick is `last`.
 * `latest` is the newest tick due by now (undefined: nothing due); `fire` says whether to
 * send for it. A single due tick found within `graceMs` of its time is the current one and
 * fires. More than one due tick, or one found later than that, means the schedule was not
 * watched (every node was down): `skip` lets them all pass and waits for the next tick,
 * `run_once` sends one message for all of them. (An interval shorter than the check period
 * therefore cannot fire every tick; schedules are for seconds and up.)
 */
export function dueTick(
  spec: ScheduleSpec,
  last: number,
  anchor: number,
  now: number,
  graceMs: number,
): { latest: number; fire: boolean; missed: number } | undefined {
  const first = nextTick(spec, last, anchor);
  if (first > now) return undefined;
  let latest: number;
  let count: number;
  if (spec.everyMs !== undefined) {
    latest = anchor + Math.floor((now - anchor) / spec.everyMs) * spec.everyMs;
    count = Math.round((latest - first) / spec.everyMs) + 1;
  } else {
    // The newest tick at or before now, found backwards: stepping forward through a long
    // outage of a per-minute cron would block the event loop.
    latest = CronExpressionParser.parse(spec.cron!, { currentDate: now + 1, ...(spec.tz ? { tz: spec.tz } : {}) })
      .prev()
      .getTime();
    count = latest === first ? 1 : countTicks(spec, first, latest, anchor);
  }
  const current = count === 1 && now - latest <= graceMs;
  return { latest, fire: current || spec.catchUp === "run_once", missed: current ? 0 : count };
}

/** Ticks from `first` to `latest` inclusive, counted up to a cap (only logs use the number). */
function countTicks(spec: ScheduleSpec, first: number, latest: number, anchor: number, cap = 1000): number {
  let n = 1;
  for (let t = first; t < latest && n < cap; n++) t = nextTick(spec, t, anchor);
  return n;
}

function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat("en", { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}
