import { describe, expect, it } from "vitest";
import { comparisonLine, fmtMs, fmtUsd, planLines, progressLine, reportHeadline, subjectTable, taskTable } from "../../src/cli/eval-format.js";
import { defineExperiment, type ExperimentReport } from "../../src/eval/index.js";

const report: ExperimentReport = {
  experimentId: "ab-0a1b2c3d",
  name: "ab",
  status: "budget_exhausted",
  stopReason: { code: "EVAL_BUDGET_EXHAUSTED", message: "max_cost_usd: $1 spent of $1" },
  cells: 12,
  tasks: 2,
  repetitions: 3,
  subjects: [
    {
      subject: "base",
      kind: "agent",
      cells: 6,
      scored: 5,
      errors: 1,
      unfinished: 0,
      meanScore: 0.8,
      ci95: [0.512, 1],
      passRate: 0.8,
      passAtK: { "1": 0.8, "2": 0.9, "3": 1 },
      attempts: 8,
      usage: { inputTokens: 12_000, outputTokens: 300, costUsd: 0.0123 },
      judgeUsage: { inputTokens: 0, outputTokens: 0 },
      latencyMs: { p50: 812, p95: 2400 },
      failures: { MODEL_CALL_FAILED: 3, RUN_LIMIT_EXCEEDED: 1 },
    },
  ],
  perTask: [
    { task: "t1", scores: { base: 1 } },
    { task: "t2", scores: { base: null } },
  ],
  usage: { inputTokens: 12_000, outputTokens: 300, costUsd: 0.0123 },
  judgeUsage: { inputTokens: 0, outputTokens: 0 },
  startedAt: 0,
  endedAt: 65_000,
};

describe("kova eval output", () => {
  it("eval - the table per subject shows score with its interval, pass rate, pass@k, cells, tokens, cost, latency and failures by reason", () => {
    expect(reportHeadline(report)).toBe(
      "experiment ab-0a1b2c3d budget_exhausted (max_cost_usd: $1 spent of $1) in 1m05s: 1 subjects × 2 tasks × 3 repetitions = 12 cells",
    );
    expect(subjectTable(report)).toEqual({
      head: ["subject", "score [95% CI]", "pass", "pass@1", "pass@3", "cells", "tokens in/out", "cost", "p50", "p95", "failures"],
      rows: [
        [
          "base",
          "0.800 [0.512, 1.000]",
          "0.800",
          "0.800",
          "1.000",
          "5/6 (1 err)",
          "12k/300",
          "$0.01",
          "812ms",
          "2.4s",
          "MODEL_CALL_FAILED×3 RUN_LIMIT_EXCEEDED×1",
        ],
      ],
    });
    expect(taskTable(report).rows).toEqual([
      ["t1", "1.000"],
      ["t2", "-"],
    ]);
  });

  it("eval - progress says cells done of all, errors, tokens, cost and the ETA", () => {
    const line = progressLine({
      experimentId: "x",
      type: "eval_attempt",
      done: 35,
      errors: 2,
      total: 120,
      spent: { inputTokens: 1000, outputTokens: 234, costUsd: 0.0042 },
      elapsedMs: 10_000,
      etaMs: 22_400,
      event: { type: "eval_attempt", sessionId: "x", runId: "x", ts: 0 },
    });
    expect(line).toBe("37/120 cells · 2 errors · 1,234 tokens · $0.0042 · ETA 22.4s");
    expect(fmtUsd(1.5)).toBe("$1.50");
    expect(fmtMs(125_000)).toBe("2m05s");
  });

  it("eval - the plan of a spec and a comparison read as sentences", () => {
    const spec = defineExperiment({
      experiment: { name: "p", repetitions: 2 },
      budget: { max_cost_usd: 2 },
      subjects: [
        { id: "a", agent: "helper" },
        { id: "b", agent: "helper", temperature: 0 },
      ],
      tasks: [{ input: "x", expected: "1" }],
      verifiers: [{ type: "exact" }],
    });
    expect(planLines(spec)).toEqual([
      "experiment p: 2 subjects × 1 tasks × 2 repetitions = 4 cells",
      "concurrency 8 (8 per subject), timeout 10m00s, 3 attempts per cell, budget $2.00",
      "  subject a: agent helper",
      "  subject b: agent helper with temperature=0",
      "  verifier exact: exact",
    ]);
    const line = comparisonLine({
      a: { experimentId: "e-1", subject: "a", meanScore: 0.5 },
      b: { experimentId: "e-1", subject: "b", meanScore: 0.625 },
      pairedTasks: 8,
      meanDifference: 0.125,
      ci95: [-0.05, 0.3],
      better: 2,
      worse: 1,
      ties: 5,
      perTask: [],
    });
    expect(line).toBe("e-1:b − e-1:a: +0.125 [-0.050, +0.300] over 8 paired tasks (B better on 2, worse on 1, equal on 5); A 0.500, B 0.625");
  });
});
