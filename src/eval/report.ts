import { addUsage, ZERO_USAGE } from "../agents/index.js";
import type { AttemptRecord, EvalUsage, ExperimentStatus, StatusRecord } from "./records.js";
import type { ExperimentSpec } from "./spec.js";
import { bootstrapInterval, mean, passAtK, percentile, round, seededRandom, seedOf, tInterval } from "./stats.js";

/**
 * Reports (docs/evals.md, "Reports"), computed from the attempt records alone: each cell's
 * result is its earliest valid attempt; the rest of its attempts count in usage and in the
 * failures by reason.
 */

export interface SubjectReport {
  subject: string;
  kind: string;
  cells: number;
  /** Cells with a valid attempt (scored). */
  scored: number;
  /** Cells whose every attempt failed for the infrastructure. */
  errors: number;
  /** Cells with no valid attempt and not in error (not run, or cut by a cancel or the budget). */
  unfinished: number;
  /** Mean score over the scored cells. */
  meanScore: number | null;
  /** 95 % t-interval over the per-task means (tasks are the independent samples). */
  ci95: [number, number] | null;
  passRate: number | null;
  /** pass@k for k = 1 … repetitions (only with repetitions > 1). */
  passAtK: Record<string, number>;
  attempts: number;
  usage: EvalUsage;
  judgeUsage: EvalUsage;
  /** Durations of the scored cells' attempts. */
  latencyMs: { p50: number; p95: number } | null;
  /** Every attempt that did not complete, by its reason's code. */
  failures: Record<string, number>;
}

export interface TaskRow {
  task: string;
  /** Mean score of each subject on this task (over its repetitions), null when none scored. */
  scores: Record<string, number | null>;
}

export interface ExperimentReport {
  experimentId: string;
  name: string;
  status: ExperimentStatus;
  stopReason?: { code: string; message: string };
  cells: number;
  tasks: number;
  repetitions: number;
  subjects: SubjectReport[];
  perTask: TaskRow[];
  usage: EvalUsage;
  judgeUsage: EvalUsage;
  startedAt?: number;
  endedAt?: number;
}

/** Each cell's authoritative attempt: the earliest valid one. */
export function authoritative(records: readonly AttemptRecord[]): Map<number, AttemptRecord> {
  const out = new Map<number, AttemptRecord>();
  for (const r of records) {
    if (r.status !== "completed" && r.status !== "failed") continue;
    const had = out.get(r.cell);
    if (!had || r.attempt < had.attempt) out.set(r.cell, r);
  }
  return out;
}

/** Groups per-cell scores by task: `task → scores of its scored repetitions`. */
function byTask(cells: readonly AttemptRecord[]): Map<string, AttemptRecord[]> {
  const out = new Map<string, AttemptRecord[]>();
  for (const r of cells) {
    const list = out.get(r.task) ?? [];
    list.push(r);
    out.set(r.task, list);
  }
  return out;
}

/** The report of an experiment from its spec, its records and its status. */
export function summarize(experimentId: string, spec: ExperimentSpec, records: readonly AttemptRecord[], status?: StatusRecord): ExperimentReport {
  const results = authoritative(records);
  const perSubjectCells = spec.tasks.length * spec.repetitions;
  const subjects = spec.subjects.map((subject): SubjectReport => {
    const mine = records.filter((r) => r.subject === subject.id);
    const scored = [...results.values()].filter((r) => r.subject === subject.id);
    // A cell is in error when it has no valid attempt and used every attempt on infrastructure failures.
    const infraFailures = new Map<number, number>();
    for (const r of mine) if (r.status === "infra_error" || r.status === "timeout") infraFailures.set(r.cell, (infraFailures.get(r.cell) ?? 0) + 1);
    const errors = [...infraFailures].filter(([c, n]) => !results.has(c) && n >= spec.maxAttempts).length;
    const tasks = byTask(scored);
    const taskMeans = [...tasks.values()].map((rs) => mean(rs.map((r) => r.score ?? 0)));
    const passAt: Record<string, number> = {};
    if (spec.repetitions > 1) {
      for (let k = 1; k <= spec.repetitions; k++) {
        const per = [...tasks.values()].filter((rs) => rs.length >= k).map((rs) => passAtK(rs.length, rs.filter((r) => r.pass).length, k));
        if (per.length > 0) passAt[String(k)] = round(mean(per), 6);
      }
    }
    const failures: Record<string, number> = {};
    for (const r of mine) {
      if (r.status === "completed" || r.status === "judging") continue;
      const code = r.reason?.code ?? r.status;
      failures[code] = (failures[code] ?? 0) + 1;
    }
    const durations = scored.map((r) => r.durationMs);
    const p50 = percentile(durations, 50);
    const ci = tInterval(taskMeans);
    return {
      subject: subject.id,
      kind: subject.kind,
      cells: perSubjectCells,
      scored: scored.length,
      errors,
      unfinished: perSubjectCells - scored.length - errors,
      meanScore: scored.length ? round(mean(scored.map((r) => r.score ?? 0)), 6) : null,
      ci95: ci ? [round(ci[0], 6), round(ci[1], 6)] : null,
      passRate: scored.length ? round(scored.filter((r) => r.pass).length / scored.length, 6) : null,
      passAtK: passAt,
      attempts: mine.filter((r) => r.status !== "judging").length,
      usage: mine.reduce((u, r) => addUsage(u, r.usage), { ...ZERO_USAGE }),
      judgeUsage: mine.reduce((u, r) => addUsage(u, r.judgeUsage), { ...ZERO_USAGE }),
      latencyMs: p50 === undefined ? null : { p50, p95: percentile(durations, 95)! },
      failures,
    };
  });
  const perTask = spec.tasks.map((t): TaskRow => {
    const scores: Record<string, number | null> = {};
    for (const s of spec.subjects) {
      const rs = [...results.values()].filter((r) => r.subject === s.id && r.task === t.id);
      scores[s.id] = rs.length ? round(mean(rs.map((r) => r.score ?? 0)), 6) : null;
    }
    return { task: t.id, scores };
  });
  return {
    experimentId,
    name: spec.name,
    status: status?.status ?? "running",
    ...(status?.stopReason ? { stopReason: status.stopReason } : {}),
    cells: perSubjectCells * spec.subjects.length,
    tasks: spec.tasks.length,
    repetitions: spec.repetitions,
    subjects,
    perTask,
    usage: subjects.reduce((u, s) => addUsage(u, s.usage), { ...ZERO_USAGE }),
    judgeUsage: subjects.reduce((u, s) => addUsage(u, s.judgeUsage), { ...ZERO_USAGE }),
    ...(status?.startedAt === undefined ? {} : { startedAt: status.startedAt }),
    ...(status?.endedAt === undefined ? {} : { endedAt: status.endedAt }),
  };
}

/** One side of a comparison: an experiment's subject and its records. */
export interface CompareSide {
  experimentId: string;
  subject: string;
  records: readonly AttemptRecord[];
}

export interface Comparison {
  a: { experimentId: string; subject: string; meanScore: number | null };
  b: { experimentId: string; subject: string; meanScore: number | null };
  /** Tasks both sides scored. */
  pairedTasks: number;
  /** Mean over the paired tasks of (B's task mean − A's task mean). */
  meanDifference: number | null;
  /** 95 % bootstrap interval of that mean (10,000 resamples of the tasks, seeded by the two sides' names). */
  ci95: [number, number] | null;
  /** Tasks where B scored higher, lower, the same. */
  better: number;
  worse: number;
  ties: number;
  perTask: Array<{ task: string; a: number; b: number; difference: number }>;
}

function taskMeans(side: CompareSide): Map<string, number> {
  const cells = [...authoritative(side.records).values()].filter((r) => r.subject === side.subject);
  return new Map([...byTask(cells)].map(([t, rs]) => [t, mean(rs.map((r) => r.score ?? 0))]));
}

/** A paired comparison of two subjects by task: B − A, with a bootstrap interval. */
export function compareSubjects(a: CompareSide, b: CompareSide, resamples = 10_000): Comparison {
  const ma = taskMeans(a);
  const mb = taskMeans(b);
  const perTask = [...ma.keys()]
    .filter((t) => mb.has(t))
    .sort()
    .map((task) => ({ task, a: round(ma.get(task)!, 6), b: round(mb.get(task)!, 6), difference: round(mb.get(task)! - ma.get(task)!, 6) }));
  const diffs = perTask.map((p) => p.difference);
  const overall = (m: Map<string, number>) => (m.size ? round(mean([...m.values()]), 6) : null);
  const ci = bootstrapInterval(diffs, seededRandom(seedOf(`${a.experimentId}:${a.subject}|${b.experimentId}:${b.subject}`)), resamples);
  return {
    a: { experimentId: a.experimentId, subject: a.subject, meanScore: overall(ma) },
    b: { experimentId: b.experimentId, subject: b.subject, meanScore: overall(mb) },
    pairedTasks: perTask.length,
    meanDifference: diffs.length ? round(mean(diffs), 6) : null,
    ci95: ci ? [round(ci[0], 6), round(ci[1], 6)] : null,
    better: diffs.filter((d) => d > 1e-12).length,
    worse: diffs.filter((d) => d < -1e-12).length,
    ties: diffs.filter((d) => Math.abs(d) <= 1e-12).length,
    perTask,
  };
}
