import { ErrorCode, checkFormatVersion, errorFamilyOf, type WireError } from "../core/index.js";
import { addUsage, ModelErrorCode, readUsage, ZERO_USAGE } from "../agents/index.js";
import { EvalErrorCode } from "./errors.js";
import { attemptId, judgeId, runnerActorId } from "./protocol.js";
import { OUTPUT_MAX_CHARS, type AttemptRecord, type AttemptStatus, type EvalUsage, type ExperimentStatus } from "./records.js";
import { cellRef, type ExperimentBudget, type ExperimentSpec, type VerifierSpec } from "./spec.js";
import { combineVerdicts, isDeterministic, judgePrompt, readJudgeReply, verifyAnswer, type Verdict } from "./verifiers.js";

/**
 * The experiment's scheduler as a pure state machine (like the workflow's RunEngine): each
 * message the experiment's actor gets is applied here to its state, which is the actor's
 * checkpoint, and the engine says what to do as effects — delegations to send, records to
 * write, events to publish, a watchdog timer to set, attempts to interrupt. The actor
 * performs the effects in one journaled step whose every effect is keyed by ids derived from
 * the experiment, the cell and the attempt, so a turn replayed after a crash repeats none.
 * Nothing here reads a clock or does I/O: `now` is the turn's.
 */

/**
 * Format version of the experiment's state (its checkpoint). v2: the state may carry an
 * `outbox`, the last turn's effects left to land after its checkpoint. A build that reads
 * only 1 would ignore it and could lose them, so only a state with an outbox is written as
 * 2; every other one stays 1, which the build before 2 still reads.
 */
export const EXPERIMENT_STATE_VERSION = 2;
/** The version of a state without an outbox. */
export const PLAIN_STATE_VERSION = 1;
const STATE_READABLE: readonly number[] = [1, 2];

/** One cell in flight: its subject's delegation, then (with judges) each judge's. */
export interface InFlight {
  cell: number;
  attempt: number;
  /** Experiment-wide slot, 0 … concurrency-1 (the judge runner it uses). */
  slot: number;
  /** Slot among its subject's cells in flight (the subject runner it uses). */
  subjectSlot: number;
  phase: "subject" | "judge";
  /** The judge verifier being asked (its index in the spec's verifiers). */
  judge?: number;
  judgeTry?: number;
  /** The delegation in flight (message id = run id) and where it went. */
  messageId: string;
  to: string;
  /** When the attempt's subject delegation was sent. */
  startedAt: number;
  /** When the current delegation times out. */
  deadline: number;
  /** The subject's usage and the judges' so far, while judges run. */
  usage?: EvalUsage;
  judgeUsage?: EvalUsage;
}

export interface ExperimentState {
  v: number;
  experimentId: string;
  status: ExperimentStatus;
  digest: string;
  owner?: string;
  createdAt: number;
  startedAt?: number;
  /** When the current run began (start or the last resume): the wall-time budget counts from here. */
  runningSince?: number;
  endedAt?: number;
  stopReason?: { code: string; message: string };
  cells: number;
  /**
   * Per cell, one character: `.` not started, `r` in flight, `q` waiting for a replacement
   * attempt (or a resumed run), `d` done (a valid attempt), `e` error (every attempt failed
   * for the infrastructure), `c` cut by a cancel or the budget (runs again on resume).
   */
  cellStatus: string;
  /** Per cell, the attempts made (base 36). */
  attempts: string;
  /** Per cell, the attempts that failed for the infrastructure (base 36). */
  failures: string;
  /** Per subject, the next of its cells never dispatched (offset within its block). */
  next: number[];
  /** Cells waiting for a replacement attempt, oldest first. */
  retry: number[];
  /** Round-robin position: the subject that picks first in the next dispatch round. */
  rr: number;
  inflight: Record<string, InFlight>;
  spent: EvalUsage;
  judgeSpent: EvalUsage;
  /** Cells with a valid attempt, and cells that ended `error`. */
  done: number;
  errors: number;
  timer?: { id: string; due: number };
  timers: number;
  /** Runs so far: 1 after the start, one more per resume (names each run's end event). */
  round: number;
  budget: ExperimentBudget;
  error?: WireError;
  /**
   * The effects of the last turn when it left them to land after its checkpoint (`of`: its
   * message's id; docs/evals.md, "Execution"): the next turn with effects waits for them
   * where they were sent, or performs them again (they are keyed) on a host that did not
   * send them, before its own. Format v2.
   */
  outbox?: { of: string; effects: Effect[] };
}

/** The state of an experiment that has not started. */
export function emptyExperimentState(experimentId: string, now: number): ExperimentState {
  return {
    v: PLAIN_STATE_VERSION,
    experimentId,
    status: "new",
    digest: "",
    createdAt: now,
    cells: 0,
    cellStatus: "",
    attempts: "",
    failures: "",
    next: [],
    retry: [],
    rr: 0,
    inflight: {},
    spent: { ...ZERO_USAGE },
    judgeSpent: { ...ZERO_USAGE },
    done: 0,
    errors: 0,
    timers: 0,
    round: 0,
    budget: {},
  };
}

/** @throws UnsupportedFormatError for the state of an experiment a newer Kova advanced */
export function readExperimentState(actorId: string, value: unknown): ExperimentState {
  checkFormatVersion(`experiment state of ${actorId}`, (value as { v?: unknown } | null)?.v, STATE_READABLE);
  return value as ExperimentState;
}

export type Effect =
  /** A delegation: a `task_delegate` with message id and run id `id`, in the experiment's session, replying to its inbox. */
  | { kind: "send"; to: string; id: string; input: string }
  | { kind: "record"; record: AttemptRecord }
  | { kind: "event"; type: string; data: Record<string, unknown>; key: string }
  /** Write the experiment's status record. */
  | { kind: "status" }
  | { kind: "timer"; timerId: string; due: number }
  | { kind: "clear_timers" }
  | { kind: "interrupt"; to: string; messageId: string };

/** What a delegation's `result_notify` brought: its payload (the agent protocol's result) or the error its actor failed with. */
export interface Answer {
  payload: unknown;
  error?: WireError;
}

/** An answer, classified once: the subject's result, or an infrastructure failure to replace. */
export type Outcome =
  | { kind: "completed"; output: string; usage: EvalUsage; node?: string }
  | { kind: "failed"; reason: { code: string; message: string; retryable?: boolean }; usage: EvalUsage; node?: string }
  | { kind: "infra"; reason: { code: string; message: string; retryable?: boolean }; usage: EvalUsage; node?: string };

/**
 * Codes of a run's failure that are not the subject's doing though they are not the
 * cluster's either: a model call that failed after its retries, a defect, a run cut by
 * someone else, an external subject that failed. With the infrastructure's own (core's
 * ErrorFamily: timeouts, the WAL, NATS, a lease, the step journal) the attempt is replaced.
 */
const NOT_THE_SUBJECTS: ReadonlySet<string> = new Set([
  ModelErrorCode.MODEL_CALL_FAILED,
  ModelErrorCode.MODEL_CALL_ABORTED,
  ModelErrorCode.MODEL_SCHEDULER_CLOSED,
  ErrorCode.INTERNAL,
  ErrorCode.INTERRUPTED,
  EvalErrorCode.EVAL_EXTERNAL_FAILED,
]);

function isNotTheSubjects(code: string): boolean {
  return errorFamilyOf(code) === "infrastructure" || NOT_THE_SUBJECTS.has(code);
}

/**
 * Classifies what came back for a delegation. A run that failed with a code of the
 * infrastructure's family or of NOT_THE_SUBJECTS (NATS, a lease, the journal, a model call
 * that failed after its retries), one cancelled by anybody else than the experiment, and a message its actor failed on
 * are infrastructure failures; any other failure is the subject's own — unless the failure
 * says it is not retryable (a provider's 4xx), which is always the subject's.
 */
export function classifyAnswer(a: Answer): Outcome {
  const p = (typeof a.payload === "object" && a.payload !== null ? a.payload : {}) as Record<string, unknown>;
  const usage = readUsage(p.usage);
  const node = typeof p.node === "string" ? { node: p.node } : {};
  if (a.error) return { kind: "infra", reason: reasonOf(a.error), usage, ...node };
  const err = (typeof p.error === "object" && p.error !== null ? p.error : undefined) as Record<string, unknown> | undefined;
  const reason = err ? reasonOf(err) : undefined;
  switch (p.status) {
    case "completed":
      return { kind: "completed", output: typeof p.output === "string" ? p.output : JSON.stringify(p.output ?? ""), usage, ...node };
    case "cancelled":
      return { kind: "infra", reason: reason ?? { code: ErrorCode.INTERRUPTED, message: "the run was cancelled" }, usage, ...node };
    case "failed": {
      const r = reason ?? { code: ErrorCode.INTERNAL, message: "the run failed without saying why" };
      const infra = r.retryable !== false && isNotTheSubjects(r.code);
      return { kind: infra ? "infra" : "failed", reason: r, usage, ...node };
    }
    default:
      return {
        kind: "infra",
        reason: { code: ErrorCode.INTERNAL, message: `the answer is not an agent's result (status ${JSON.stringify(p.status)})` },
        usage,
        ...node,
      };
  }
}

function reasonOf(e: Record<string, unknown> | WireError): { code: string; message: string; retryable?: boolean } {
  const code = typeof e.code === "string" ? e.code : ErrorCode.INTERNAL;
  const message = typeof e.message === "string" ? e.message : "";
  return typeof e.retryable === "boolean" ? { code, message, retryable: e.retryable } : { code, message };
}

function charAt(s: string, i: number): number {
  return Number.parseInt(s[i] ?? "0", 36);
}

function withChar(s: string, i: number, c: string): string {
  return s.slice(0, i) + c + s.slice(i + 1);
}

function bump(s: string, i: number): string {
  return withChar(s, i, Math.min(35, charAt(s, i) + 1).toString(36));
}

function totalTokens(u: EvalUsage): number {
  return u.inputTokens + u.outputTokens;
}

export class ExperimentEngine {
  readonly effects: Effect[] = [];

  constructor(
    readonly s: ExperimentState,
    readonly spec: ExperimentSpec,
    readonly now: number,
  ) {}

  /** Starts a new experiment (nothing when it started already). */
  start(digest: string, owner?: string): boolean {
    const s = this.s;
    if (s.status !== "new") return false;
    const n = this.spec.subjects.length * this.spec.tasks.length * this.spec.repetitions;
    Object.assign(s, {
      status: "running",
      digest,
      ...(owner ? { owner } : {}),
      startedAt: this.now,
      runningSince: this.now,
      cells: n,
      cellStatus: ".".repeat(n),
      attempts: "0".repeat(n),
      failures: "0".repeat(n),
      next: this.spec.subjects.map(() => 0),
      round: 1,
      budget: { ...this.spec.budget },
    } satisfies Partial<ExperimentState>);
    this.effects.push({ kind: "status" });
    this.event("eval_started", "started", {
      name: this.spec.name,
      cells: n,
      subjects: this.spec.subjects.map((x) => x.id),
      tasks: this.spec.tasks.length,
      repetitions: this.spec.repetitions,
      budget: s.budget,
      startedAt: this.now,
      round: s.round,
    });
    return true;
  }

  /** Refuses a new experiment (its spec does not fit the cluster): it ends `failed` with the error. */
  reject(digest: string, error: WireError, owner?: string): boolean {
    const s = this.s;
    if (s.status !== "new") return false;
    Object.assign(s, { digest, ...(owner ? { owner } : {}), startedAt: this.now, error, stopReason: { code: error.code, message: error.message } });
    this.end("failed");
    return true;
  }

  /** The cell in flight whose current delegation has this message id. */
  inFlight(messageId: string | undefined): InFlight | undefined {
    if (messageId === undefined) return undefined;
    return Object.values(this.s.inflight).find((f) => f.messageId === messageId);
  }

  /**
   * Applies a delegation's answer.
   * @param codeVerdicts the code verifiers' verdicts on a completed subject answer (run by the actor, journaled)
   * @param pending for a judge's answer: the attempt's record in progress (status `judging`)
   * @returns false for an answer to nothing in flight (late, or a duplicate)
   */
  result(messageId: string | undefined, answer: Answer, extra: { codeVerdicts?: Verdict[]; pending?: AttemptRecord } = {}): boolean {
    const f = this.inFlight(messageId);
    if (!f || this.s.status !== "running") return false;
    const outcome = classifyAnswer(answer);
    if (f.phase === "subject") this.subjectAnswered(f, outcome, extra.codeVerdicts ?? []);
    else this.judgeAnswered(f, outcome, extra.pending);
    return true;
  }

  private subjectAnswered(f: InFlight, o: Outcome, codeVerdicts: Verdict[]): void {
    const s = this.s;
    s.spent = addUsage(s.spent, o.usage);
    const node = o.node === undefined ? {} : { node: o.node };
    if (o.kind === "infra") {
      this.attemptFailed(f, "infra_error", o.reason, o.usage, undefined, o.node);
      return;
    }
    if (o.kind === "failed") {
      this.finish(f, { status: "failed", score: 0, pass: false, verifiers: [], reason: o.reason, usage: o.usage, ...node });
      return;
    }
    const task = this.spec.tasks[cellRef(this.spec, f.cell).task]!;
    const verdicts = this.spec.verifiers.flatMap((v): Verdict[] => {
      if (isDeterministic(v)) return [verifyAnswer(v, o.output, task)];
      if (v.type === "code") return codeVerdicts.filter((d) => d.id === v.id);
      return [];
    });
    const { text, truncated } = capOutput(o.output);
    const answered = { verifiers: verdicts, output: text, truncated, reason: null, usage: o.usage, ...node };
    const firstJudge = this.nextJudge(-1);
    if (firstJudge === undefined) {
      this.finish(f, { status: "completed", ...combineVerdicts(this.spec.verifiers, verdicts), ...answered });
      return;
    }
    const pending = this.record(f, { status: "judging", score: null, pass: null, ...answered });
    this.effects.push({ kind: "record", record: pending });
    f.usage = o.usage;
    f.judgeUsage = { ...ZERO_USAGE };
    this.askJudge(f, firstJudge, 1, pending);
  }

  private judgeAnswered(f: InFlight, o: Outcome, pending: AttemptRecord | undefined): void {
    const s = this.s;
    s.judgeSpent = addUsage(s.judgeSpent, o.usage);
    f.judgeUsage = addUsage(f.judgeUsage ?? { ...ZERO_USAGE }, o.usage);
    const v = this.spec.verifiers[f.judge!] as Extract<VerifierSpec, { type: "judge" }>;
    if (!pending) {
      // The answer waiting for its judge is gone from KV (removed by hand): the attempt cannot be finished.
      this.attemptFailed(
        f,
        "infra_error",
        { code: ErrorCode.INTERNAL, message: "the attempt's record waiting for its judge is missing" },
        f.usage ?? ZERO_USAGE,
        f.judgeUsage,
      );
      return;
    }
    if (o.kind === "infra") {
      this.judgeFailed(f, o.reason, pending);
      return;
    }
    const verdict: Verdict =
      o.kind === "failed"
        ? { id: v.id, type: v.type, score: 0, pass: false, reason: `the judge's run failed: ${o.reason.message} [${o.reason.code}]` }
        : (readJudgeReply(v, o.output) ?? {
            id: v.id,
            type: v.type,
            score: 0,
            pass: false,
            reason: `${EvalErrorCode.EVAL_JUDGE_UNREADABLE}: the judge gave no {"score": 0…1} in ${JSON.stringify(o.output.slice(0, 80))}`,
          });
    const verdicts = [...pending.verifiers, verdict];
    const next = this.nextJudge(f.judge!);
    if (next !== undefined) {
      const updated: AttemptRecord = { ...pending, verifiers: verdicts, judgeUsage: f.judgeUsage };
      this.effects.push({ kind: "record", record: updated });
      this.askJudge(f, next, 1, updated);
      return;
    }
    const order = new Map(this.spec.verifiers.map((x, i) => [x.id, i]));
    verdicts.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
    this.finish(f, {
      status: "completed",
      ...combineVerdicts(this.spec.verifiers, verdicts),
      verifiers: verdicts,
      ...(pending.output === undefined ? {} : { output: pending.output }),
      truncated: pending.outputTruncated === true,
      reason: null,
      usage: pending.usage,
      judgeUsage: f.judgeUsage,
      ...(pending.node === undefined ? {} : { node: pending.node }),
    });
  }

  /** A judge failed for the infrastructure: ask it again, within max_attempts, else the attempt fails. */
  private judgeFailed(f: InFlight, reason: { code: string; message: string }, pending: AttemptRecord): void {
    if ((f.judgeTry ?? 1) < this.spec.maxAttempts) {
      this.askJudge(f, f.judge!, (f.judgeTry ?? 1) + 1, pending);
      return;
    }
    this.attemptFailed(
      f,
      "infra_error",
      { code: reason.code, message: `judge ${this.spec.verifiers[f.judge!]!.id}: ${reason.message}` },
      pending.usage,
      f.judgeUsage,
    );
  }

  private nextJudge(after: number): number | undefined {
    for (let i = after + 1; i < this.spec.verifiers.length; i++) if (this.spec.verifiers[i]!.type === "judge") return i;
    return undefined;
  }

  private askJudge(f: InFlight, verifier: number, attemptOfJudge: number, pending: AttemptRecord): void {
    const v = this.spec.verifiers[verifier] as Extract<VerifierSpec, { type: "judge" }>;
    const task = this.spec.tasks[cellRef(this.spec, f.cell).task]!;
    Object.assign(f, {
      phase: "judge",
      judge: verifier,
      judgeTry: attemptOfJudge,
      messageId: judgeId(this.s.experimentId, f.cell, f.attempt, verifier, attemptOfJudge),
      to: runnerActorId({ experimentId: this.s.experimentId, role: "j", index: verifier, slot: f.slot }),
      deadline: this.now + this.spec.timeoutMs,
    } satisfies Partial<InFlight>);
    this.effects.push({ kind: "send", to: f.to, id: f.messageId, input: judgePrompt(v, task, pending.output ?? "") });
  }

  /** The judge-phase cells whose judge is past its deadline: the actor reads their records in progress before `timerFired`. */
  overdueJudges(): InFlight[] {
    return Object.values(this.s.inflight).filter((f) => f.phase === "judge" && f.deadline <= this.now);
  }

  /**
   * The watchdog: attempts past their timeout are interrupted and replaced (a judge past
   * its timeout is asked again), and the wall-time budget is checked (in `advance`).
   * @param pending the records in progress of `overdueJudges()`, by cell
   */
  timerFired(timerId: string, pending: ReadonlyMap<number, AttemptRecord> = new Map()): boolean {
    const s = this.s;
    if (s.timer?.id === timerId) delete s.timer;
    if (s.status !== "running") return false;
    const reason = { code: EvalErrorCode.EVAL_ATTEMPT_TIMEOUT, message: `no answer within the experiment's timeout (${this.spec.timeoutMs} ms)` };
    for (const f of Object.values(s.inflight)) {
      if (f.deadline > this.now) continue;
      this.effects.push({ kind: "interrupt", to: f.to, messageId: f.messageId });
      if (f.phase === "subject") this.attemptFailed(f, "timeout", reason, ZERO_USAGE);
      else {
        const p = pending.get(f.cell);
        if (p) this.judgeFailed(f, reason, p);
        else this.attemptFailed(f, "timeout", reason, f.usage ?? ZERO_USAGE, f.judgeUsage);
      }
    }
    return true;
  }

  /** Stops a running experiment: what is in flight is interrupted and recorded `cancelled`. */
  cancel(reason?: string, by?: string): boolean {
    if (this.s.status !== "running") return false;
    this.stop("cancelled", { code: EvalErrorCode.EVAL_CANCELLED, message: `cancelled${by ? ` by ${by}` : ""}${reason ? `: ${reason}` : ""}` });
    return true;
  }

  /**
   * Continues a stopped experiment (cancelled, or at its budget): the cells it cut run again
   * with a new attempt, the cells never started after them.
   * @param budget replaces the experiment's budget (otherwise one at its limit stops again at once)
   */
  resume(budget?: ExperimentBudget): boolean {
    const s = this.s;
    if (s.status !== "cancelled" && s.status !== "budget_exhausted") return false;
    s.status = "running";
    s.runningSince = this.now;
    s.round += 1;
    delete s.endedAt;
    delete s.stopReason;
    if (budget) s.budget = { ...budget };
    for (let i = 0; i < s.cells; i++) {
      if (s.cellStatus[i] !== "c") continue;
      s.cellStatus = withChar(s.cellStatus, i, "q");
      s.retry.push(i);
    }
    this.effects.push({ kind: "status" });
    this.event("eval_resumed", `resumed-${s.round}`, { budget: s.budget, done: s.done, errors: s.errors, total: s.cells, round: s.round });
    return true;
  }

  /** Dispatches what the limits allow, ends a finished experiment, and arms the watchdog. */
  advance(): void {
    const s = this.s;
    if (s.status !== "running") return;
    const stop = this.budgetReached();
    if (stop) {
      this.stop("budget_exhausted", stop);
      return;
    }
    const S = this.spec.subjects.length;
    const inFlight = () => Object.keys(s.inflight).length;
    let idle = 0;
    while (inFlight() < this.spec.concurrency && idle < S) {
      const subject = s.rr % S;
      s.rr = (subject + 1) % S;
      const cell = this.capacity(subject) > 0 ? this.takeWork(subject) : undefined;
      if (cell === undefined) {
        idle++;
        continue;
      }
      idle = 0;
      this.dispatch(cell, subject);
    }
    if (inFlight() === 0 && s.retry.length === 0 && s.next.every((n) => n >= this.spec.tasks.length * this.spec.repetitions)) {
      this.end("completed");
      return;
    }
    this.armTimer();
  }

  private capacity(subject: number): number {
    const cap = this.spec.subjects[subject]!.kind === "actor" ? 1 : this.spec.perSubject;
    return cap - this.subjectSlots(subject).size;
  }

  private subjectSlots(subject: number): Set<number> {
    const per = this.spec.tasks.length * this.spec.repetitions;
    return new Set(
      Object.values(this.s.inflight)
        .filter((f) => Math.floor(f.cell / per) === subject)
        .map((f) => f.subjectSlot),
    );
  }

  private takeWork(subject: number): number | undefined {
    const s = this.s;
    const per = this.spec.tasks.length * this.spec.repetitions;
    const r = s.retry.findIndex((c) => Math.floor(c / per) === subject);
    if (r >= 0) return s.retry.splice(r, 1)[0]!;
    if (s.next[subject]! >= per) return undefined;
    const cell = subject * per + s.next[subject]!;
    s.next[subject]! += 1;
    return cell;
  }

  private dispatch(cell: number, subject: number): void {
    const s = this.s;
    const attempt = charAt(s.attempts, cell) + 1;
    s.attempts = bump(s.attempts, cell);
    s.cellStatus = withChar(s.cellStatus, cell, "r");
    const used = new Set(Object.values(s.inflight).map((f) => f.slot));
    const slot = firstFree(used);
    const subjectSlot = firstFree(this.subjectSlots(subject));
    const spec = this.spec.subjects[subject]!;
    const id = attemptId(s.experimentId, cell, attempt);
    const to = spec.kind === "actor" ? spec.actor : runnerActorId({ experimentId: s.experimentId, role: "s", index: subject, slot: subjectSlot });
    s.inflight[String(cell)] = {
      cell,
      attempt,
      slot,
      subjectSlot,
      phase: "subject",
      messageId: id,
      to,
      startedAt: this.now,
      deadline: this.now + this.spec.timeoutMs,
    };
    this.effects.push({ kind: "send", to, id, input: this.spec.tasks[cellRef(this.spec, cell).task]!.input });
  }

  private budgetReached(): { code: string; message: string } | undefined {
    const { budget, spent, judgeSpent, runningSince } = this.s;
    const tokens = totalTokens(spent) + totalTokens(judgeSpent);
    if (budget.maxTokens !== undefined && tokens >= budget.maxTokens) {
      return { code: EvalErrorCode.EVAL_BUDGET_EXHAUSTED, message: `max_tokens: ${tokens} tokens used of ${budget.maxTokens}` };
    }
    const cost = round((spent.costUsd ?? 0) + (judgeSpent.costUsd ?? 0));
    if (budget.maxCostUsd !== undefined && cost >= budget.maxCostUsd) {
      return { code: EvalErrorCode.EVAL_BUDGET_EXHAUSTED, message: `max_cost_usd: $${cost} spent of $${budget.maxCostUsd}` };
    }
    if (budget.maxWallTimeMs !== undefined && runningSince !== undefined && this.now - runningSince >= budget.maxWallTimeMs) {
      return { code: EvalErrorCode.EVAL_BUDGET_EXHAUSTED, message: `max_wall_time: ran ${this.now - runningSince} ms of ${budget.maxWallTimeMs}` };
    }
    return undefined;
  }

  private armTimer(): void {
    const s = this.s;
    let due = Math.min(...Object.values(s.inflight).map((f) => f.deadline));
    if (s.budget.maxWallTimeMs !== undefined && s.runningSince !== undefined) due = Math.min(due, s.runningSince + s.budget.maxWallTimeMs);
    if (!Number.isFinite(due) || (s.timer && s.timer.due <= due)) return;
    const id = `${s.experimentId}-w${s.timers}`;
    s.timers += 1;
    s.timer = { id, due };
    this.effects.push({ kind: "timer", timerId: id, due });
  }

  private stop(status: "cancelled" | "budget_exhausted", reason: { code: string; message: string }): void {
    const s = this.s;
    for (const f of Object.values(s.inflight)) {
      this.effects.push({ kind: "interrupt", to: f.to, messageId: f.messageId });
      const record = this.record(f, {
        status: "cancelled",
        score: null,
        pass: null,
        verifiers: [],
        reason,
        usage: f.usage ?? ZERO_USAGE,
        ...(f.judgeUsage ? { judgeUsage: f.judgeUsage } : {}),
      });
      this.effects.push({ kind: "record", record });
      this.progress(record);
      s.cellStatus = withChar(s.cellStatus, f.cell, "c");
    }
    s.inflight = {};
    // Cells waiting for a replacement are cut too: resume runs them.
    for (const c of s.retry) s.cellStatus = withChar(s.cellStatus, c, "c");
    s.retry = [];
    s.stopReason = reason;
    this.end(status);
  }

  private end(status: ExperimentStatus): void {
    const s = this.s;
    s.status = status;
    s.endedAt = this.now;
    delete s.timer;
    this.effects.push({ kind: "status" }, { kind: "clear_timers" });
    const key = `ended-${s.round}`;
    this.event("eval_ended", key, {
      status,
      ...(s.stopReason ? { stopReason: s.stopReason } : {}),
      done: s.done,
      errors: s.errors,
      total: s.cells,
      spent: addUsage(s.spent, s.judgeSpent),
      judgeSpent: s.judgeSpent,
      round: s.round,
    });
    this.event("run_stream_end", key, { status, round: s.round });
  }

  /** An attempt that failed for the infrastructure: replaced, unless the cell has used its attempts. */
  private attemptFailed(
    f: InFlight,
    status: "infra_error" | "timeout",
    reason: { code: string; message: string },
    usage: EvalUsage,
    judgeUsage?: EvalUsage,
    node?: string,
  ): void {
    const s = this.s;
    const record = this.record(f, {
      status,
      score: null,
      pass: null,
      verifiers: [],
      reason,
      usage,
      ...(judgeUsage ? { judgeUsage } : {}),
      ...(node ? { node } : {}),
    });
    this.effects.push({ kind: "record", record });
    delete s.inflight[String(f.cell)];
    s.failures = bump(s.failures, f.cell);
    if (charAt(s.failures, f.cell) < this.spec.maxAttempts && charAt(s.attempts, f.cell) < 35) {
      s.cellStatus = withChar(s.cellStatus, f.cell, "q");
      s.retry.push(f.cell);
    } else {
      s.cellStatus = withChar(s.cellStatus, f.cell, "e");
      s.errors += 1;
    }
    this.progress(record);
  }

  /** A valid attempt: the cell's result. */
  private finish(f: InFlight, r: RecordFields): void {
    const s = this.s;
    const record = this.record(f, r);
    this.effects.push({ kind: "record", record });
    delete s.inflight[String(f.cell)];
    s.cellStatus = withChar(s.cellStatus, f.cell, "d");
    s.done += 1;
    this.progress(record);
  }

  private record(f: InFlight, r: RecordFields): AttemptRecord {
    const ref = cellRef(this.spec, f.cell);
    const { truncated, ...rest } = r;
    return {
      v: 1,
      experimentId: this.s.experimentId,
      cell: f.cell,
      subject: this.spec.subjects[ref.subject]!.id,
      task: this.spec.tasks[ref.task]!.id,
      repetition: ref.repetition,
      attempt: f.attempt,
      ...rest,
      ...(truncated ? { outputTruncated: true } : {}),
      valid: r.status === "completed" || r.status === "failed",
      durationMs: Math.max(0, this.now - f.startedAt),
      startedAt: f.startedAt,
      endedAt: this.now,
      runId: attemptId(this.s.experimentId, f.cell, f.attempt),
    };
  }

  private progress(r: AttemptRecord): void {
    const s = this.s;
    this.event("eval_attempt", `c${r.cell}-a${r.attempt}`, {
      cell: r.cell,
      subject: r.subject,
      task: r.task,
      repetition: r.repetition,
      attempt: r.attempt,
      status: r.status,
      score: r.score,
      pass: r.pass,
      ...(r.reason ? { reason: r.reason.code } : {}),
      usage: r.usage,
      ...(r.judgeUsage ? { judgeUsage: r.judgeUsage } : {}),
      durationMs: r.durationMs,
      done: s.done,
      errors: s.errors,
      total: s.cells,
      spent: addUsage(s.spent, s.judgeSpent),
      runningSince: s.runningSince,
    });
  }

  private event(type: string, key: string, data: Record<string, unknown>): void {
    this.effects.push({ kind: "event", type, key, data: { experimentId: this.s.experimentId, ...data } });
  }
}

type RecordFields = Pick<AttemptRecord, "status" | "score" | "pass" | "verifiers" | "reason" | "usage"> & {
  status: AttemptStatus;
  output?: string;
  truncated?: boolean;
  judgeUsage?: EvalUsage;
  node?: string;
};

function firstFree(used: ReadonlySet<number>): number {
  let i = 0;
  while (used.has(i)) i++;
  return i;
}

function capOutput(output: string): { text: string; truncated: boolean } {
  return output.length > OUTPUT_MAX_CHARS ? { text: output.slice(0, OUTPUT_MAX_CHARS), truncated: true } : { text: output, truncated: false };
}

function round(x: number): number {
  return Math.round(x * 1e9) / 1e9;
}
