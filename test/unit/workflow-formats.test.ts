import { describe, expect, it } from "vitest";
import { readRunState, RUN_STATE_VERSION, RunEngine, runSummary } from "../../src/workflow/index.js";
import { SUBJECT_WAIT_FORMAT, SUBJECT_WAIT_VERSION } from "../../src/workflow/subject-waits.js";
import { TIMER_FORMAT, TIMER_VERSION } from "../../src/workflow/timers.js";
import { expectRefused, goldenJson, withVersion } from "../fixtures/formats.js";

// What the stores write today is the -tagged file's shape; values written before versioning have no `v`.
describe("workflow formats (golden files)", () => {
  it("formats - a version 1 timer loads, as written today (v: 1) and before versioning (no v)", () => {
    expect(TIMER_VERSION).toBe(1);
    for (const name of ["timer-v1.json", "timer-v1-tagged.json"]) {
      expect(TIMER_FORMAT.decode("run-7.retry-research-2", goldenJson("workflow", name)), name).toEqual({
        runId: "run-7",
        timerId: "retry-research-2",
        due: 1764450030000,
      });
    }
  });

  it("formats - a version 1 subject wait loads, as written today (v: 1) and before versioning (no v)", () => {
    expect(SUBJECT_WAIT_VERSION).toBe(1);
    for (const name of ["wait-v1.json", "wait-v1-tagged.json"]) {
      expect(SUBJECT_WAIT_FORMAT.decode("3e1f.run-7.approval", goldenJson("workflow", name)), name).toEqual({
        runId: "run-7",
        waitId: "approval",
        subject: "orders.approved",
        stream: "KOVA_DEFAULT_WAITS",
        startSeq: 17,
      });
    }
  });

  it("formats - a version 1 run state (a run's checkpoint state, mid-run) still loads, and the run goes on from it to its end", () => {
    expect(RUN_STATE_VERSION).toBe(1);
    const state = readRunState("wf-0123456789abcdef0123", goldenJson("workflow", "run-state-v1.json"));
    expect(runSummary(state)).toMatchObject({ status: "running", workflowId: "report" });
    // The second step's agent answers: the run completes with its output.
    const e = new RunEngine(state, 1764450009000);
    const payload = {
      output: "Report: tides",
      status: "completed",
      runId: "wf-0123456789abcdef0123-t1r",
      sessionId: "s-7",
      usage: { inputTokens: 5, outputTokens: 7 },
    };
    expect(e.result("wf-0123456789abcdef0123-t1", payload, undefined)).toBe(true);
    e.advance();
    expect(state).toMatchObject({ status: "completed", output: "Report: tides", usage: { inputTokens: 415, outputTokens: 227 } });
    // Its end is announced by the next turn, its retire timer's.
    const [retireId] = Object.entries(state.timers).find(([, t]) => t.kind === "retire")!;
    const next = new RunEngine(state, 1764450009001);
    expect(next.fired(retireId)).toBe(true);
    expect(next.effects.map((x) => (x.kind === "event" ? x.type : x.kind))).toEqual(["run_completed", "run_stream_end", "retire"]);
  });

  it("formats - a timer, wait or run state of an unknown version is refused naming it and the versions this build reads", () => {
    expectRefused(
      () => TIMER_FORMAT.decode("run-7.retry-research-2", withVersion("workflow", "timer-v1-tagged.json", 2)),
      "workflow timer run-7.retry-research-2",
      [1],
    );
    expectRefused(
      () => SUBJECT_WAIT_FORMAT.decode("3e1f.run-7.approval", withVersion("workflow", "wait-v1-tagged.json", 2)),
      "workflow wait 3e1f.run-7.approval",
      [1],
    );
    // A run's state: read by the CLI (kova workflow status, ls) and by every turn of the run.
    const newer = withVersion("workflow", "run-state-v1.json", 2);
    expectRefused(() => readRunState("wf-0123456789abcdef0123", newer), "state of workflow run wf-0123456789abcdef0123", [1]);
    expectRefused(() => new RunEngine(newer as never, 0), "state of workflow run wf-0123456789abcdef0123", [1]);
    expectRefused(() => runSummary(newer as never), "state of workflow run wf-0123456789abcdef0123", [1]);
  });
});
