import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadWorkflowFile } from "../../src/workflow/index.js";
import { WorkflowErrorCode } from "../../src/workflow/errors.js";
import { readRun, startRun } from "../../src/cli/workflow-commands.js";
import { RunTree } from "../../src/cli/run-tree.js";
import { isStreamNotFound, subjectsFor } from "../../src/bus/index.js";
import { poll } from "../fixtures/poll.js";
import { WORKFLOW_FIXTURES, WorkflowRig } from "../fixtures/workflow/rig.js";

// Needs the built test agents: npm run build
describe("workflow runs on real nodes", () => {
  describe("every step type and error strategy on two nodes", () => {
    let rig: WorkflowRig;
    let runId: string;
    let run: Awaited<ReturnType<WorkflowRig["finished"]>>;
    beforeAll(async () => {
      rig = await WorkflowRig.start(2);
      const { raw } = await loadWorkflowFile(join(WORKFLOW_FIXTURES, "every-step.toml"));
      ({ runId } = await startRun(rig.client, { raw, input: { topic: "nats" } }));
      // Sent before the run reaches its wait: the run keeps it until then.
      await poll(() => rig.runEvents(runId, "run_started").length > 0, { timeoutMs: 10_000, what: "the run to start" });
      await rig.client.send(runId, "workflow.signal", { event: "go", data: { ok: true } });
      run = await rig.finished(runId);
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("workflow - retries, skip, fallback, parallel, loop, timer and event waits each end as written and the run completes with their output", () => {
      expect(run.status).toBe("completed");
      expect(run.output).toBe("writer(final writer(draft 1 of nats) / fact_checker(check writer))");
      expect(Object.fromEntries(run.steps.map((s) => [s.key, `${s.status}/${s.attempts}`]))).toMatchObject({
        flaky: "completed/3",
        optional: "skipped/1",
        primary: "completed/1",
        both: "completed/1",
        "draft@0": "completed/1",
        "draft@1": "completed/1",
        drafts: "completed/1",
        pause: "completed/1",
        go: "completed/1",
        finish: "completed/1",
      });
    });

    it("workflow - each task_delegate is handled once: a retry is a new message, with the backoff delays of its strategy", async () => {
      expect((await rig.counts("researcher")).inputs).toEqual(["[fail-2] dig nats", "[fail-2] dig nats", "[fail-2] dig nats"]);
      expect((await rig.counts("critic")).calls).toBe(3);
      expect((await rig.counts("writer")).inputs).toEqual([
        "backup for researcher(dig nats)",
        "draft 0 of nats",
        "draft 1 of nats",
        "final writer(draft 1 of nats) / fact_checker(check writer)",
      ]);
      expect((await rig.counts("fact_checker")).calls).toBe(1);
      expect(rig.runEvents(runId, "step_retry").map((e) => (e.data as { delayMs: number }).delayMs)).toEqual([50, 100]);
    });

    it("workflow - one run tree: every agent run is a child of the workflow run, linked by child_run_linked", async () => {
      const linked = rig.runEvents(runId, "child_run_linked").map((e) => (e.data as { childRunId: string }).childRunId);
      expect(linked).toHaveLength(11);
      for (const child of linked) {
        const started = await poll(() => rig.events.find((e) => e.runId === child && e.type === "run_started"), {
          timeoutMs: 5000,
          what: `run_started of ${child}`,
        });
        expect(started).toMatchObject({ parentRunId: runId, sessionId: runId });
      }
      const tree = new RunTree();
      for (const e of rig.events.filter((e) => e.sessionId === runId)) tree.apply(e);
      const lines = tree.render();
      expect(lines[0]).toMatch(new RegExp(`^workflow:every-step  ${runId}  completed`));
      expect(lines.filter((l) => /^[├└]─ /.test(l))).toHaveLength(11);
      expect(lines.join("\n")).toContain("└─ finish.then → writer");
    });

    it("workflow - a finished run is retired from placement; its state stays readable", async () => {
      await poll(() => rig.nodes.every((n) => !n.agents().some((a) => a.id === runId)), { timeoutMs: 10_000, what: "the run's actor to be retired" });
      expect((await readRun(rig.client, runId)).status).toBe("completed");
    });
  });

  it("workflow - a fallback step stands in for a failed one; an explicit abort ends the run there, no later step is sent", async () => {
    await using rig = await WorkflowRig.start(1);
    const raw = {
      workflow: { id: "abort" },
      steps: [
        {
          id: "primary",
          agent: "critic",
          task: "[fail] primary",
          on_error: {
            strategy: "fallback",
            step: {
              id: "rescue",
              type: "parallel",
              branches: [
                { agent: "writer", task: "rescue after {{steps.primary.error.code}}" },
                { agent: "fact_checker", task: "check" },
              ],
            },
          },
        },
        { id: "gate", agent: "researcher", task: "[fail] gate for {{steps.primary.output.0}}", on_error: { strategy: "abort" } },
        { id: "never", agent: "writer", task: "never" },
      ],
    };
    const { runId } = await startRun(rig.client, { raw, input: {} });
    const run = await rig.finished(runId);
    expect(run.status).toBe("failed");
    expect(run.error).toMatchObject({ code: "TEST_AGENT_FAILED", message: expect.stringContaining("agent researcher failed") });
    expect(Object.fromEntries(run.steps.map((s) => [s.key, `${s.status}/${s.attempts}`]))).toEqual({
      primary: "completed/1",
      rescue: "completed/1",
      "rescue.0": "completed/1",
      "rescue.1": "completed/1",
      gate: "failed/1",
    });
    expect(rig.runEvents(runId, "step_fallback").map((e) => e.data)).toEqual([expect.objectContaining({ stepId: "primary", fallback: "rescue" })]);
    // the gate's failure was not retried, and the step after it was never sent
    expect((await rig.counts("researcher")).inputs).toEqual(["[fail] gate for writer(rescue after TEST_AGENT_FAILED)"]);
    expect((await rig.counts("writer")).inputs).toEqual(["rescue after TEST_AGENT_FAILED"]);
    expect((await rig.counts("critic")).calls).toBe(1);
  }, 60_000);

  it("workflow - a template error fails the run with the template and the missing path, and nothing is sent for that step", async () => {
    await using rig = await WorkflowRig.start(1);
    const raw = {
      workflow: { id: "broken" },
      steps: [
        { id: "a", agent: "researcher", task: "x" },
        { id: "b", agent: "writer", task: "use {{steps.a.output.summary}}" },
      ],
    };
    const { runId } = await startRun(rig.client, { raw, input: {} });
    const run = await rig.finished(runId);
    expect(run.status).toBe("failed");
    expect(run.error).toMatchObject({ code: WorkflowErrorCode.TEMPLATE_ERROR, data: { path: "steps.a.output.summary", step: "b" } });
    expect(run.error!.message).toContain("steps.a.output is a string, it has no field summary");
    expect((await rig.counts("writer")).calls).toBe(0);
  }, 60_000);

  it("workflow - starting a run that exists answers with it at once: again while it runs, twice at once, again after it ended; it runs once", async () => {
    await using rig = await WorkflowRig.start(1);
    const raw = { workflow: { id: "again", input: { topic: "string" } }, steps: [{ id: "a", agent: "researcher", task: "dig {{input.topic}}" }] };
    // The bound only turns a start that is never answered into a failure; it measures nothing.
    const within = { timeoutMs: 25_000 };
    const first = await startRun(rig.client, { raw, input: { topic: "nats" }, runId: "wf-again-1", ...within });
    expect(first).toMatchObject({ runId: "wf-again-1", existing: false, run: { runId: "wf-again-1", workflowId: "again" } });
    const second = await startRun(rig.client, { raw, input: { topic: "nats" }, runId: "wf-again-1", ...within });
    expect(second).toMatchObject({ runId: "wf-again-1", existing: true, run: { runId: "wf-again-1", workflowId: "again" } });
    expect((await rig.finished("wf-again-1")).status).toBe("completed");
    const ended = await startRun(rig.client, { raw, input: { topic: "nats" }, runId: "wf-again-1", ...within });
    expect(ended).toMatchObject({ existing: true, run: { status: "completed", output: "researcher(dig nats)" } });
    // two callers at once: one starts it, the other gets it as it is
    const both = await Promise.all([1, 2].map(() => startRun(rig.client, { raw, input: { topic: "kv" }, runId: "wf-again-2", ...within })));
    expect(both.map((b) => b.existing).sort()).toEqual([false, true]);
    expect((await rig.finished("wf-again-2")).status).toBe("completed");
    // each run sent its step once, however often it was started
    expect((await rig.counts("researcher")).inputs.sort()).toEqual(["dig kv", "dig nats"]);
  }, 90_000);

  describe("approval waits", () => {
    let rig: WorkflowRig;
    let ok: { runId: string };
    let no: { runId: string };
    beforeAll(async () => {
      rig = await WorkflowRig.start(1);
      const { raw } = await loadWorkflowFile(join(WORKFLOW_FIXTURES, "report.toml"));
      ok = await startRun(rig.client, { raw, input: { topic: "vector databases" } });
      no = await startRun(rig.client, { raw, input: { topic: "other" } });
      for (const r of [ok, no])
        await poll(() => rig.runEvents(r.runId, "approval_requested").length > 0, { timeoutMs: 20_000, what: `${r.runId} to ask for approval` });
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("workflow - an approval wait holds the run, shown by its status, until approve; then the then arm runs", async () => {
      expect((await readRun(rig.client, ok.runId)).approvals).toEqual([{ approvalId: "approve", stepId: "approve" }]);
      const reply = await rig.client.ask<{ outcome: string }>(ok.runId, "workflow.signal", { approvalId: "approve", approved: true, by: "ann" });
      expect(reply.payload.outcome).toBe("delivered");
      expect((await rig.finished(ok.runId)).output).toBe(
        'writer(Write the final report from researcher(Research vector databases) and ["critic(Critique researcher(Research vector databases))","fact_checker(Check researcher(Research vector databases))"])',
      );
    }, 60_000);

    it("workflow - a rejection takes the else arm: the run fails with not approved and its writer step is never sent", async () => {
      await rig.client.ask(no.runId, "workflow.signal", { approvalId: "approve", approved: false });
      expect((await rig.finished(no.runId)).status).toBe("failed");
      expect((await readRun(rig.client, no.runId)).error).toMatchObject({ code: WorkflowErrorCode.WORKFLOW_FAILED, message: "not approved" });
      expect((await rig.counts("writer")).inputs.filter((w) => w.includes("other"))).toEqual([]);
    }, 60_000);

    it("workflow - an invalid definition sent to start a run fails that run visibly with WORKFLOW_INVALID", async () => {
      const bad = await startRun(rig.client, { raw: { workflow: { id: "x" }, steps: [{ id: "a", agent: "w" }] }, input: {} });
      expect((await rig.finished(bad.runId)).error).toMatchObject({ code: WorkflowErrorCode.WORKFLOW_INVALID });
    }, 60_000);
  });

  it("workflow - a wait on a subject ends on the first message published after it began, its data as the output; the capture is released", async () => {
    await using rig = await WorkflowRig.start(2);
    const nc = rig.client.bus.nc;
    const raw = {
      workflow: { id: "orders", input: { id: "string" } },
      steps: [
        { id: "paid", type: "wait", for: "event", subject: "orders.{{input.id}}.paid", timeout: "60s" },
        { id: "ship", agent: "writer", task: "ship {{input.id}} for {{steps.paid.output.amount}}" },
      ],
    };
    const waiting = async (runId: string) =>
      poll(async () => ((await readRun(rig.client, runId)).subjects.length > 0 ? true : undefined), {
        timeoutMs: 20_000,
        retryErrors: true,
        what: `${runId} to wait on its subject`,
      });
    const first = await startRun(rig.client, { raw, input: { id: "o-1" } });
    await waiting(first.runId);
    expect((await readRun(rig.client, first.runId)).subjects).toEqual([{ stepId: "paid", subject: "orders.o-1.paid" }]);
    nc.publish("orders.o-1.paid", JSON.stringify({ amount: 12 }));
    expect((await rig.finished(first.runId)).output).toBe("writer(ship o-1 for 12)");
    expect(rig.runEvents(first.runId, "signal_received")[0]?.data).toMatchObject({ subject: "orders.o-1.paid", stepId: "paid" });

    // A second run on the same subject starts after that message: only a newer one ends its wait.
    const second = await startRun(rig.client, { raw, input: { id: "o-1" } });
    await waiting(second.runId);
    nc.publish("orders.o-1.paid", JSON.stringify({ amount: 30 }));
    expect((await rig.finished(second.runId)).output).toBe("writer(ship o-1 for 30)");
    // No wait names the subject any more: it left the capture stream (deleted with its last subject).
    const jsm = rig.client.bus.jsm;
    await poll(
      () =>
        jsm.streams.info(subjectsFor(rig.cluster).streams.waits).then(
          () => false,
          (err: unknown) => isStreamNotFound(err),
        ),
      { timeoutMs: 10_000, what: "the waits stream to be released" },
    );

    // Kova's own events are read from the EVENTS stream, which stores them already.
    const watch = {
      workflow: { id: "watch" },
      steps: [
        { id: "done", type: "wait", for: "event", subject: `kova.${rig.cluster}.events.s-ext.r-ext` },
        { id: "say", agent: "writer", task: "saw {{steps.done.output.type}}" },
      ],
    };
    const third = await startRun(rig.client, { raw: watch, input: {} });
    await waiting(third.runId);
    await rig.client.bus.publishEvent({ type: "deploy_done", sessionId: "s-ext", runId: "r-ext", ts: Date.now(), data: {} });
    expect((await rig.finished(third.runId)).output).toBe("writer(saw deploy_done)");
    await expect(jsm.streams.info(subjectsFor(rig.cluster).streams.waits)).rejects.toSatisfy(isStreamNotFound);
  }, 60_000);

  it("workflow - cancel interrupts the agent turns the run started, running or still queued: its children end cancelled", async () => {
    await using rig = await WorkflowRig.start(2);
    const raw = {
      workflow: { id: "long" },
      steps: [
        {
          id: "all",
          type: "parallel",
          branches: [
            { agent: "researcher", task: "[sleep-60000] one" },
            { agent: "researcher", task: "[sleep-60000] two" },
            { agent: "writer", task: "[sleep-60000] three" },
          ],
        },
      ],
    };
    const { runId } = await startRun(rig.client, { raw, input: {} });
    const children = await poll(
      () => {
        const linked = rig.runEvents(runId, "child_run_linked").map((e) => (e.data as { childRunId: string }).childRunId);
        return linked.length === 3 ? linked : undefined;
      },
      { timeoutMs: 20_000, what: "three child runs" },
    );
    // one researcher turn and the writer's run; the second researcher task waits in its mailbox
    await poll(() => rig.events.filter((e) => e.parentRunId === runId && e.type === "run_started").length === 2, {
      timeoutMs: 20_000,
      what: "two children running",
    });
    await rig.client.send(runId, "workflow.cancel", { reason: "no longer needed" });
    expect(await rig.ended(runId)).toBe("cancelled");
    const statuses = await poll(
      () => {
        const ends = children.map((c) => rig.events.find((e) => e.runId === c && e.type === "run_stream_end"));
        return ends.every(Boolean) ? ends.map((e) => (e!.data as { status: string }).status) : undefined;
      },
      {
        timeoutMs: 15_000,
        what: () =>
          `every child run to end; ended: ${rig.events
            .filter((e) => e.parentRunId === runId && e.type === "run_stream_end")
            .map((e) => e.runId)
            .join(", ")}`,
      },
    );
    expect(statuses).toEqual(["cancelled", "cancelled", "cancelled"]);
    const researcher = await poll(
      async () => {
        const c = await rig.counts("researcher");
        return (c as { interrupted?: string[] }).interrupted?.length === 2 ? c : undefined;
      },
      { timeoutMs: 10_000, what: "both researcher turns counted as interrupted" },
    );
    expect(researcher.calls).toBe(2);
  }, 60_000);
});
