import { describe, expect, it } from "vitest";
import { readRun, startRun } from "../../src/cli/workflow-commands.js";
import { poll } from "../fixtures/poll.js";
import { WorkflowRig } from "../fixtures/workflow/rig.js";

// Needs the built test agents: npm run build
describe("workflow steps and their agents", () => {
  it("workflow - a step naming an agent nobody declared fails at once with UNKNOWN_AGENT, and its on_error applies (skip, retry, then abort)", async () => {
    await using rig = await WorkflowRig.start(1);
    const raw = {
      workflow: { id: "typo" },
      steps: [
        { id: "optional", agent: "writr", task: "x", on_error: { strategy: "skip" } },
        { id: "after", agent: "writer", task: "after the skip" },
        { id: "main", agent: "writr", task: "y", on_error: { strategy: "retry", attempts: 2, backoff: "50ms" } },
      ],
    };
    const started = Date.now();
    const { runId } = await startRun(rig.client, { raw, input: {} });
    const run = await rig.finished(runId, 10_000);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(run.status).toBe("failed");
    expect(run.error?.code).toBe("UNKNOWN_AGENT");
    expect(run.error?.message).toContain("no agent writr is declared");
    expect(Object.fromEntries(run.steps.map((s) => [s.key, `${s.status}/${s.attempts}`]))).toEqual({
      optional: "skipped/1",
      after: "completed/1",
      main: "failed/2",
    });
    expect(run.steps.find((s) => s.key === "optional")?.error?.code).toBe("UNKNOWN_AGENT");
    // nothing was left in the A2A stream for the unknown id
    const bus = rig.client.bus;
    const subject = bus.subjects.a2a("writr");
    const info = await bus.jsm.streams.info(bus.subjects.streams.a2a, { subjects_filter: subject });
    expect(info.state.subjects?.[subject] ?? 0).toBe(0);
  }, 30_000);

  it("workflow - cancel marks the steps still under way cancelled in the run's status", async () => {
    await using rig = await WorkflowRig.start(1);
    const raw = {
      workflow: { id: "long" },
      steps: [
        { id: "quick", agent: "writer", task: "quick" },
        {
          id: "all",
          type: "parallel",
          branches: [
            { id: "one", agent: "researcher", task: "[sleep-60000] one" },
            { id: "two", agent: "critic", task: "[sleep-60000] two" },
          ],
        },
      ],
    };
    const { runId } = await startRun(rig.client, { raw, input: {} });
    await poll(() => rig.runEvents(runId, "child_run_linked").length === 3, { timeoutMs: 15_000, what: "three child runs linked" });
    await rig.client.send(runId, "workflow.cancel", { reason: "no longer needed" });
    expect(await rig.ended(runId)).toBe("cancelled");
    const run = await poll(
      async () => {
        const r = await readRun(rig.client, runId);
        return r.status === "cancelled" ? r : undefined;
      },
      { timeoutMs: 10_000, retryErrors: true, what: "the cancel committed" },
    );
    expect(Object.fromEntries(run.steps.map((s) => [s.key, s.status]))).toEqual({ quick: "completed", all: "cancelled", one: "cancelled", two: "cancelled" });
    for (const s of run.steps.filter((s) => s.status === "cancelled")) expect(s.durationMs).toBeGreaterThanOrEqual(0);
  }, 30_000);
});
