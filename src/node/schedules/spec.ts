import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { CronExpressionParser } from "cron-parser";
import { ConfigError, KovaError, rejectUnknown, stringValue, tableAt, type ConfigTable, isValidId, durationMs } from "../../core/index.js";
import { isWellFormedType, type MessageType } from "../../bus/index.js";
import { checkInput, MAX_RUN_ID, parseWorkflow, parseWorkflowText } from "../../workflow/index.js";

export { durationMs };

/**
 * A schedule: send a message to an agent (or a template instance, or a workflow run's
 * inbox), or start a run of a workflow, on a cron expression or an interval.
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
 *
 * [[schedules]]
 * id = "nightly"
 * cron = "0 2 * * *"
 * workflow = "workflows/report.toml"   # instead of to/type/payload: one run per tick
 * input = { topic = "yesterday" }
 * ```
 */
export interface ScheduleSpec {
  id: string;
  cron?: string;
  everyMs?: number;
  tz?: string;
  /** A message schedule's target; a workflow schedule has none (see `workflow`). */
  to?: string;
  type?: MessageType;
  payload?: unknown;
  /** A workflow schedule: each tick starts one run, `sched-<id>-<tick>` (scheduledRunId). */
  workflow?: ScheduleWorkflow;
  catchUp: "skip" | "run_once";
}

/** What a workflow schedule starts: the workflow as written in its file, and the run's input. */
export interface ScheduleWorkflow {
  id: string;
  definition: unknown;
  input: Record<string, unknown>;
}

/** The prefix and the tick's 13 digits around a schedule id in a run id must fit MAX_RUN_ID. */
const WORKFLOW_SCHEDULE_ID_MAX = MAX_RUN_ID - "sched-".length - "-".length - 13;

/**
 * The run a workflow schedule starts for a tick. Derived, so that a tick sent again (its
 * claimer died before clearing the claim) declares the same run and sends the same
 * `workflow.start`, which the run ignores once started: one run per tick.
 */
export function scheduledRunId(scheduleId: string, tick: number): string {
  return `sched-${scheduleId}-${tick}`;
}

/** Where a schedule sends, for listings and events: the agent, or `workflow:<id>`. */
export function scheduleTarget(spec: ScheduleSpec): string {
  return spec.workflow ? `workflow:${spec.workflow.id}` : (spec.to ?? "");
}

/**
 * Checks one schedule table (from `[[schedules]]` or `kova schedules add`).
 * @param key how the table is named in errors, e.g. `schedules[2]`
 * @param baseDir where a `workflow` given as a file path is read from (kova.toml's
 *   directory); without it, `workflow` must be the definition itself (the CLI reads the file)
 * @throws ConfigError naming the key and the fix
 */
export function parseSchedule(raw: unknown, key: string, baseDir?: string): ScheduleSpec {
  const t: ConfigTable = tableAt(raw, key);
  rejectUnknown(t, ["id", "cron", "every", "tz", "to", "type", "payload", "catch_up", "workflow", "input"], `${key}.`);
  const id = stringValue(t.id, `${key}.id`);
  // Short enough that `sched-<id>-<tick>` is still one message id.
  if (!id || !isValidId(id) || id.length > 100) throw new ConfigError(`${key}.id`, "is required: 1-100 characters of [A-Za-z0-9_-]");
  const spec: ScheduleSpec = t.workflow !== undefined ? { id, workflow: scheduleWorkflow(t, key, id, baseDir), catchUp: "skip" } : messageSpec(t, key, id);
  if ((t.cron === undefined) === (t.every === undefined)) throw new ConfigError(key, 'give exactly one of cron = "…" or every = "…"');
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

/** A message schedule's target (the key order is what stored records compare by: keep it). */
function messageSpec(t: ConfigTable, key: string, id: string): ScheduleSpec {
  if (t.input !== undefined) throw new ConfigError(`${key}.input`, "is a workflow schedule's input: a message schedule's payload goes in payload = { … }");
  const to = stringValue(t.to, `${key}.to`);
  if (!to || !isValidId(to))
    throw new ConfigError(`${key}.to`, 'is required: the agent id (or template instance id) the message goes to, or workflow = "<file>" to start a workflow');
  const type = (stringValue(t.type, `${key}.type`) ?? "task_delegate") as MessageType;
  if (!isWellFormedType(type))
    throw new ConfigError(`${key}.type`, `${JSON.stringify(type)} is not a message type (task_delegate, or a namespaced type such as workflow.signal)`);
  return { id, to, type, payload: t.payload ?? null, catchUp: "skip" };
}

/**
 * A workflow schedule's workflow and input, both checked now, so that a schedule that
 * could only start failing runs is refused when it is added, not at its first tick.
 */
function scheduleWorkflow(t: ConfigTable, key: string, id: string, baseDir: string | undefined): ScheduleWorkflow {
  for (const k of ["to", "type", "payload"]) {
    if (t[k] !== undefined)
      throw new ConfigError(`${key}.${k}`, "is for a message schedule: a workflow schedule starts a run of its workflow with input = { … }");
  }
  if (id.length > WORKFLOW_SCHEDULE_ID_MAX) {
    throw new ConfigError(`${key}.id`, `a workflow schedule's id has at most ${WORKFLOW_SCHEDULE_ID_MAX} characters (its runs are sched-<id>-<tick>)`);
  }
  const fieldKey = `${key}.workflow`;
  let definition: unknown = t.workflow;
  if (typeof definition === "string") {
    if (baseDir === undefined) throw new ConfigError(fieldKey, "must be the workflow's definition here (kova schedules add --workflow <file> reads the file)");
    definition = readWorkflowFile(definition, baseDir, fieldKey);
  }
  if (typeof definition !== "object" || definition === null || Array.isArray(definition)) {
    throw new ConfigError(fieldKey, 'must name a workflow file (workflow = "workflows/report.toml") or be its definition');
  }
  const checked = asConfigError(fieldKey, () => parseWorkflow(definition, fieldKey));
  const input = asConfigError(`${key}.input`, () => checkInput(checked, t.input ?? {}));
  return { id: checked.id, definition, input };
}

function readWorkflowFile(path: string, baseDir: string, key: string): unknown {
  const full = isAbsolute(path) ? path : resolve(baseDir, path);
  let text: string;
  try {
    text = readFileSync(full, "utf8");
  } catch (err) {
    throw new ConfigError(key, `cannot read the workflow file ${full} (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { cause: err });
  }
  return asConfigError(key, () => parseWorkflowText(text, full).raw);
}

/** A workflow's own errors (they name the field inside the workflow) as the schedule's key. */
function asConfigError<T>(key: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof KovaError && !(err instanceof ConfigError)) throw new ConfigError(key, err.message, { cause: err });
    throw err;
  }
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
 * What a scheduler does at `now` for a schedule whose last handled tick is `last`
 * (undefined: nothing is due). The oldest due tick is *current* when it fell due while this
 * scheduler was watching (`watchedSince`, when it started) and is at most `graceMs` old: it
 * fires on its own, however many ticks a slow pass let pile up behind it (each is judged
 * on its own, in order). A tick found later than the grace was *missed* (every node was
 * down, or this one was stalled past the grace), and so was every tick after it that fell
 * due before this scheduler started: they are judged at once, and `skip` lets them pass
 * while `run_once` sends one message (`tick`, the newest) for them all. A tick that fell due
 * just before this scheduler started, within the grace, waits: a node that was running
 * then may still send it; if none does, it is judged missed once past the grace.
 */
export function dueTick(
  spec: ScheduleSpec,
  last: number,
  anchor: number,
  now: number,
  graceMs: number,
  watchedSince: number,
): { tick: number; fire: boolean; missed: number } | undefined {
  const first = nextTick(spec, last, anchor);
  if (first > now) return undefined;
  if (now - first <= graceMs) {
    if (first >= watchedSince) return { tick: first, fire: true, missed: 0 };
    // Due just before this scheduler started: a node that was watching then may still send
    // it (this one restarted while others ran). Past the grace it is judged missed.
    return undefined;
  }
  // Ticks before `cutoff` are missed; the newest of them closes the judged stretch.
  const cutoff = Math.min(now + 1, Math.max(watchedSince, now - graceMs));
  let newest: number;
  let count: number;
  if (spec.everyMs !== undefined) {
    newest = anchor + (Math.ceil((cutoff - anchor) / spec.everyMs) - 1) * spec.everyMs;
    count = Math.round((newest - first) / spec.everyMs) + 1;
  } else {
    // Found backwards: stepping forward through a long outage of a per-minute cron would
    // block the event loop.
    newest = CronExpressionParser.parse(spec.cron!, { currentDate: cutoff, ...(spec.tz ? { tz: spec.tz } : {}) })
      .prev()
      .getTime();
    count = newest === first ? 1 : countTicks(spec, first, newest, anchor);
  }
  return { tick: newest, fire: spec.catchUp === "run_once", missed: count };
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
