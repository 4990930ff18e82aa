import { toWire, type WireError, checkFormatVersion } from "../core/index.js";
import { addUsage, reportedUsage, runPayload, type RunStatus, type RunUsage, type TaskDelegatePayload } from "../agents/index.js";
import { evaluateCondition, parseCondition, truthy } from "./condition.js";
import {
  waitSubjectProblem,
  type AgentStep,
  type BranchStep,
  type LoopStep,
  type ParallelStep,
  type StepDef,
  type WaitStep,
  type WorkflowDefinition,
} from "./definition.js";
import { TemplateError, WorkflowErrorCode } from "./errors.js";
import { renderTemplate, walk, type PathResolver } from "./template.js";

/**
 * The workflow interpreter, as a pure state machine: `receive` applies one message to a
 * run's state, `advance` walks the workflow from the top over the recorded step results,
 * starts every step that is ready and returns the effects to perform (messages to send,
 * events to publish, timers to set). Nothing here does I/O, reads a clock or draws a
 * random number: the run actor (run-actor.ts) passes the turn's journaled `now` and
 * performs the effects as journaled steps, and the state is the actor's checkpoint. So a
 * turn re-run after a crash, on this node or another, computes the same effects with the
 * same message ids, and a step whose result is in the state is never started again.
 */

export const RUN_STATE_VERSION = 1;
const RUN_STATE_READABLE: readonly number[] = [1];

/**
 * A run's state (its actor's checkpoint state) as this build reads it.
 * @throws UnsupportedFormatError for the state of a run a newer Kova advanced: a turn of it
 *   here would misread its steps
 */
export function readRunState(runId: string, value: unknown): RunState {
  checkFormatVersion(`state of workflow run ${runId}`, (value as { v?: unknown } | null | undefined)?.v, RUN_STATE_READABLE);
  return value as RunState;
}

/** A workflow run's status: an agent run's end states, and the two before them. */
export type WorkflowRunStatus = "new" | "running" | RunStatus;
/** `cancelled`: the run ended (cancelled, or failed elsewhere) while the step was still under way. */
export type StepStatus = "running" | "backoff" | "retry" | "completed" | "failed" | "skipped" | "cancelled";

/** What arrived for a step and is settled at the next advance. */
export type StepResult = { ok: true; output: unknown; usage?: RunUsage; node?: string } | { ok: false; error: WireError; retryable: boolean };

/** One run of one step (inside a loop, one per iteration: key `<id>@<i>`). */
export interface WorkflowStepRecord {
  key: string;
  id: string;
  type: StepDef["type"];
  status: StepStatus;
  attempt: number;
  startedAt: number;
  endedAt?: number;
  output?: unknown;
  error?: WireError;
  result?: StepResult;
  /** agent steps */
  agent?: string;
  dispatchId?: string;
  childRunId?: string;
  usage?: RunUsage;
  node?: string;
  timeoutTimer?: string;
  /** the fallback step is running (or ran) for this step */
  fallback?: boolean;
  /** branch: the arm taken */
  arm?: "then" | "else" | "none";
  /** loop: current iteration and whether it began */
  iteration?: number;
  begun?: boolean;
  exhausted?: boolean;
  /** wait steps */
  waiting?: boolean;
  approvalId?: string;
  /** a wait on a NATS subject: its id (`<runId>-w<n>`) and the rendered subject */
  waitId?: string;
  subject?: string;
}

export interface TimerRecord {
  kind: "retry" | "timeout" | "timer" | "retire";
  key?: string;
  due: number;
}

/** A signal that arrived before the wait it ends (kept until the wait begins). */
export interface SignalRecord {
  approvalId?: string;
  approved?: boolean;
  event?: string;
  data?: unknown;
  /** a message on a waited subject (never kept: it names the wait it ends) */
  waitId?: string;
  subject?: string;
  seq?: number;
  by?: string;
  comment?: string;
  at: number;
}

export interface RunState {
  v: number;
  runId: string;
  sessionId: string;
  parentRunId?: string;
  status: WorkflowRunStatus;
  workflow?: WorkflowDefinition;
  input: Record<string, unknown>;
  createdAt: number;
  endedAt?: number;
  /** Counter behind every id this run draws (dispatches, child runs, timers): deterministic. */
  seq: number;
  steps: Record<string, WorkflowStepRecord>;
  /** step id → key of its latest run (the last loop iteration). */
  latest: Record<string, string>;
  /** open agent dispatches: envelope id → step key. */
  dispatches: Record<string, string>;
  timers: Record<string, TimerRecord>;
  inbox: SignalRecord[];
  usage: RunUsage;
  output?: unknown;
  error?: WireError;
  retired?: boolean;
  /**
   * The run ended and its end events (`run_completed` / `run_failed` / `run_cancelled`,
   * `run_stream_end`) are still to be published: by the turn of its retire timer, the
   * first turn after the one that ended it, so they follow that turn's commit.
   */
  endPending?: boolean;
}

export type Effect =
  | { kind: "send"; id: string; to: string; payload: TaskDelegatePayload }
  | { kind: "event"; type: string; data: Record<string, unknown> }
  | { kind: "timer"; timerId: string; due: number }
  | { kind: "clear_timers" }
  /** Capture `subject` for this run from now on (subject-waits.ts); its next message ends the wait. */
  | { kind: "subject_wait"; waitId: string; subject: string }
  | { kind: "end_subject_wait"; waitId: string; subject: string }
  | { kind: "clear_subject_waits" }
  /** The run ended with this agent turn open: interrupt it (the node's `interrupt` signal, for this message only). */
  | { kind: "interrupt"; agent: string; messageId: string; childRunId: string }
  | { kind: "retire" };

export interface StartPayload {
  workflow: WorkflowDefinition;
  input: Record<string, unknown>;
  sessionId: string;
  parentRunId?: string;
}

export type SignalPayload =
  | { approvalId: string; approved: boolean; by?: string; comment?: string }
  | { event: string; data?: unknown }
  /** A message on the subject of a wait (sent by the node that read it, subject-waits.ts). */
  | { waitId: string; subject: string; data?: unknown; seq?: number };

type Outcome = { kind: "done"; output: unknown } | { kind: "pending" } | { kind: "failed"; error: WireError; retryable: boolean };

interface Scope {
  /** `@i` per enclosing loop iteration. */
  suffix: string;
  loops: Array<{ id: string; iteration: number }>;
}

const PENDING: Outcome = { kind: "pending" };
const INBOX_LIMIT = 100;

export function emptyRunState(runId: string): RunState {
  return {
    v: RUN_STATE_VERSION,
    runId,
    sessionId: runId,
    status: "new",
    input: {},
    createdAt: 0,
    seq: 0,
    steps: {},
    latest: {},
    dispatches: {},
    timers: {},
    inbox: [],
    usage: { inputTokens: 0, outputTokens: 0 },
  };
}

function failure(code: string, message: string, data?: unknown): WireError {
  return { code, message, retryable: false, ...(data === undefined ? {} : { data }) };
}

function settled(rec: WorkflowStepRecord): boolean {
  return rec.status === "completed" || rec.status === "skipped" || rec.status === "failed" || rec.status === "cancelled";
}

/** What a step's `metadata` template reads. */
export function stepMetadata(rec: WorkflowStepRecord): Record<string, unknown> {
  return {
    status: rec.status,
    attempts: rec.attempt,
    startedAt: rec.startedAt,
    ...(rec.endedAt === undefined ? {} : { endedAt: rec.endedAt, durationMs: rec.endedAt - rec.startedAt }),
    ...(rec.agent ? { agent: rec.agent } : {}),
    ...(rec.node ? { node: rec.node } : {}),
    ...(rec.usage ? { usage: rec.usage } : {}),
    ...(rec.childRunId ? { childRunId: rec.childRunId } : {}),
    ...(rec.fallback ? { fallback: true } : {}),
    ...(rec.iteration === undefined ? {} : { iterations: rec.iteration + (rec.begun ? 1 : 0) }),
  };
}

/**
 * One turn of a run: `new RunEngine(state, now)`, then `receive(...)` for the message,
 * `advance()`, and perform `effects` in order.
 */
export class RunEngine {
  readonly effects: Effect[] = [];

  /** @throws UnsupportedFormatError when `s` is the state of a newer Kova (see readRunState) */
  constructor(
    readonly s: RunState,
    readonly now: number,
  ) {
    readRunState(s.runId, s);
  }

  private event(type: string, data: Record<string, unknown> = {}): void {
    this.effects.push({ kind: "event", type, data });
  }

  private nextId(tag: string): string {
    return `${this.s.runId}-${tag}${this.s.seq++}`;
  }

  private timer(kind: TimerRecord["kind"], due: number, key?: string): string {
    const timerId = this.nextId("k");
    this.s.timers[timerId] = { kind, due, ...(key === undefined ? {} : { key }) };
    this.effects.push({ kind: "timer", timerId, due });
    return timerId;
  }

  // ---- messages -------------------------------------------------------------------

  /** `workflow.start`: a duplicate start of a run that began is ignored. */
  start(p: StartPayload): boolean {
    if (this.s.status !== "new") return false;
    Object.assign(this.s, {
      status: "running",
      workflow: p.workflow,
      input: p.input,
      sessionId: p.sessionId,
      createdAt: this.now,
      ...(p.parentRunId ? { parentRunId: p.parentRunId } : {}),
    });
    this.event("run_started", { agentId: `workflow:${p.workflow.id}`, workflowId: p.workflow.id, input: p.input, kind: "workflow" });
    return true;
  }

  /** A start whose workflow or input did not validate: the run fails at once, visibly. */
  reject(p: { sessionId: string; parentRunId?: string; workflowId?: string }, error: WireError): boolean {
    if (this.s.status !== "new") return false;
    Object.assign(this.s, { status: "running", sessionId: p.sessionId, createdAt: this.now, ...(p.parentRunId ? { parentRunId: p.parentRunId } : {}) });
    this.event("run_started", { agentId: `workflow:${p.workflowId ?? "?"}`, workflowId: p.workflowId ?? null, kind: "workflow" });
    this.finish("failed", undefined, error);
    return true;
  }

  /** A `result_notify` from an agent; a late or repeated one (no open dispatch) is ignored. */
  result(correlationId: string | undefined, payload: unknown, error: WireError | undefined): boolean {
    const key = correlationId === undefined ? undefined : this.s.dispatches[correlationId];
    if (key === undefined) return false;
    delete this.s.dispatches[correlationId!];
    const rec = this.s.steps[key];
    if (!rec || rec.dispatchId !== correlationId) return false;
    delete rec.dispatchId;
    this.cancelTimer(rec);
    const p = (typeof payload === "object" && payload !== null ? payload : { output: payload }) as Record<string, unknown>;
    const usage = reportedUsage(p.usage);
    this.s.usage = addUsage(this.s.usage, usage);
    if (error) {
      rec.result = { ok: false, error, retryable: true };
    } else if (p.status === "failed" || p.status === "cancelled") {
      const e = p.error as { code?: unknown; message?: unknown } | undefined;
      rec.result = {
        ok: false,
        retryable: p.status === "failed",
        error: failure(
          typeof e?.code === "string" ? e.code : WorkflowErrorCode.AGENT_STEP_FAILED,
          `agent ${rec.agent} ${p.status === "failed" ? "failed" : "was cancelled"}${typeof e?.message === "string" ? `: ${e.message}` : ""}`,
          { agent: rec.agent },
        ),
      };
    } else {
      rec.result = { ok: true, output: p.output ?? null, ...(usage ? { usage } : {}), ...(typeof p.node === "string" ? { node: p.node } : {}) };
    }
    return true;
  }

  /** `workflow.timer`: a timer this run no longer waits for is ignored. */
  fired(timerId: string): boolean {
    const t = this.s.timers[timerId];
    if (!t) return false;
    delete this.s.timers[timerId];
    if (t.kind === "retire") {
      if (this.s.status === "running" || this.s.retired) return false;
      this.s.retired = true;
      this.announceEnd();
      this.effects.push({ kind: "retire" });
      return true;
    }
    const rec = t.key === undefined ? undefined : this.s.steps[t.key];
    if (!rec || settled(rec)) return false;
    if (t.kind === "retry") {
      if (rec.status !== "backoff") return false;
      rec.status = "retry";
    } else if (t.kind === "timer") {
      rec.result = { ok: true, output: { firedAt: this.now } };
    } else {
      delete rec.timeoutTimer;
      if (rec.type === "agent") {
        if (rec.dispatchId === undefined) return false;
        delete this.s.dispatches[rec.dispatchId];
        delete rec.dispatchId;
        rec.result = {
          ok: false,
          retryable: true,
          error: failure(WorkflowErrorCode.STEP_TIMEOUT, `agent ${rec.agent} sent no result within the step's timeout`, { agent: rec.agent }),
        };
      } else {
        rec.result = { ok: false, retryable: false, error: failure(WorkflowErrorCode.WAIT_TIMEOUT, `nothing ended the wait ${rec.key} before its timeout`) };
      }
    }
    return true;
  }

  /**
   * `workflow.signal`: ends the wait it names, or is kept until that wait begins.
   * @returns delivered (a wait ended), kept (no such wait yet) or ignored (the run ended)
   */
  signal(p: SignalPayload, by?: string): "delivered" | "kept" | "ignored" {
    if (this.s.status !== "running" && this.s.status !== "new") return "ignored";
    const sig: SignalRecord = { at: this.now, ...p, ...(by && !("by" in p && p.by) ? { by } : {}) };
    const rec = Object.values(this.s.steps).find((r) => r.waiting && !r.result && matches(r, sig, this.s.workflow));
    // A message for a wait that is over (a repeat, or it timed out) is stale: not kept.
    if (!rec && sig.waitId !== undefined) return "ignored";
    if (rec) {
      this.deliver(rec, sig);
      return "delivered";
    }
    this.s.inbox.push(sig);
    if (this.s.inbox.length > INBOX_LIMIT) this.s.inbox.shift();
    return "kept";
  }

  /** `workflow.cancel`. */
  cancel(reason?: string, by?: string): boolean {
    if (this.s.status !== "running") return false;
    // The agent turns this run started and still waits for are interrupted, not only
    // ignored: each child run then ends `cancelled` instead of spending tokens for nothing.
    for (const [messageId, key] of Object.entries(this.s.dispatches)) {
      const rec = this.s.steps[key];
      if (rec?.agent && rec.childRunId) this.effects.push({ kind: "interrupt", agent: rec.agent, messageId, childRunId: rec.childRunId });
    }
    this.finish("cancelled", undefined, failure(WorkflowErrorCode.WORKFLOW_CANCELLED, `run cancelled${by ? ` by ${by}` : ""}${reason ? `: ${reason}` : ""}`));
    return true;
  }

  private deliver(rec: WorkflowStepRecord, sig: SignalRecord): void {
    this.cancelTimer(rec);
    if (sig.approvalId !== undefined) {
      rec.result = { ok: true, output: { approved: sig.approved === true, by: sig.by ?? null, comment: sig.comment ?? null, at: sig.at } };
      this.event(sig.approved ? "approval_granted" : "approval_rejected", {
        approvalId: sig.approvalId,
        stepId: rec.id,
        by: sig.by ?? null,
        comment: sig.comment ?? null,
      });
    } else if (sig.waitId !== undefined) {
      rec.result = { ok: true, output: sig.data ?? null };
      this.event("signal_received", { subject: sig.subject, seq: sig.seq ?? null, stepId: rec.id });
    } else {
      rec.result = { ok: true, output: sig.data ?? null };
      this.event("signal_received", { event: sig.event, stepId: rec.id });
    }
  }

  private cancelTimer(rec: WorkflowStepRecord): void {
    if (rec.timeoutTimer) delete this.s.timers[rec.timeoutTimer];
    delete rec.timeoutTimer;
  }

  // ---- interpretation -------------------------------------------------------------

  /** Starts what is ready; ends the run when the top-level steps are done or one failed for good. */
  advance(): void {
    const wf = this.s.workflow;
    if (this.s.status !== "running" || !wf) return;
    const o = this.sequence(wf.steps, { suffix: "", loops: [] });
    if (o.kind === "done") this.finish("completed", o.output);
    else if (o.kind === "failed") this.finish("failed", undefined, o.error);
  }

  private finish(status: RunStatus, output: unknown, error?: WireError): void {
    this.s.status = status;
    this.s.endedAt = this.now;
    if (error) this.s.error = error;
    else this.s.output = output;
    for (const id of Object.keys(this.s.dispatches)) delete this.s.dispatches[id];
    for (const id of Object.keys(this.s.timers)) delete this.s.timers[id];
    // Nothing runs on for an ended run (its dispatches and timers are gone): a step still
    // under way would otherwise show `running` forever in the status.
    for (const rec of Object.values(this.s.steps)) {
      if (settled(rec)) continue;
      rec.status = "cancelled";
      rec.endedAt = this.now;
    }
    // The end events wait for the retire timer's turn (announceEnd): published here, they
    // went out before this turn's state was committed, and a node killed in between left
    // `run_completed` seen by `--follow` and `events tail` while `workflow status` (the
    // committed state) still said running, with the last step running.
    this.s.endPending = true;
    this.effects.push({ kind: "clear_timers" });
    if (Object.values(this.s.steps).some((r) => r.waitId !== undefined)) this.effects.push({ kind: "clear_subject_waits" });
    this.timer("retire", this.now);
  }

  /** The end events of a run that ended in an earlier, committed turn (see `endPending`). */
  private announceEnd(): void {
    if (!this.s.endPending) return; // ended under a build that published them in the ending turn
    delete this.s.endPending;
    const { status, output, error, usage } = this.s;
    const durationMs = (this.s.endedAt ?? this.now) - this.s.createdAt;
    if (status === "completed") this.event("run_completed", { output, usage, durationMs });
    else if (status === "failed") this.event("run_failed", { error, usage, durationMs });
    else this.event("run_cancelled", { error, durationMs });
    this.event("run_stream_end", { status });
  }

  private sequence(steps: readonly StepDef[], scope: Scope): Outcome {
    let last: unknown = null;
    for (const step of steps) {
      const o = this.exec(step, scope);
      if (o.kind !== "done") return o;
      last = o.output;
    }
    return { kind: "done", output: last };
  }

  private exec(step: StepDef, scope: Scope): Outcome {
    const key = step.id + scope.suffix;
    let rec = this.s.steps[key];
    this.s.latest[step.id] = key;
    if (rec && settled(rec))
      return rec.status === "failed" ? { kind: "failed", error: rec.error!, retryable: false } : { kind: "done", output: rec.output ?? null };
    if (!rec) {
      rec = { key, id: step.id, type: step.type, status: "running", attempt: 1, startedAt: this.now };
      this.s.steps[key] = rec;
      this.event("step_started", { stepId: step.id, key, type: step.type, attempt: 1 });
    }
    if (rec.fallback) return this.fallback(step, rec, scope);
    let o: Outcome;
    try {
      o = this.run(step, rec, scope);
    } catch (err) {
      if (!(err instanceof TemplateError)) throw err;
      o = { kind: "failed", error: err.toWire(), retryable: false };
    }
    return o.kind === "pending" ? o : this.settle(step, rec, scope, o);
  }

  private run(step: StepDef, rec: WorkflowStepRecord, scope: Scope): Outcome {
    switch (step.type) {
      case "agent":
        return this.agent(step, rec, scope);
      case "parallel":
        return this.parallel(step, scope);
      case "branch":
        return this.branch(step, rec, scope);
      case "wait":
        return this.wait(step, rec, scope);
      case "loop":
        return this.loop(step, rec, scope);
      case "fail":
        return {
          kind: "failed",
          retryable: false,
          error: failure(WorkflowErrorCode.WORKFLOW_FAILED, renderTemplate(step.message, this.resolver(scope), step.id), { stepId: step.id }),
        };
    }
  }

  private settle(step: StepDef, rec: WorkflowStepRecord, scope: Scope, o: Outcome & { kind: "done" | "failed" }): Outcome {
    if (o.kind === "done") return this.complete(rec, o.output);
    const strategy = step.onError ?? { strategy: "abort" as const };
    if (strategy.strategy === "retry" && o.retryable && rec.attempt < strategy.attempts) {
      const delayMs = Math.min(strategy.maxBackoffMs, strategy.backoffMs * 2 ** (rec.attempt - 1));
      rec.status = "backoff";
      rec.error = o.error;
      this.timer("retry", this.now + delayMs, rec.key);
      this.event("step_retry", { stepId: step.id, key: rec.key, attempt: rec.attempt, nextAttempt: rec.attempt + 1, delayMs, error: o.error });
      return PENDING;
    }
    if (strategy.strategy === "skip") {
      rec.status = "skipped";
      rec.error = o.error;
      rec.output = null;
      rec.endedAt = this.now;
      this.event("step_skipped", { stepId: step.id, key: rec.key, error: o.error, attempts: rec.attempt });
      return { kind: "done", output: null };
    }
    if (strategy.strategy === "fallback") {
      rec.fallback = true;
      rec.error = o.error;
      this.event("step_fallback", { stepId: step.id, key: rec.key, fallback: strategy.step.id, error: o.error });
      return this.fallback(step, rec, scope);
    }
    return this.fail(rec, o.error);
  }

  private complete(rec: WorkflowStepRecord, output: unknown): Outcome {
    rec.status = "completed";
    rec.output = output;
    rec.endedAt = this.now;
    this.event("step_completed", {
      stepId: rec.id,
      key: rec.key,
      type: rec.type,
      attempts: rec.attempt,
      durationMs: rec.endedAt - rec.startedAt,
      ...(rec.fallback ? { fallback: true } : {}),
    });
    return { kind: "done", output };
  }

  private fail(rec: WorkflowStepRecord, error: WireError): Outcome {
    rec.status = "failed";
    rec.error = error;
    rec.endedAt = this.now;
    this.event("step_failed", { stepId: rec.id, key: rec.key, type: rec.type, attempts: rec.attempt, error });
    return { kind: "failed", error, retryable: false };
  }

  private fallback(step: StepDef, rec: WorkflowStepRecord, scope: Scope): Outcome {
    const fb = (step.onError as { step: StepDef }).step;
    const o = this.exec(fb, scope);
    if (o.kind === "pending") return o;
    if (o.kind === "done") {
      const fbRec = this.s.steps[fb.id + scope.suffix];
      if (fbRec) Object.assign(rec, pick(fbRec));
      return this.complete(rec, o.output);
    }
    return this.fail(rec, o.error);
  }

  private agent(step: AgentStep, rec: WorkflowStepRecord, scope: Scope): Outcome {
    const r = rec.result;
    if (r) {
      delete rec.result;
      if (!r.ok) return { kind: "failed", error: r.error, retryable: r.retryable };
      if (r.usage) rec.usage = r.usage;
      if (r.node) rec.node = r.node;
      return { kind: "done", output: r.output };
    }
    if (rec.status === "backoff" || rec.dispatchId !== undefined) return PENDING;
    if (rec.status === "retry") {
      rec.attempt += 1;
      rec.status = "running";
      this.event("step_started", { stepId: step.id, key: rec.key, type: step.type, attempt: rec.attempt });
    }
    // Rendered before anything is sent: a template error fails the step without a call.
    const input = renderTemplate(step.task, this.resolver(scope), step.id);
    const dispatchId = this.nextId("t");
    const childRunId = `${dispatchId}r`;
    rec.agent = step.agent;
    rec.dispatchId = dispatchId;
    rec.childRunId = childRunId;
    this.s.dispatches[dispatchId] = rec.key;
    this.effects.push({
      kind: "send",
      id: dispatchId,
      to: step.agent,
      payload: runPayload({ input, sessionId: this.s.sessionId, runId: childRunId, parentRunId: this.s.runId, constraints: step.constraints }),
    });
    this.event("child_run_linked", { childRunId, stepId: step.id, key: rec.key, agentId: step.agent, attempt: rec.attempt });
    if (step.timeoutMs !== undefined) rec.timeoutTimer = this.timer("timeout", this.now + step.timeoutMs, rec.key);
    return PENDING;
  }

  private parallel(step: ParallelStep, scope: Scope): Outcome {
    const outcomes = step.branches.map((b) => this.exec(b, scope));
    if (outcomes.some((o) => o.kind === "pending")) return PENDING;
    const failed = outcomes.flatMap((o, i) => (o.kind === "failed" ? [{ branch: step.branches[i]!.id, error: o.error }] : []));
    if (failed.length > 0) {
      return {
        kind: "failed",
        retryable: false,
        error: failure(
          WorkflowErrorCode.PARALLEL_FAILED,
          `${failed.length} of ${step.branches.length} branches failed: ${failed.map((f) => `${f.branch} (${f.error.message})`).join("; ")}`,
          { failed },
        ),
      };
    }
    return { kind: "done", output: outcomes.map((o) => (o as { output: unknown }).output) };
  }

  private branch(step: BranchStep, rec: WorkflowStepRecord, scope: Scope): Outcome {
    if (rec.arm === undefined) {
      const value = evaluateCondition(parseCondition(step.if, step.id), step.if, this.resolver(scope), step.id);
      rec.arm = truthy(value) ? "then" : step.whenFalse.length > 0 ? "else" : "none";
      this.event("branch_taken", { stepId: step.id, key: rec.key, arm: rec.arm });
    }
    if (rec.arm === "none") return { kind: "done", output: null };
    return this.sequence(rec.arm === "then" ? step.whenTrue : step.whenFalse, scope);
  }

  private wait(step: WaitStep, rec: WorkflowStepRecord, scope: Scope): Outcome {
    if (rec.result) {
      const r = rec.result;
      delete rec.result;
      rec.waiting = false;
      if (rec.waitId !== undefined) this.effects.push({ kind: "end_subject_wait", waitId: rec.waitId, subject: rec.subject! });
      return r.ok ? { kind: "done", output: r.output } : { kind: "failed", error: r.error, retryable: r.retryable };
    }
    if (rec.waiting) return PENDING;
    // Rendered and checked before the wait begins: a bad subject fails the step, nothing is captured.
    const subject = step.subject === undefined ? undefined : renderTemplate(step.subject, this.resolver(scope), step.id);
    if (subject !== undefined) {
      const problem = waitSubjectProblem(subject);
      if (problem) {
        return {
          kind: "failed",
          retryable: false,
          error: failure(
            WorkflowErrorCode.WAIT_SUBJECT_INVALID,
            `step ${step.id}: subject ${JSON.stringify(subject)} (from ${JSON.stringify(step.subject)}) ${problem}`,
            { stepId: step.id, subject },
          ),
        };
      }
    }
    rec.waiting = true;
    if (subject !== undefined) {
      rec.waitId = this.nextId("w");
      rec.subject = subject;
      this.effects.push({ kind: "subject_wait", waitId: rec.waitId, subject });
    }
    if (step.for === "timer") {
      this.timer("timer", this.now + step.durationMs!, rec.key);
      return PENDING;
    }
    if (step.for === "approval") {
      rec.approvalId = rec.key.replaceAll("@", ".");
      const message = step.message === undefined ? undefined : renderTemplate(step.message, this.resolver(scope), step.id);
      this.event("approval_requested", {
        approvalId: rec.approvalId,
        stepId: step.id,
        ...(message ? { message } : {}),
        ...(step.timeoutMs ? { timeoutMs: step.timeoutMs } : {}),
      });
    }
    if (step.timeoutMs !== undefined) rec.timeoutTimer = this.timer("timeout", this.now + step.timeoutMs, rec.key);
    const i = this.s.inbox.findIndex((sig) => matches(rec, sig, this.s.workflow));
    if (i >= 0) {
      const [sig] = this.s.inbox.splice(i, 1);
      this.deliver(rec, sig!);
      return this.wait(step, rec, scope);
    }
    return PENDING;
  }

  private loop(step: LoopStep, rec: WorkflowStepRecord, scope: Scope): Outcome {
    rec.iteration ??= 0;
    for (;;) {
      const i: number = rec.iteration ?? 0;
      const inner: Scope = { suffix: `${scope.suffix}@${i}`, loops: [...scope.loops, { id: step.id, iteration: i }] };
      if (!rec.begun) {
        if (i >= step.maxIterations) {
          rec.exhausted = true;
          return { kind: "done", output: rec.output ?? null };
        }
        if (step.while !== undefined && !truthy(evaluateCondition(parseCondition(step.while, step.id), step.while, this.resolver(inner), step.id))) {
          return { kind: "done", output: rec.output ?? null };
        }
        rec.begun = true;
        this.event("loop_iteration", { stepId: step.id, key: rec.key, iteration: i });
      }
      const o = this.sequence(step.steps, inner);
      if (o.kind !== "done") return o;
      rec.output = o.output;
      if (step.until !== undefined && truthy(evaluateCondition(parseCondition(step.until, step.id), step.until, this.resolver(inner), step.id))) {
        return { kind: "done", output: o.output };
      }
      rec.iteration = i + 1;
      rec.begun = false;
    }
  }

  // ---- templates ------------------------------------------------------------------

  /** Resolves template paths in a scope: inside a loop iteration, its own step runs first. */
  resolver(scope: Scope): PathResolver {
    return (segments) => {
      const [root, name, field, ...rest] = segments;
      switch (root) {
        case "input":
          return walk(this.s.input, segments.slice(1), "input");
        case "run":
          return walk({ id: this.s.runId, session: this.s.sessionId, workflow: this.s.workflow?.id }, segments.slice(1), "run");
        case "loop": {
          const inner = scope.loops.at(-1);
          if (!inner) return { missing: "loop is only defined inside a loop's steps" };
          return walk({ iteration: inner.iteration, index: inner.iteration, id: inner.id }, segments.slice(1), "loop");
        }
        default: {
          const rec = this.lookup(name!, scope);
          if (!rec) return { missing: `step ${name} has not run yet` };
          if (field === "status") return walk(rec.status, rest, `steps.${name}.status`);
          if (field === "metadata") return walk(stepMetadata(rec), rest, `steps.${name}.metadata`);
          if (field === "error") return walk(rec.error ?? null, rest, `steps.${name}.error`);
          if (!settled(rec)) return { missing: `step ${name} has not finished (status ${rec.status})` };
          return walk(rec.output ?? null, rest, `steps.${name}.output`);
        }
      }
    };
  }

  private lookup(id: string, scope: Scope): WorkflowStepRecord | undefined {
    for (let depth = scope.loops.length; depth >= 0; depth--) {
      const suffix = scope.loops
        .slice(0, depth)
        .map((l) => `@${l.iteration}`)
        .join("");
      const rec = this.s.steps[id + suffix];
      if (rec) return rec;
    }
    const latest = this.s.latest[id];
    return latest === undefined ? undefined : this.s.steps[latest];
  }
}

function pick(fb: WorkflowStepRecord): Partial<WorkflowStepRecord> {
  return {
    ...(fb.agent ? { agent: fb.agent } : {}),
    ...(fb.usage ? { usage: fb.usage } : {}),
    ...(fb.node ? { node: fb.node } : {}),
    ...(fb.childRunId ? { childRunId: fb.childRunId } : {}),
  };
}

function matches(rec: WorkflowStepRecord, sig: SignalRecord, wf: WorkflowDefinition | undefined): boolean {
  if (sig.approvalId !== undefined) return rec.approvalId === sig.approvalId;
  if (sig.waitId !== undefined) return rec.waitId === sig.waitId;
  if (sig.event === undefined || rec.type !== "wait") return false;
  const def = wf ? findStep(wf.steps, rec.id) : undefined;
  return def?.type === "wait" && def.for === "event" && def.event === sig.event;
}

function findStep(steps: readonly StepDef[], id: string): StepDef | undefined {
  for (const s of steps) {
    if (s.id === id) return s;
    const nested = s.type === "parallel" ? s.branches : s.type === "branch" ? [...s.whenTrue, ...s.whenFalse] : s.type === "loop" ? s.steps : [];
    const fb = s.onError?.strategy === "fallback" ? [s.onError.step] : [];
    const found = findStep([...nested, ...fb], id);
    if (found) return found;
  }
  return undefined;
}

/** A failure as a run reports it, from anything thrown. */
export function runError(err: unknown): WireError {
  return toWire(err);
}
