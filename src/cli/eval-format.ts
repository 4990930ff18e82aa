import type { Comparison, ExperimentProgress, ExperimentReport, ExperimentSpec, StatusRecord, SubjectReport } from "../eval/index.js";

/**
 * How `kova eval` shows experiments to people: the progress line, the table per subject, the
 * per-task scores, a comparison. Pure: strings in, strings out (tested in
 * test/unit/cli-eval-format.test.ts).
 */

export function fmtScore(x: number | null | undefined, digits = 3): string {
  return x === null || x === undefined ? "-" : x.toFixed(digits);
}

export function fmtUsd(x: number | undefined): string {
  if (x === undefined) return "-";
  return x === 0 ? "$0" : x < 0.01 ? `$${x.toPrecision(2)}` : `$${x.toFixed(2)}`;
}

export function fmtMs(ms: number | undefined | null): string {
  if (ms === undefined || ms === null) return "-";
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const m = Math.floor(ms / 60_000);
  return `${m}m${String(Math.round((ms % 60_000) / 1000)).padStart(2, "0")}s`;
}

function fmtTokens(n: number): string {
  return n >= 10_000 ? `${(n / 1000).toFixed(0)}k` : String(n);
}

/** `37/120 cells · 2 errors · 1,234 tokens · $0.0123 · ETA 12s` */
export function progressLine(p: ExperimentProgress): string {
  const parts = [`${p.done + p.errors}/${p.total} cells`];
  if (p.errors > 0) parts.push(`${p.errors} error${p.errors === 1 ? "" : "s"}`);
  parts.push(`${(p.spent.inputTokens + p.spent.outputTokens).toLocaleString("en-US")} tokens`);
  if (p.spent.costUsd !== undefined) parts.push(fmtUsd(p.spent.costUsd));
  parts.push(p.etaMs === undefined ? `${fmtMs(p.elapsedMs)} elapsed` : `ETA ${fmtMs(p.etaMs)}`);
  return parts.join(" · ");
}

function failures(s: SubjectReport): string {
  const entries = Object.entries(s.failures).sort((a, b) => b[1] - a[1]);
  return entries.length ? entries.map(([code, n]) => `${code}×${n}`).join(" ") : "-";
}

/** The table per subject: score with its interval, pass rate, pass@k, cells, tokens, cost, latency, failures. */
export function subjectTable(r: ExperimentReport): { head: string[]; rows: string[][] } {
  const passK = r.repetitions > 1;
  const head = [
    "subject",
    "score [95% CI]",
    "pass",
    ...(passK ? [`pass@1`, `pass@${r.repetitions}`] : []),
    "cells",
    "tokens in/out",
    "cost",
    "p50",
    "p95",
    "failures",
  ];
  const rows = r.subjects.map((s) => {
    const cells = `${s.scored}/${s.cells}${s.errors ? ` (${s.errors} err)` : ""}${s.unfinished ? ` (${s.unfinished} not run)` : ""}`;
    const judge = s.judgeUsage.inputTokens + s.judgeUsage.outputTokens > 0 ? ` +judge ${fmtUsd(s.judgeUsage.costUsd)}` : "";
    return [
      s.subject,
      `${fmtScore(s.meanScore)}${s.ci95 ? ` [${fmtScore(s.ci95[0])}, ${fmtScore(s.ci95[1])}]` : ""}`,
      fmtScore(s.passRate),
      ...(passK ? [fmtScore(s.passAtK["1"]), fmtScore(s.passAtK[String(r.repetitions)])] : []),
      cells,
      `${fmtTokens(s.usage.inputTokens)}/${fmtTokens(s.usage.outputTokens)}`,
      `${fmtUsd(s.usage.costUsd)}${judge}`,
      fmtMs(s.latencyMs?.p50),
      fmtMs(s.latencyMs?.p95),
      failures(s),
    ];
  });
  return { head, rows };
}

/** One line above the table: what ran and how it ended. */
export function reportHeadline(r: ExperimentReport): string {
  const took = r.startedAt !== undefined && r.endedAt !== undefined ? ` in ${fmtMs(r.endedAt - r.startedAt)}` : "";
  const stop = r.stopReason ? ` (${r.stopReason.message})` : "";
  return `experiment ${r.experimentId} ${r.status}${stop}${took}: ${r.subjects.length} subjects × ${r.tasks} tasks × ${r.repetitions} repetitions = ${r.cells} cells`;
}

/** Scores per task, one column per subject. */
export function taskTable(r: ExperimentReport): { head: string[]; rows: string[][] } {
  const subjects = r.subjects.map((s) => s.subject);
  return { head: ["task", ...subjects], rows: r.perTask.map((t) => [t.task, ...subjects.map((s) => fmtScore(t.scores[s]))]) };
}

/** `--plan`: what a spec expands to. */
export function planLines(spec: ExperimentSpec): string[] {
  const target = (s: ExperimentSpec["subjects"][number]) => {
    if (s.kind === "agent") {
      const o = Object.entries(s.overrides).map(
        ([k, v]) => `${k}=${typeof v === "string" && v.length > 30 ? `${JSON.stringify(v.slice(0, 27))}…` : JSON.stringify(v)}`,
      );
      return `agent ${s.agent}${o.length ? ` with ${o.join(", ")}` : ""}`;
    }
    if (s.kind === "actor") return `actor ${s.actor}`;
    if (s.kind === "openai") return `openai ${String(s.openai.model)} at ${String(s.openai.base_url ?? "https://api.openai.com/v1")}`;
    return `a2a ${s.url}`;
  };
  const b = spec.budget;
  const budget = [
    b.maxTokens !== undefined ? `${b.maxTokens} tokens` : "",
    b.maxCostUsd !== undefined ? fmtUsd(b.maxCostUsd) : "",
    b.maxWallTimeMs !== undefined ? fmtMs(b.maxWallTimeMs) : "",
  ].filter(Boolean);
  return [
    `experiment ${spec.name}: ${spec.subjects.length} subjects × ${spec.tasks.length} tasks × ${spec.repetitions} repetitions = ${spec.subjects.length * spec.tasks.length * spec.repetitions} cells`,
    `concurrency ${spec.concurrency} (${spec.perSubject} per subject), timeout ${fmtMs(spec.timeoutMs)}, ${spec.maxAttempts} attempts per cell, budget ${budget.length ? budget.join(", ") : "none"}`,
    ...spec.subjects.map((s) => `  subject ${s.id}: ${target(s)}`),
    ...spec.verifiers.map((v) => `  verifier ${v.id}: ${v.type}${v.weight !== 1 ? ` (weight ${v.weight})` : ""}`),
  ];
}

/** `kova eval ls` rows. */
export function listRows(list: readonly StatusRecord[]): { head: string[]; rows: string[][] } {
  const when = (t: number | undefined) => (t === undefined ? "-" : new Date(t).toISOString().replace("T", " ").slice(0, 19));
  return {
    head: ["experiment", "status", "cells", "subjects", "started", "ended"],
    rows: list.map((s) => [s.experimentId, s.status, String(s.cells), s.subjects.join(","), when(s.startedAt), when(s.endedAt)]),
  };
}

/** `B − A: +0.125 [+0.020, +0.230] over 20 paired tasks (B better on 5, worse on 1, equal on 14)` */
export function comparisonLine(c: Comparison): string {
  const signed = (x: number) => `${x >= 0 ? "+" : ""}${x.toFixed(3)}`;
  const a = `${c.a.experimentId}:${c.a.subject}`;
  const b = `${c.b.experimentId}:${c.b.subject}`;
  if (c.meanDifference === null) return `${b} − ${a}: no task scored by both`;
  const ci = c.ci95 ? ` [${signed(c.ci95[0])}, ${signed(c.ci95[1])}]` : "";
  return `${b} − ${a}: ${signed(c.meanDifference)}${ci} over ${c.pairedTasks} paired tasks (B better on ${c.better}, worse on ${c.worse}, equal on ${c.ties}); A ${fmtScore(c.a.meanScore)}, B ${fmtScore(c.b.meanScore)}`;
}
