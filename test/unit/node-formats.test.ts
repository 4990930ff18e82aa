import { describe, expect, it } from "vitest";
import { nextTick, scheduleTarget } from "../../src/node/schedules/spec.js";
import { SCHEDULE_RECORD_FORMAT, SCHEDULE_RECORD_VERSION } from "../../src/node/schedules/service.js";
import { parseWorkflow } from "../../src/workflow/index.js";
import { expectRefused, goldenJson, withVersion } from "../fixtures/formats.js";

// Registry, lease and heartbeat values: test/unit/actors-formats.test.ts; a running node beside newer entries: test/integration/node-formats.test.ts.
describe("node formats (golden files)", () => {
  it("formats - a version 1 schedule (a message on an interval, with a pending claim) still loads and ticks", () => {
    const r = SCHEDULE_RECORD_FORMAT.decode("hourly-digest", goldenJson("node", "schedule-v1.json"));
    expect(r).toMatchObject({ v: 1, source: "config", pending: { tick: 1764457200000, node: "kova-2", missed: 0 } });
    expect(scheduleTarget(r.spec)).toBe("reporter");
    expect(r.spec).toMatchObject({ type: "task_delegate", payload: { input: "Summarise the last hour" }, catchUp: "run_once" });
    expect(nextTick(r.spec, r.lastTick, r.anchor)).toBe(1764457200000);
  });

  it("formats - a version 2 schedule (a workflow run per cron tick) still loads, its stored workflow still parses", () => {
    expect(SCHEDULE_RECORD_VERSION).toBe(2);
    const r = SCHEDULE_RECORD_FORMAT.decode("nightly", goldenJson("node", "schedule-v2.json"));
    expect(r).toMatchObject({ v: 2, source: "api", spec: { cron: "0 2 * * *", tz: "Europe/Berlin", catchUp: "skip" } });
    expect(scheduleTarget(r.spec)).toBe("workflow:digest");
    expect(parseWorkflow(r.spec.workflow!.definition).id).toBe("digest");
    expect(r.spec.workflow!.input).toEqual({ topic: "yesterday" });
    // 02:00 in Berlin (UTC+1 in December) is 01:00 UTC.
    expect(new Date(nextTick(r.spec, Date.UTC(2025, 11, 1, 12), r.anchor)).toISOString()).toBe("2025-12-02T01:00:00.000Z");
  });

  it("formats - a schedule of an unknown version is refused naming it and the versions this build reads", () => {
    expectRefused(() => SCHEDULE_RECORD_FORMAT.decode("nightly", withVersion("node", "schedule-v2.json", 3)), "schedule nightly", [1, 2]);
  });
});
