import { describe, expect, it } from "vitest";
import {
  ATTEMPT_RECORD_VERSION,
  EXPERIMENT_SPEC_VERSION,
  EXPERIMENT_STATE_VERSION,
  ExperimentEngine,
  PLAIN_STATE_VERSION,
  readAttemptRecord,
  readExperimentState,
  readStatusRecord,
  readStoredSpec,
  STATUS_RECORD_VERSION,
} from "../../src/eval/index.js";
import { expectRefused, goldenJson, withVersion } from "../fixtures/formats.js";

const ID = "golden-0a1b2c3d";

describe("eval formats (golden files)", () => {
  it("formats - a version 1 stored spec (head and task chunk) loads and matches its digest; a changed one is refused", () => {
    expect(EXPERIMENT_SPEC_VERSION).toBe(1);
    const { spec, digest } = readStoredSpec(ID, goldenJson("eval", "spec-head-v1.json"), [goldenJson("eval", "spec-tasks-v1.json")]);
    expect(spec).toMatchObject({ name: "golden", concurrency: 2, timeoutMs: 60_000, tasks: [{ id: "t0" }, { id: "t1" }, { id: "t2" }] });
    expect(digest).toBe((goldenJson("eval", "spec-head-v1.json") as { digest: string }).digest);
    const edited = { ...(goldenJson("eval", "spec-tasks-v1.json") as object), tasks: [{ id: "t0", input: "q0", expected: "1" }] };
    expect(() => readStoredSpec(ID, goldenJson("eval", "spec-head-v1.json"), [edited])).toThrow(/does not match its digest/);
    expect(() => readStoredSpec(ID, goldenJson("eval", "spec-head-v1.json"), [undefined])).toThrow(/task chunk 0 of 1 is missing/);
  });

  it("formats - a version 1 attempt record and status record load", () => {
    expect(ATTEMPT_RECORD_VERSION).toBe(1);
    expect(STATUS_RECORD_VERSION).toBe(1);
    expect(readAttemptRecord(`${ID}.attempt.a.t0.0.1`, goldenJson("eval", "attempt-record-v1.json"))).toMatchObject({
      status: "completed",
      valid: true,
      score: 1,
      runId: `${ID}-c0-a1`,
    });
    expect(readStatusRecord(ID, goldenJson("eval", "status-record-v1.json"))).toMatchObject({ status: "running", agents: ["helper"] });
  });

  it("formats - a version 1 experiment state (mid-run, two cells in flight) loads, and the experiment goes on from it to its end", () => {
    expect(PLAIN_STATE_VERSION).toBe(1);
    const state = readExperimentState(`eval--${ID}`, goldenJson("eval", "experiment-state-v1.json"));
    const { spec } = readStoredSpec(ID, goldenJson("eval", "spec-head-v1.json"), [goldenJson("eval", "spec-tasks-v1.json")]);
    for (const [cell, output] of [
      [1, "2"],
      [2, "5"],
    ] as const) {
      const e = new ExperimentEngine(state, spec, 1764450002000 + cell);
      expect(e.result(`${ID}-c${cell}-a1`, { payload: { status: "completed", output, usage: { inputTokens: 1, outputTokens: 1 } } })).toBe(true);
      e.advance();
    }
    expect(state).toMatchObject({ status: "completed", done: 3, cellStatus: "ddd" });
  });

  it("formats - a version 2 experiment state (with the effects its last turn left to land) loads, its outbox as written", () => {
    expect(EXPERIMENT_STATE_VERSION).toBe(2);
    const state = readExperimentState(`eval--${ID}`, goldenJson("eval", "experiment-state-v2.json"));
    expect(state.outbox?.of).toBe("reply-of-c0");
    expect(state.outbox?.effects.map((e) => e.kind)).toEqual(["record", "event", "send"]);
    expect(state.outbox?.effects[0]).toMatchObject({ kind: "record", record: { cell: 0, status: "completed", runId: `${ID}-c0-a1` } });
    expect(state).toMatchObject({ status: "running", done: 1, cellStatus: "drr" });
  });

  it("formats - a spec, record or state of an unknown version is refused naming it and the versions this build reads", () => {
    expectRefused(() => readStoredSpec(ID, withVersion("eval", "spec-head-v1.json", 2), []), `experiment spec ${ID}`, [1]);
    expectRefused(() => readAttemptRecord("k", withVersion("eval", "attempt-record-v1.json", 2)), "attempt record k", [1]);
    expectRefused(() => readStatusRecord(ID, withVersion("eval", "status-record-v1.json", 2)), `experiment status ${ID}`, [1]);
    expectRefused(() => readExperimentState(`eval--${ID}`, withVersion("eval", "experiment-state-v2.json", 3)), `experiment state of eval--${ID}`, [1, 2]);
  });
});
