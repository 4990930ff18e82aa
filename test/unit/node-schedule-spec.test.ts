import { describe, expect, it } from "vitest";
import { dueTick, durationMs, nextTick, parseSchedule } from "../../src/node/schedule-spec.js";
import { configError } from "../fixtures/config-error.js";

const at = (iso: string) => Date.parse(iso);

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
    // Nothing due yet.
    expect(dueTick(skip, anchor, anchor, anchor + 59_000, 5_000)).toBeUndefined();
    // The 1-minute tick, found 2 s late: current, fires.
    expect(dueTick(skip, anchor, anchor, anchor + 62_000, 5_000)).toEqual({ latest: anchor + 60_000, fire: true, missed: 0 });
    // Two ticks due, the newest just now: one was missed, so this is an outage, not a tick.
    expect(dueTick(skip, anchor, anchor, anchor + 121_000, 5_000)).toEqual({ latest: anchor + 120_000, fire: false, missed: 2 });
    expect(dueTick(once, anchor, anchor, anchor + 121_000, 5_000)).toEqual({ latest: anchor + 120_000, fire: true, missed: 2 });
    // Every node was down for an hour and 30 s: ticks 1..60 are due, the newest 30 s old.
    const later = anchor + 60 * 60_000 + 30_000;
    expect(dueTick(skip, anchor, anchor, later, 5_000)).toEqual({ latest: anchor + 60 * 60_000, fire: false, missed: 60 });
    expect(dueTick(once, anchor, anchor, later, 5_000)).toEqual({ latest: anchor + 60 * 60_000, fire: true, missed: 60 });
    // A per-minute cron over a three-day outage: the newest tick is found without stepping
    // through all 4,320 (the count behind the log line stops at 1,000).
    const cron = parseSchedule({ id: "c", cron: "* * * * *", to: "a" }, "s");
    expect(dueTick(cron, anchor, anchor, anchor + 3 * 86_400_000 + 1_000, 5_000)).toEqual({ latest: anchor + 3 * 86_400_000, fire: false, missed: 1000 });
    expect(dueTick(cron, anchor, anchor, anchor + 60_500, 5_000)).toEqual({ latest: anchor + 60_000, fire: true, missed: 0 });
  });
});
