import { describe, expect, it } from "vitest";
import {
  authoritative,
  classifyAnswer,
  compareSubjects,
  defineExperiment,
  emptyExperimentState,
  evalExperimentActor,
  ExperimentEngine,
  passAtK,
  summarize,
  tInterval,
  type AttemptRecord,
  type Effect,
  type ExperimentActorPorts,
  type ExperimentSpec,
  type ExperimentState,
  type SpecCache,
} from "../../src/eval/index.js";
import type { A2AEnvelope } from "../../src/bus/index.js";
// The node that classifies answers hosts a WAL: its layer files the WAL's codes (infrastructure).
import { WalErrorCode } from "../../src/wal/errors.js";

function spec(over: Record<string, unknown> = {}, subjects = 2, tasks = 4): ExperimentSpec {
  return defineExperiment({
    experiment: { name: "e", concurrency: 4, per_subject: 3, timeout: "10s", max_attempts: 2, ...over },
    subjects: Array.from({ length: subjects }, (_, i) => ({ id: `s${i}`, agent: "helper" })),
    tasks: Array.from({ length: tasks }, (_, i) => ({ id: `t${i}`, input: `q${i}`, expected: String(i) })),
    verifiers: [{ type: "exact" }],
  });
}

/** Runs `apply` as one turn at `now` and returns the state and the effects. */
function turn(s: ExperimentState, sp: ExperimentSpec, now: number, apply: (e: ExperimentEngine) => unknown): Effect[] {
  const e = new ExperimentEngine(s, sp, now);
  apply(e);
  e.advance();
  return e.effects;
}

const sends = (effects: Effect[]) => effects.filter((e): e is Extract<Effect, { kind: "send" }> => e.kind === "send");
const answer = (output: string, usage = { inputTokens: 10, outputTokens: 2 }) => ({
  payload: { status: "completed", output, usage, runId: "r", sessionId: "s" },
});

describe("experiment engine", () => {
  it("eval - dispatch is fair and bounded: round-robin over subjects, at most per_subject each and concurrency overall, repetition-major", () => {
    const sp = spec({ repetitions: 2, concurrency: 5, per_subject: 3 }, 3, 2);
    const s = emptyExperimentState("e-00000001", 0);
    const first = sends(turn(s, sp, 1000, (e) => e.start("d")));
    // 5 in flight: subjects 0,1,2,0,1 (each takes one per round), subject 2 left with room
    expect(first.map((x) => x.to)).toEqual([
      "eval-subject--e-00000001-s0-0",
      "eval-subject--e-00000001-s1-0",
      "eval-subject--e-00000001-s2-0",
      "eval-subject--e-00000001-s0-1",
      "eval-subject--e-00000001-s1-1",
    ]);
    expect(first.map((x) => x.id)).toEqual(["e-00000001-c0-a1", "e-00000001-c4-a1", "e-00000001-c8-a1", "e-00000001-c1-a1", "e-00000001-c5-a1"]);
    // one answer frees one slot: the next pick goes round-robin from where it stopped (subject 2)
    const next = sends(turn(s, sp, 1100, (e) => e.result("e-00000001-c0-a1", answer("0"))));
    expect(next.map((x) => `${x.id}→${x.to}`)).toEqual(["e-00000001-c9-a1→eval-subject--e-00000001-s2-1"]);
    expect(s.done).toBe(1);
    expect(Object.keys(s.inflight)).toHaveLength(5);
  });

  it("eval - an actor subject takes one cell at a time", () => {
    const sp = defineExperiment({
      experiment: { name: "e", concurrency: 8 },
      subjects: [{ id: "swarm", actor: "planner" }],
      tasks: [
        { input: "a", expected: "1" },
        { input: "b", expected: "2" },
      ],
      verifiers: [{ type: "exact" }],
    });
    const s = emptyExperimentState("e-00000002", 0);
    expect(sends(turn(s, sp, 1, (e) => e.start("d"))).map((x) => x.to)).toEqual(["planner"]);
  });

  it("eval - answers are classified once: the subject's failures are results, the infrastructure's are replaced", () => {
    const failed = (code: string, extra: object = {}) =>
      classifyAnswer({ payload: { status: "failed", error: { code, message: "m", ...extra }, usage: { inputTokens: 1, outputTokens: 0 } } });
    expect(failed("RUN_LIMIT_EXCEEDED").kind).toBe("failed");
    expect(failed("TOOL_ARGUMENTS_INVALID").kind).toBe("failed");
    expect(failed("MODEL_CALL_FAILED").kind).toBe("infra");
    expect(failed("MODEL_CALL_FAILED", { retryable: false }).kind).toBe("failed");
    expect(failed(WalErrorCode.WAL_FAILED).kind).toBe("infra");
    expect(failed("JOURNAL_UNAVAILABLE", { retryable: true }).kind).toBe("infra");
    expect(failed("TIMEOUT", { retryable: true }).kind).toBe("infra");
    expect(failed("EVAL_EXTERNAL_FAILED", { retryable: true }).kind).toBe("infra");
    expect(classifyAnswer({ payload: { status: "cancelled" } }).kind).toBe("infra");
    expect(classifyAnswer({ payload: null, error: { code: "ACTOR_FAILED", message: "x", retryable: false } }).kind).toBe("infra");
    expect(classifyAnswer(answer("hi"))).toEqual({ kind: "completed", output: "hi", usage: { inputTokens: 10, outputTokens: 2 } });
  });

  it("eval - replacement attempts up to max_attempts, then the cell ends in error; a timeout interrupts the attempt", () => {
    const sp = spec({ concurrency: 1, per_subject: 1 }, 1, 1);
    const s = emptyExperimentState("e-00000003", 0);
    turn(s, sp, 0, (e) => e.start("d"));
    const infra = { payload: { status: "failed", error: { code: "MODEL_CALL_FAILED", message: "500" } } };
    const second = turn(s, sp, 10, (e) => e.result("e-00000003-c0-a1", infra));
    expect(sends(second).map((x) => x.id)).toEqual(["e-00000003-c0-a2"]);
    const timer = second.find((x) => x.kind === "timer") as Extract<Effect, { kind: "timer" }> | undefined;
    // attempt 2 never answers: the watchdog fires past its deadline
    const fired = turn(s, sp, 20_000, (e) => e.timerFired(timer?.timerId ?? s.timer!.id));
    expect(fired.filter((x) => x.kind === "interrupt")).toEqual([{ kind: "interrupt", to: "eval-subject--e-00000003-s0-0", messageId: "e-00000003-c0-a2" }]);
    const records = fired
      .filter((x): x is Extract<Effect, { kind: "record" }> => x.kind === "record")
      .map((x) => `${x.record.attempt}:${x.record.status}:${x.record.reason?.code}`);
    expect(records).toEqual(["2:timeout:EVAL_ATTEMPT_TIMEOUT"]);
    expect(s).toMatchObject({ status: "completed", errors: 1, done: 0, cellStatus: "e" });
    // a late answer to a replaced attempt changes nothing
    expect(new ExperimentEngine(s, sp, 30_000).result("e-00000003-c0-a1", answer("0"))).toBe(false);
  });

  it("eval - a budget stop cuts what is in flight (recorded cancelled) and resume runs those cells again with a new attempt", () => {
    const sp = spec({ concurrency: 2, per_subject: 2 }, 1, 3);
    const s = emptyExperimentState("e-00000004", 0);
    turn(s, sp, 0, (e) => e.start("d"));
    s.budget = { maxTokens: 10 };
    const stopped = turn(s, sp, 5, (e) => e.result("e-00000004-c0-a1", answer("0")));
    expect(s.status).toBe("budget_exhausted");
    expect(stopped.filter((x) => x.kind === "interrupt").map((x) => (x as { messageId: string }).messageId)).toEqual(["e-00000004-c1-a1"]);
    expect(s.cellStatus).toBe("dc.");
    const resumed = turn(s, sp, 9, (e) => e.resume({ maxTokens: 1000 }));
    expect(sends(resumed).map((x) => x.id)).toEqual(["e-00000004-c1-a2", "e-00000004-c2-a1"]);
    expect(s).toMatchObject({ status: "running", round: 2 });
  });

  it("eval - the earliest valid attempt is authoritative; pass@k and the t-interval are the textbook ones", () => {
    const rec = (cell: number, attempt: number, status: AttemptRecord["status"], score: number | null): AttemptRecord => ({
      v: 1,
      experimentId: "e-00000005",
      cell,
      subject: "s0",
      task: `t${cell}`,
      repetition: 0,
      attempt,
      status,
      valid: status === "completed" || status === "failed",
      score,
      pass: score === null ? null : score >= 1,
      verifiers: [],
      reason: null,
      usage: { inputTokens: 1, outputTokens: 1 },
      durationMs: 10 * attempt,
      startedAt: 0,
      endedAt: 0,
      runId: `r${cell}-${attempt}`,
    });
    const records = [rec(0, 3, "completed", 0), rec(0, 1, "infra_error", null), rec(0, 2, "completed", 1), rec(1, 1, "failed", 0)];
    expect([...authoritative(records).values()].map((r) => `${r.cell}#${r.attempt}`)).toEqual(["0#2", "1#1"]);
    expect(passAtK(3, 1, 1)).toBeCloseTo(1 / 3, 12);
    expect(passAtK(3, 1, 2)).toBeCloseTo(2 / 3, 12);
    expect(passAtK(3, 0, 3)).toBe(0);
    expect(passAtK(3, 2, 2)).toBe(1);
    // mean 2, sd 1, n 3: 2 ± 4.303 / √3
    expect(tInterval([1, 2, 3])).toEqual([2 - 4.303 / Math.sqrt(3), 2 + 4.303 / Math.sqrt(3)].map((x) => Math.round(x * 1e9) / 1e9));
    const sp = spec({}, 1, 2);
    const report = summarize("e-00000005", sp, records);
    expect(report.subjects[0]).toMatchObject({ scored: 2, meanScore: 0.5, attempts: 4 });
    expect(report.subjects[0]!.failures).toEqual({ infra_error: 1, failed: 1 });
  });

  it("eval - a paired comparison by task: the mean difference with a seeded bootstrap interval", () => {
    const side = (subject: string, scores: number[]) => ({
      experimentId: "e-00000006",
      subject,
      records: scores.map(
        (score, i): AttemptRecord => ({
          v: 1,
          experimentId: "e-00000006",
          cell: i,
          subject,
          task: `t${i}`,
          repetition: 0,
          attempt: 1,
          status: "completed",
          valid: true,
          score,
          pass: score === 1,
          verifiers: [],
          reason: null,
          usage: { inputTokens: 0, outputTokens: 0 },
          durationMs: 1,
          startedAt: 0,
          endedAt: 0,
          runId: "r",
        }),
      ),
    });
    const a = side("a", [1, 0, 0, 1, 0, 0, 1, 0]);
    const b = side("b", [1, 1, 0, 1, 1, 0, 1, 1]);
    const c = compareSubjects(a, b);
    expect(c).toMatchObject({ pairedTasks: 8, meanDifference: 0.375, better: 3, worse: 0, ties: 5 });
    expect(c.ci95![0]).toBeGreaterThan(0);
    expect(c.ci95![1]).toBeLessThanOrEqual(0.75);
    // seeded: the same records give the same interval
    expect(compareSubjects(a, b).ci95).toEqual(c.ci95);
  });
});

describe("experiment actor: turns without a record", () => {
  /** The `eval` actor type's `unrecorded` test, with the node's spec copies holding `known`. */
  function unrecordedOf(known: Map<string, ExperimentSpec>) {
    const specs = { peek: (id: string) => known.get(id) } as unknown as SpecCache;
    const def = evalExperimentActor({ specs } as unknown as ExperimentActorPorts);
    return (env: Partial<A2AEnvelope>, state: ExperimentState) => def.unrecorded!(env as A2AEnvelope, state);
  }
  const id = "e-00000001";
  const started = (sp: ExperimentSpec) => {
    const s = emptyExperimentState(id, 0);
    turn(s, sp, 1000, (e) => e.start("d"));
    return s;
  };
  const notify = (correlationId: string, at?: number) => ({
    type: "result_notify" as const,
    correlationId,
    payload: { status: "completed", output: "0", runId: correlationId, sessionId: id, ...(at === undefined ? {} : { at }) },
  });

  it("eval - a subject's answer to a cell in flight, timed by its runner, needs no WAL record; a judge's, one without its time, one to nothing in flight, code verifiers and an unread spec do", () => {
    const sp = spec();
    const test = unrecordedOf(new Map([[id, sp]]));
    const s = started(sp);
    expect(test(notify(`${id}-c0-a1`, 1500), s)).toBe(true);
    expect(test(notify(`${id}-c0-a1`), s)).toBe(false);
    expect(test(notify(`${id}-c3-a1`, 1500), s)).toBe(false); // c3 is not in flight
    expect(test({ ...notify(`${id}-c0-a1`, 1500), type: "eval.cancel" }, s)).toBe(false);
    expect(unrecordedOf(new Map())(notify(`${id}-c0-a1`, 1500), s)).toBe(false);

    const judged = defineExperiment({
      experiment: { name: "e", concurrency: 2, per_subject: 2 },
      subjects: [{ id: "s0", agent: "helper" }],
      tasks: [{ id: "t0", input: "q0", expected: "0" }],
      verifiers: [{ type: "judge", agent: "judge", rubric: "is it right?" }],
    });
    const j = started(judged);
    const jt = unrecordedOf(new Map([[id, judged]]));
    expect(jt(notify(`${id}-c0-a1`, 1500), j)).toBe(true);
    turn(j, judged, 1500, (e) => e.result(`${id}-c0-a1`, answer("0")));
    expect(j.inflight["0"]?.phase).toBe("judge");
    expect(jt(notify(j.inflight["0"]!.messageId, 1600), j)).toBe(false);

    const coded = { ...sp, verifiers: [...sp.verifiers, { type: "code", id: "c", module: "./v.mjs" } as unknown as ExperimentSpec["verifiers"][number]] };
    expect(unrecordedOf(new Map([[id, coded]]))(notify(`${id}-c0-a1`, 1500), s)).toBe(false);
  });
});

describe("experiment actor: effects left to land after the checkpoint", () => {
  const id = "e-00000002";
  const sp = spec({ concurrency: 1, per_subject: 1 }, 1, 3);

  /** What a node's bus, store and timers saw, in order; `hold` keeps attempt records from landing until released. */
  function world() {
    const seen: string[] = [];
    let release: () => void = () => {};
    let held: Promise<void> | undefined;
    const ports = {
      bus: () => ({
        subjects: { a2a: (to: string) => `a2a.${to}` },
        send: async (env: A2AEnvelope) => {
          seen.push(`send ${env.id}`);
          return { duplicate: false };
        },
        publishEvent: async (e: { type: string; data: { cell?: number } }) => {
          seen.push(`event ${e.type}${e.data.cell === undefined ? "" : ` c${e.data.cell}`}`);
        },
      }),
      store: async () => ({
        putAttempt: async (r: AttemptRecord) => {
          await held;
          seen.push(`record c${r.cell}`);
        },
        putStatus: async (r: { status: string }) => {
          seen.push(`status ${r.status}`);
        },
      }),
      specs: { get: async () => ({ spec: sp, digest: "d" }), peek: () => sp },
      timers: async () => ({ set: async () => seen.push("timer"), clear: async () => seen.push("clear") }),
    } as unknown as ExperimentActorPorts;
    return {
      seen,
      ports,
      hold: () => {
        held = new Promise<void>((r) => (release = r));
      },
      release: () => release(),
    };
  }

  /** Runs the `result_notify` handler of `def` as one turn on `state` (a copy, as the runtime hands out), returning the state it leaves. */
  async function answerTurn(def: ReturnType<typeof evalExperimentActor>, state: ExperimentState, cell: number, at: number): Promise<ExperimentState> {
    const ctx = {
      actorId: `eval--${id}`,
      state: structuredClone(state),
      message: {
        id: `reply-${cell}-${at}`,
        type: "result_notify",
        correlationId: `${id}-c${cell}-a1`,
        payload: { status: "completed", output: String(cell), usage: { inputTokens: 1, outputTokens: 1 }, at },
      },
      now: () => at,
      step: async (_name: string, fn: (info: unknown) => unknown) => fn({ key: "k", index: 0, attempt: 1 }),
    };
    await def.handlers.result_notify!(ctx as never);
    return ctx.state;
  }

  it("eval - a turn of finished records, delegations and progress events leaves them in its state to land after its checkpoint; the next turn waits for them here, sends them again on another host, and an ending turn writes its own before its checkpoint", async () => {
    const a = world();
    const def = evalExperimentActor(a.ports);
    let s = emptyExperimentState(id, 0);
    turn(s, sp, 1000, (e) => e.start("d"));
    expect(Object.keys(s.inflight)).toEqual(["0"]);

    // the first answer: its turn returns while its record is still on its way
    a.hold();
    s = await answerTurn(def, s, 0, 1100);
    expect(s.v).toBe(2);
    expect(s.outbox?.of).toBe("reply-0-1100");
    expect(s.outbox?.effects.map((e) => e.kind).sort()).toEqual(["event", "record", "send"]);
    expect(a.seen).not.toContain("record c0");
    expect(a.seen).toContain(`send ${id}-c1-a1`);

    // the next turn's effects wait for them: nothing of its own goes out until that record lands
    const next = answerTurn(def, s, 1, 1200);
    await new Promise((r) => setTimeout(r, 50));
    expect(a.seen).not.toContain(`send ${id}-c2-a1`);
    a.release();
    s = await next;
    expect(a.seen.indexOf("record c0")).toBeLessThan(a.seen.indexOf(`send ${id}-c2-a1`));
    expect(s.outbox?.of).toBe("reply-1-1200");

    // another host (its own node: nothing in flight there) sends the last turn's effects again, then its own;
    // the last answer ends the experiment: its records, status and end events land before its checkpoint, in that order
    const b = world();
    s = await answerTurn(evalExperimentActor(b.ports), s, 2, 1300);
    expect(s.status).toBe("completed");
    expect(s.outbox).toBeUndefined();
    expect(s.v).toBe(1);
    expect(b.seen.slice(0, 3).sort()).toEqual(["event eval_attempt c1", "record c1", `send ${id}-c2-a1`]);
    const rest = b.seen.slice(3);
    expect(rest.indexOf("record c2")).toBeLessThan(rest.indexOf("status completed"));
    expect(rest.slice(-2)).toEqual(["event eval_ended", "event run_stream_end"]);
  });
});
