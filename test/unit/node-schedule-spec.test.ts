import { describe, expect, it } from "vitest";
import { dueTick, durationMs, nextTick, parseSchedule, scheduledRunId, scheduleTarget } from "../../src/node/schedules/spec.js";
import { configError } from "../fixtures/config-error.js";
import { join } from "node:path";

const at = (iso: string) => Date.parse(iso);
const WORKFLOW_FIXTURES = join(import.meta.dirname, "../fixtures/workflow");

describe("schedules: specs and ticks", () => {
  it("schedules - parse cron and interval schedules; mistakes name the key", () => {
    const cron = parseSchedule({ id: "daily", cron: "0 8 * * 1-5", tz: "Europe/Berlin", to: "reporter", payload: { input: "go" } }, "schedules[0]");
    expect(cron).toMatchObject({ id: "daily", cron: "0 8 * * 1-5", tz: "Europe/Berlin", to: "reporter", type: "task_delegate", catchUp: "skip" });
    expect(parseSchedule({ id: "tick", every: "15m", to: "a", catch_up: "run_once" }, "s").everyMs).toBe(900_000);
    expect(durationMs(2500, "k")).toBe(2500);
    expect(configError(() => parseSchedule({ id: "x", to: "a" }, "schedules[1]")).message).toContain("exactly one of cron");
    const badCron = configError(() => parseSchedule({ id: "x", cron: "61 * * * *", to: "a" }, "schedules[1]")).message;
    expect(badCron).toContain('schedules[1].cron: "61 * * * *" is not a cron expression: write minute hour');
    expect(badCron).not.toContain("tz");
    expect(configError(() => parseSchedule({ id: "x", cron: "* * * * *", tz: "Mars/Olympus", to: "a" }, "schedules[1]")).message).toBe(
      'schedules[1].tz: "Mars/Olympus" is not a time zone: use an IANA name such as "Europe/Berlin" or "UTC"',
    );
    expect(configError(() => parseSchedule({ id: "x", every: "soon", to: "a" }, "schedules[2]")).message).toContain("schedules[2].every");
    expect(configError(() => parseSchedule({ id: "x", every: "1s", to: "a", catch_up: "all" }, "s")).message).toContain("s.catch_up");
    expect(configError(() => parseSchedule({ id: "x", every: "1s", to: "bad id" }, "s")).message).toContain("s.to");
  });

  it("schedules - a workflow schedule reads its file (relative to kova.toml) and checks the workflow and input at once; its runs are sched-<id>-<tick>", () => {
    const spec = parseSchedule({ id: "nightly", every: "1h", workflow: "scheduled.toml", input: { topic: "nats" } }, "schedules[0]", WORKFLOW_FIXTURES);
    expect(spec).toMatchObject({ id: "nightly", everyMs: 3_600_000, workflow: { id: "digest", input: { topic: "nats" } }, catchUp: "skip" });
    expect(spec.to).toBeUndefined();
    expect((spec.workflow!.definition as { workflow: { id: string } }).workflow.id).toBe("digest");
    // The definition itself, as `kova schedules add --workflow` sends it; the same spec.
    expect(parseSchedule({ id: "nightly", every: "1h", workflow: spec.workflow!.definition, input: { topic: "nats" } }, "schedule")).toEqual(spec);
    expect(scheduledRunId("nightly", 1_700_000_000_000)).toBe("sched-nightly-1700000000000");
    expect(scheduleTarget(spec)).toBe("workflow:digest");
    const err = (raw: Record<string, unknown>, baseDir?: string) => configError(() => parseSchedule({ id: "w", every: "1h", ...raw }, "schedules[3]", baseDir));
    expect(err({ workflow: "scheduled.toml" }, WORKFLOW_FIXTURES).key).toBe("schedules[3].input");
    expect(err({ workflow: "scheduled.toml", input: { topic: 3 } }, WORKFLOW_FIXTURES).message).toContain("topic");
    expect(err({ workflow: "missing.toml" }, WORKFLOW_FIXTURES).message).toMatch(
      /schedules\[3\]\.workflow: cannot read the workflow file .*missing\.toml \(ENOENT\)/,
    );
    expect(err({ workflow: { workflow: { id: "x" } } }).key).toBe("schedules[3].workflow");
    expect(err({ workflow: "scheduled.toml" }).message).toContain("kova schedules add --workflow <file> reads the file");
    expect(err({ workflow: "scheduled.toml", to: "a" }, WORKFLOW_FIXTURES).key).toBe("schedules[3].to");
    expect(err({ to: "a", input: { topic: "x" } }).key).toBe("schedules[3].input");
    expect(err({ id: "x".repeat(77), workflow: "scheduled.toml", input: { topic: "x" } }, WORKFLOW_FIXTURES).message).toContain("at most 76 characters");
    expect(err({}).message).toContain('or workflow = "<file>"');
  });

  it("schedules - cron ticks honour the time zone; interval ticks are anchored so every node computes the same", () => {
    const berlin = parseSchedule({ id: "d", cron: "0 8 * * *", tz: "Europe/Berlin", to: "a" }, "s");
    // 08:00 in Berlin on 30 Nov (UTC+1) is 07:00 UTC.
    expect(new Date(nextTick(berlin, at("2026-11-30T06:00:00Z"), 0)).toISOString()).toBe("2026-11-30T07:00:00.000Z");
    const every = parseSchedule({ id: "e", every: "10s", to: "a" }, "s");
    const anchor = at("2026-11-30T00:00:03Z");
    expect(nextTick(every, anchor, anchor)).toBe(anchor + 10_000);
    expect(nextTick(every, anchor + 25_000, anchor)).toBe(anchor + 30_000);
  });

  it("schedules - a current tick fires; after an outage skip lets missed ticks pass and run_once fires one for them", () => {
    const anchor = at("2026-11-30T00:00:00Z");
    const skip = parseSchedule({ id: "s", every: "1m", to: "a" }, "s");
    const once = parseSchedule({ id: "o", every: "1m", to: "a", catch_up: "run_once" }, "s");
    // A scheduler watching since before the anchor.
    const watching = anchor - 1_000;
    // Nothing due yet.
    expect(dueTick(skip, anchor, anchor, anchor + 59_000, 5_000, watching)).toBeUndefined();
    // The 1-minute tick, found 2 s late: current, fires.
    expect(dueTick(skip, anchor, anchor, anchor + 62_000, 5_000, watching)).toEqual({ tick: anchor + 60_000, fire: true, missed: 0 });
    // Found 61 s late: missed (the scheduler was stalled past the grace). The newer tick,
    // 1 s old, is current and is judged on its own after it.
    expect(dueTick(skip, anchor, anchor, anchor + 121_000, 5_000, watching)).toEqual({ tick: anchor + 60_000, fire: false, missed: 1 });
    expect(dueTick(once, anchor, anchor, anchor + 121_000, 5_000, watching)).toEqual({ tick: anchor + 60_000, fire: true, missed: 1 });
    expect(dueTick(skip, anchor + 60_000, anchor, anchor + 121_000, 5_000, watching)).toEqual({ tick: anchor + 120_000, fire: true, missed: 0 });
    // Every node was down for an hour and 30 s (this scheduler just started): ticks 1..60
    // are due, all missed.
    const later = anchor + 60 * 60_000 + 30_000;
    expect(dueTick(skip, anchor, anchor, later, 5_000, later - 100)).toEqual({ tick: anchor + 60 * 60_000, fire: false, missed: 60 });
    expect(dueTick(once, anchor, anchor, later, 5_000, later - 100)).toEqual({ tick: anchor + 60 * 60_000, fire: true, missed: 60 });
    // A per-minute cron over a three-day outage: the newest tick is found without stepping
    // through all 4,320 (the count behind the log line stops at 1,000).
    const cron = parseSchedule({ id: "c", cron: "* * * * *", to: "a" }, "s");
    const threeDays = anchor + 3 * 86_400_000 + 1_000;
    expect(dueTick(cron, anchor, anchor, threeDays, 5_000, threeDays)).toEqual({ tick: anchor + 3 * 86_400_000, fire: false, missed: 1000 });
    expect(dueTick(cron, anchor, anchor, anchor + 60_500, 5_000, watching)).toEqual({ tick: anchor + 60_000, fire: true, missed: 0 });
    // A tick on the cutoff itself is not missed: a scheduler that started exactly then watched it.
    expect(dueTick(cron, anchor, anchor, anchor + 60_500, 5_000, anchor + 60_000)).toEqual({ tick: anchor + 60_000, fire: true, missed: 0 });
  });

  it("schedules - a late pass fires every tick within the grace on its own; a tick from before the scheduler started is missed", () => {
    const anchor = at("2026-11-30T00:00:00Z");
    const every2s = parseSchedule({ id: "t", every: 2_000, to: "a" }, "s");
    const once2s = parseSchedule({ id: "t", every: 2_000, to: "a", catch_up: "run_once" }, "s");
    // A pass stalled for 4.1 s by load: three ticks due, all within the 5 s grace. Each
    // fires, oldest first; none is judged missed (the failure this guards against).
    const now = anchor + 6_100;
    let last = anchor;
    const fired: number[] = [];
    for (let d = dueTick(every2s, last, anchor, now, 5_000, anchor); d; d = dueTick(every2s, last, anchor, now, 5_000, anchor)) {
      expect(d).toEqual({ tick: last + 2_000, fire: true, missed: 0 });
      fired.push((last = d.tick));
    }
    expect(fired).toEqual([anchor + 2_000, anchor + 4_000, anchor + 6_000]);
    // The same ticks seen by a scheduler that started at anchor + 5 s (it restarted while
    // others may have run): the two before its start wait while a running node could still
    // send them; once the oldest is past the grace, both are judged missed, and the third,
    // due after the start, is current.
    expect(dueTick(every2s, anchor, anchor, now, 5_000, anchor + 5_000)).toBeUndefined();
    const later = anchor + 7_100;
    expect(dueTick(every2s, anchor, anchor, later, 5_000, anchor + 5_000)).toEqual({ tick: anchor + 4_000, fire: false, missed: 2 });
    expect(dueTick(once2s, anchor, anchor, later, 5_000, anchor + 5_000)).toEqual({ tick: anchor + 4_000, fire: true, missed: 2 });
    expect(dueTick(every2s, anchor + 4_000, anchor, later, 5_000, anchor + 5_000)).toEqual({ tick: anchor + 6_000, fire: true, missed: 0 });
  });
});
