import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { defineWorkflow, emptyRunState, loadWorkflowFile, RunEngine, type Effect, type RunState, type WorkflowDefinition } from "../../src/workflow/index.js";
import { WorkflowErrorCode } from "../../src/workflow/errors.js";

type Send = Extract<Effect, { kind: "send" }>;

/** Drives the pure engine turn by turn, as the run actor does, and records what it asked for. */
class Sim {
  state: RunState = emptyRunState("wf-1");
  now = 1_000;
  readonly effects: Effect[] = [];

  turn(fn: (e: RunEngine) => unknown = () => undefined): Effect[] {
    const e = new RunEngine(this.state, this.now);
    fn(e);
    e.advance();
    this.effects.push(...e.effects);
    return e.effects;
  }

  start(workflow: WorkflowDefinition, input: Record<string, unknown> = {}): Effect[] {
    return this.turn((e) => e.start({ workflow, input, sessionId: "s1" }));
  }

  sends(): Send[] {
    return this.effects.filter((e): e is Send => e.kind === "send");
  }

  /** The open dispatch to `agent` (exactly one). */
  open(agent: string): Send {
    const open = this.sends().filter((s) => s.to === agent && this.state.dispatches[s.id] !== undefined);
    expect(
      open.map((s) => s.to),
      `one open dispatch to ${agent}`,
    ).toEqual([agent]);
    return open[0]!;
  }

  reply(agent: string, output: unknown, opts: { fail?: boolean } = {}): Effect[] {
    const d = this.open(agent);
    const payload = opts.fail
      ? {
          output: "",
          status: "failed",
          error: { code: "MODEL_DOWN", message: "boom" },
          runId: d.payload.runId,
          sessionId: "s1",
          usage: { inputTokens: 1, outputTokens: 0 },
        }
      : { output, status: "completed", runId: d.payload.runId, sessionId: "s1", usage: { inputTokens: 10, outputTokens: 5 } };
    return this.turn((e) => expect(e.result(d.id, payload, undefined)).toBe(true));
  }

  /** Fires the pending timer of the given kind (the clock moves to its due time). */
  fire(kind: string): Effect[] {
    const [id, t] = Object.entries(this.state.timers).find(([, t]) => t.kind === kind) ?? [];
    expect(id, `a pending ${kind} timer`).toBeDefined();
    this.now = Math.max(this.now, t!.due);
    return this.turn((e) => expect(e.fired(id!)).toBe(true));
  }

  events(type?: string): Array<Record<string, unknown>> {
    return this.effects.flatMap((e) => (e.kind === "event" && (type === undefined || e.type === type) ? [{ type: e.type, ...e.data }] : []));
  }
}

const one = (steps: unknown[], input?: Record<string, unknown>) => defineWorkflow({ workflow: { id: "t", ...(input ? { input } : {}) }, steps } as never);

describe("workflow engine", () => {
  it("engine - the example file of docs/workflows.md runs research, a parallel review, an approval and the publishing branch", async () => {
    const { definition } = await loadWorkflowFile(join(import.meta.dirname, "../fixtures/workflow/report.toml"));
    const sim = new Sim();
    sim.start(definition, { topic: "vector databases" });
    expect(sim.open("researcher").payload).toEqual({ input: "Research vector databases", sessionId: "s1", runId: "wf-1-t0r", parentRunId: "wf-1" });
    sim.reply("researcher", "R");
    expect(sim.open("critic").payload.input).toBe("Critique R");
    expect(sim.open("fact_checker").payload.input).toBe("Check R");
    sim.reply("fact_checker", "F");
    expect(sim.events("approval_requested")).toEqual([]);
    sim.reply("critic", "C");
    expect(sim.events("approval_requested")).toEqual([{ type: "approval_requested", approvalId: "approve", stepId: "approve", timeoutMs: 86_400_000 }]);
    expect(sim.turn((e) => expect(e.signal({ approvalId: "approve", approved: true, by: "ann" })).toBe("delivered"))).toContainEqual(
      expect.objectContaining({ kind: "event", type: "approval_granted" }),
    );
    expect(sim.open("writer").payload.input).toBe('Write the final report from R and ["C","F"]');
    const ending = sim.reply("writer", "FINAL");
    expect(sim.state.status).toBe("completed");
    expect(sim.state.output).toBe("FINAL");
    expect(sim.state.usage).toEqual({ inputTokens: 40, outputTokens: 20 });
    // The turn that ends the run announces nothing yet: the end events go out from the next
    // turn (its retire timer's), once this one's state is committed.
    expect(ending.flatMap((e) => (e.kind === "event" ? [e.type] : []))).toEqual(["step_completed", "step_completed"]);
    expect(sim.events("run_completed")).toEqual([]);
    // every agent step is a child run linked to its step
    expect(sim.events("child_run_linked").map((e) => `${e.stepId}->${e.childRunId}`)).toEqual([
      "research->wf-1-t0r",
      "review.0->wf-1-t1r",
      "review.1->wf-1-t2r",
      "publish.then->wf-1-t4r",
    ]);
    // the approval's own timeout timer was dropped when the approval came
    expect(Object.values(sim.state.timers).map((t) => t.kind)).toEqual(["retire"]);
    const retired = sim.fire("retire");
    expect(retired.map((e) => (e.kind === "event" ? e.type : e.kind))).toEqual(["run_completed", "run_stream_end", "retire"]);
    expect(sim.events("run_completed")).toEqual([{ type: "run_completed", output: "FINAL", usage: { inputTokens: 40, outputTokens: 20 }, durationMs: 0 }]);
    expect(sim.events("run_stream_end")).toEqual([{ type: "run_stream_end", status: "completed" }]);
    // a second retire timer message (a repeat) announces nothing again
    expect(new RunEngine(sim.state, sim.now).fired("none")).toBe(false);
    expect(sim.state.endPending).toBeUndefined();
  });

  it("engine - a turn computed twice from the same state yields the same message ids (a re-run after a crash sends duplicates only)", () => {
    const def = one([
      { id: "a", agent: "x", task: "t" },
      {
        id: "p",
        type: "parallel",
        branches: [
          { agent: "y", task: "{{steps.a.output}}" },
          { agent: "z", task: "2" },
        ],
      },
    ]);
    const sim = new Sim();
    sim.start(def);
    const before = structuredClone(sim.state);
    const first = sim.reply("x", "A");
    const again = new Sim();
    again.state = before;
    const e = new RunEngine(again.state, sim.now);
    e.result(sim.sends()[0]!.id, { output: "A" }, undefined);
    e.advance();
    expect(e.effects).toEqual(first);
    // a second result for a step that already has one is ignored
    expect(new RunEngine(sim.state, sim.now).result(sim.sends()[0]!.id, { output: "B" }, undefined)).toBe(false);
  });

  it("retry - exponential backoff between attempts, then success; a run gives up after the attempts", () => {
    const def = one([{ id: "a", agent: "x", task: "t", on_error: { strategy: "retry", attempts: 3, backoff: "100ms" } }]);
    const sim = new Sim();
    sim.start(def);
    sim.reply("x", "", { fail: true });
    expect(sim.events("step_retry").map((e) => e.delayMs)).toEqual([100]);
    sim.fire("retry");
    sim.reply("x", "", { fail: true });
    sim.fire("retry");
    expect(sim.events("step_retry").map((e) => e.delayMs)).toEqual([100, 200]);
    sim.reply("x", "ok");
    expect(sim.state.status).toBe("completed");
    expect(sim.state.steps.a).toMatchObject({ status: "completed", attempt: 3, output: "ok" });
    expect(new Set(sim.sends().map((s) => s.id)).size).toBe(3);

    const fails = new Sim();
    fails.start(def);
    for (let i = 0; i < 2; i++) {
      fails.reply("x", "", { fail: true });
      fails.fire("retry");
    }
    fails.reply("x", "", { fail: true });
    expect(fails.state.status).toBe("failed");
    expect(fails.state.error).toMatchObject({ code: "MODEL_DOWN", message: "agent x failed: boom" });
    expect(fails.sends()).toHaveLength(3);
  });

  it("skip and fallback - a skipped step yields null, a fallback's output stands for the step", () => {
    const def = one([
      { id: "s", agent: "x", task: "t", on_error: { strategy: "skip" } },
      { id: "f", agent: "y", task: "after {{steps.s.output}}", on_error: { strategy: "fallback", agent: "backup" } },
      { id: "last", agent: "z", task: "{{steps.f.output}} by {{steps.f.metadata.agent}}" },
    ]);
    const sim = new Sim();
    sim.start(def);
    sim.reply("x", "", { fail: true });
    expect(sim.events("step_skipped")).toHaveLength(1);
    expect(sim.open("y").payload.input).toBe("after null");
    sim.reply("y", "", { fail: true });
    expect(sim.open("backup").payload.input).toBe("after null");
    sim.reply("backup", "B");
    expect(sim.open("z").payload.input).toBe("B by backup");
    expect(sim.state.steps.f).toMatchObject({ status: "completed", fallback: true, output: "B" });
  });

  it("abort - an explicit on_error abort fails the run at that step: no retry of a retryable failure, no later step starts", () => {
    const def = one([
      { id: "a", agent: "x", task: "t", on_error: { strategy: "abort" } },
      { id: "b", agent: "y", task: "after {{steps.a.output}}" },
    ]);
    expect(def.steps[0]!.onError).toEqual({ strategy: "abort" });
    const sim = new Sim();
    sim.start(def);
    sim.reply("x", "", { fail: true });
    expect(sim.state).toMatchObject({ status: "failed", error: { code: "MODEL_DOWN", message: "agent x failed: boom" } });
    expect(sim.state.steps.a).toMatchObject({ status: "failed", attempt: 1 });
    expect(sim.state.steps.b).toBeUndefined();
    expect(sim.sends().map((s) => s.to)).toEqual(["x"]);
    expect(sim.events("step_retry")).toEqual([]);
    sim.fire("retire");
    const events = sim.effects.flatMap((e) => (e.kind === "event" ? [e.type] : []));
    expect(events.slice(-3)).toEqual(["step_failed", "run_failed", "run_stream_end"]);
    expect(sim.events("run_failed")[0]).toMatchObject({ error: { code: "MODEL_DOWN" } });
    expect(sim.events("step_started").map((e) => e.stepId)).toEqual(["a"]);
  });

  it("fallback step - any step can stand in for a failed one: a parallel step's output and metadata become the step's; a failing fallback fails the run", () => {
    const def = one([
      {
        id: "main",
        agent: "x",
        task: "t",
        on_error: {
          strategy: "fallback",
          step: {
            id: "rescue",
            type: "parallel",
            branches: [
              { agent: "b1", task: "fix after {{steps.main.error.code}}" },
              { agent: "b2", task: "also" },
            ],
          },
        },
      },
      { id: "after", agent: "z", task: "{{steps.main.output.0}} + {{steps.main.output.1}} by fallback {{steps.main.metadata.fallback}}" },
    ]);
    const sim = new Sim();
    sim.start(def);
    sim.reply("x", "", { fail: true });
    expect(sim.events("step_fallback")).toEqual([
      expect.objectContaining({ stepId: "main", fallback: "rescue", error: expect.objectContaining({ code: "MODEL_DOWN" }) }),
    ]);
    expect(sim.open("b1").payload.input).toBe("fix after MODEL_DOWN");
    sim.reply("b1", "B1");
    sim.reply("b2", "B2");
    expect(sim.open("z").payload.input).toBe("B1 + B2 by fallback true");
    expect(sim.state.steps.main).toMatchObject({ status: "completed", fallback: true, output: ["B1", "B2"] });
    sim.reply("z", "done");
    expect(sim.state).toMatchObject({ status: "completed", output: "done" });

    const fails = new Sim();
    fails.start(def);
    fails.reply("x", "", { fail: true });
    fails.reply("b1", "", { fail: true });
    fails.reply("b2", "B2");
    expect(fails.state).toMatchObject({ status: "failed", error: { code: WorkflowErrorCode.PARALLEL_FAILED } });
    expect(fails.state.steps.main).toMatchObject({ status: "failed", fallback: true });
    expect(fails.sends().map((s) => s.to)).not.toContain("z");
  });

  it("abort - a rejected approval takes the else arm and its fail ends the run", async () => {
    const { definition } = await loadWorkflowFile(join(import.meta.dirname, "../fixtures/workflow/report.toml"));
    const sim = new Sim();
    sim.start(definition, { topic: "x" });
    sim.reply("researcher", "R");
    sim.reply("critic", "", { fail: true });
    sim.reply("fact_checker", "F");
    expect(sim.state.steps.review).toMatchObject({ status: "skipped", output: null });
    sim.turn((e) => e.signal({ approvalId: "approve", approved: false, comment: "no" }));
    expect(sim.state.status).toBe("failed");
    expect(sim.state.error).toMatchObject({ code: WorkflowErrorCode.WORKFLOW_FAILED, message: "not approved" });
    expect(sim.sends().map((s) => s.to)).not.toContain("writer");
  });

  it("template error - a missing path fails the step before anything is sent, naming the template and the path", () => {
    const def = one([
      { id: "a", agent: "x", task: "t" },
      { id: "b", agent: "y", task: "Use {{steps.a.output.summary}}" },
    ]);
    const sim = new Sim();
    sim.start(def);
    sim.reply("x", "plain text");
    expect(sim.state.status).toBe("failed");
    expect(sim.state.error).toMatchObject({ code: WorkflowErrorCode.TEMPLATE_ERROR, data: { path: "steps.a.output.summary", step: "b" } });
    expect(sim.state.error!.message).toContain('template "Use {{steps.a.output.summary}}"');
    expect(sim.sends().map((s) => s.to)).toEqual(["x"]);
  });

  it("loop - runs its body until the condition holds, each iteration a step run of its own", () => {
    const def = one([
      {
        id: "l",
        type: "loop",
        max_iterations: 5,
        until: "steps.draft.output contains 'good'",
        steps: [{ id: "draft", agent: "w", task: "draft {{loop.iteration}} after {{steps.l.status}}" }],
      },
      { id: "done", agent: "x", task: "{{steps.draft.output}} / {{steps.l.output}} / {{steps.l.metadata.iterations}}" },
    ]);
    const sim = new Sim();
    sim.start(def);
    expect(sim.open("w").payload.input).toBe("draft 0 after running");
    sim.reply("w", "meh");
    expect(sim.open("w").payload.input).toBe("draft 1 after running");
    sim.reply("w", "good one");
    expect(sim.open("x").payload.input).toBe("good one / good one / 2");
    expect(Object.keys(sim.state.steps).filter((k) => k.startsWith("draft"))).toEqual(["draft@0", "draft@1"]);

    const capped = new Sim();
    capped.start(one([{ id: "l", type: "loop", max_iterations: 2, while: "true", steps: [{ id: "d", agent: "w", task: "x" }] }]));
    capped.reply("w", "1");
    capped.reply("w", "2");
    expect(capped.state).toMatchObject({ status: "completed", output: "2" });
    expect(capped.state.steps.l).toMatchObject({ exhausted: true });
  });

  it("waits - an event signal that came early is kept, a timer wait ends on its timer, an approval times out", () => {
    const sim = new Sim();
    sim.start(
      one([
        { id: "t", type: "wait", for: "timer", duration: "5s" },
        { id: "e", type: "wait", for: "event", event: "paid" },
        { id: "x", agent: "a", task: "{{steps.e.output.amount}}" },
      ]),
    );
    expect(sim.turn((e) => expect(e.signal({ event: "paid", data: { amount: 42 } })).toBe("kept"))).toEqual([]);
    sim.fire("timer");
    expect(sim.open("a").payload.input).toBe("42");

    const timeout = new Sim();
    timeout.start(one([{ id: "ok", type: "wait", for: "approval", timeout: "1h" }]));
    timeout.fire("timeout");
    expect(timeout.state.error).toMatchObject({ code: WorkflowErrorCode.WAIT_TIMEOUT });
  });

  it("subject wait - renders its subject, captures it, ends on the message for its wait id only, then releases the capture", () => {
    const sim = new Sim();
    const effects = sim.start(
      one(
        [
          { id: "paid", type: "wait", for: "event", subject: "orders.{{input.id}}.paid", timeout: "1h" },
          { id: "x", agent: "a", task: "{{steps.paid.output.amount}}" },
        ],
        { id: "string" },
      ),
      { id: "o-7" },
    );
    const wait = effects.find((e) => e.kind === "subject_wait");
    expect(wait).toEqual({ kind: "subject_wait", waitId: "wf-1-w0", subject: "orders.o-7.paid" });
    // a name signal does not end a subject-only wait, and a message for another wait is stale, not kept
    expect(sim.turn((e) => expect(e.signal({ event: "paid" })).toBe("kept"))).toEqual([]);
    expect(sim.turn((e) => expect(e.signal({ waitId: "wf-1-w9", subject: "orders.o-7.paid", data: {} })).toBe("ignored"))).toEqual([]);
    const ended = sim.turn((e) => expect(e.signal({ waitId: "wf-1-w0", subject: "orders.o-7.paid", data: { amount: 12 }, seq: 5 })).toBe("delivered"));
    expect(ended).toContainEqual({ kind: "end_subject_wait", waitId: "wf-1-w0", subject: "orders.o-7.paid" });
    expect(sim.events("signal_received")).toEqual([{ type: "signal_received", subject: "orders.o-7.paid", seq: 5, stepId: "paid" }]);
    expect(sim.open("a").payload.input).toBe("12");
    expect(sim.state.timers).toEqual({}); // its timeout was dropped
    sim.reply("a", "done");
    expect(sim.effects.filter((e) => e.kind === "clear_subject_waits")).toHaveLength(1);

    // a subject that renders into something a wait may not capture fails the step, captures nothing
    const bad = new Sim();
    bad.start(one([{ id: "paid", type: "wait", for: "event", subject: "orders.{{input.id}}.paid" }], { id: "string" }), { id: "a.*" });
    expect(bad.state).toMatchObject({ status: "failed", error: { code: WorkflowErrorCode.WAIT_SUBJECT_INVALID } });
    expect(bad.state.error!.message).toContain('"orders.a.*.paid"');
    expect(bad.effects.some((e) => e.kind === "subject_wait")).toBe(false);

    // a timeout releases the capture too
    const late = new Sim();
    late.start(one([{ id: "w", type: "wait", for: "event", subject: "x.y", timeout: "1s" }]));
    expect(late.fire("timeout")).toContainEqual({ kind: "end_subject_wait", waitId: "wf-1-w0", subject: "x.y" });
    expect(late.state.error).toMatchObject({ code: WorkflowErrorCode.WAIT_TIMEOUT });
  });

  it("agent timeout - a step without a result in time is retried, and the late result is ignored", () => {
    const sim = new Sim();
    sim.start(one([{ id: "a", agent: "x", task: "t", timeout: "2s", on_error: { strategy: "retry", attempts: 2, backoff: "10ms" } }]));
    const first = sim.open("x");
    sim.fire("timeout");
    expect(sim.events("step_retry")[0]).toMatchObject({ error: { code: WorkflowErrorCode.STEP_TIMEOUT } });
    sim.fire("retry");
    expect(new RunEngine(sim.state, sim.now).result(first.id, { output: "late" }, undefined)).toBe(false);
    sim.reply("x", "second");
    expect(sim.state).toMatchObject({ status: "completed", output: "second" });
  });

  it("cancel - ends the run, later results and signals are ignored, and a retire timer is set", () => {
    const sim = new Sim();
    sim.start(one([{ id: "a", agent: "x", task: "t" }]));
    const d = sim.open("x");
    const cancelled = sim.turn((e) => expect(e.cancel("changed my mind", "ops")).toBe(true));
    // the agent turn the run still waited for is interrupted (that message only)
    expect(cancelled.filter((e) => e.kind === "interrupt")).toEqual([{ kind: "interrupt", agent: "x", messageId: d.id, childRunId: d.payload.runId }]);
    expect(sim.state).toMatchObject({ status: "cancelled", error: { code: WorkflowErrorCode.WORKFLOW_CANCELLED } });
    expect(sim.events("run_cancelled")).toEqual([]);
    expect(new RunEngine(sim.state, sim.now).result(d.id, { output: "x" }, undefined)).toBe(false);
    expect(new RunEngine(sim.state, sim.now).signal({ event: "x" })).toBe("ignored");
    expect(sim.fire("retire").map((e) => (e.kind === "event" ? e.type : e.kind))).toEqual(["run_cancelled", "run_stream_end", "retire"]);
    expect(sim.events("run_cancelled")[0]).toMatchObject({ error: { code: WorkflowErrorCode.WORKFLOW_CANCELLED } });
  });

  it("end events - a run that ended under a build which announced its end in the ending turn (no endPending) is retired without announcing it again", () => {
    const sim = new Sim();
    sim.start(one([{ id: "a", agent: "x", task: "t" }]));
    sim.reply("x", "done");
    delete sim.state.endPending;
    expect(sim.fire("retire").map((e) => e.kind)).toEqual(["retire"]);
  });
});
