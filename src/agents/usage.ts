import type { AgentUsageTotals, RunUsage } from "./run-protocol.js";

/** What one run used, kept as it goes (rebuilt identically on replay from recorded steps). */
export interface RunTally {
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
  /** True once a model with a price was called (costUsd is then reported). */
  priced: boolean;
  modelCalls: number;
  toolCalls: number;
  toolMs: number;
  byModel: AgentUsageTotals["byModel"];
  byTool: AgentUsageTotals["byTool"];
}

export function newTally(): RunTally {
  return { inputTokens: 0, outputTokens: 0, costUsd: 0, priced: false, modelCalls: 0, toolCalls: 0, toolMs: 0, byModel: {}, byTool: {} };
}

export function emptyTotals(): AgentUsageTotals {
  return { runs: 0, inputTokens: 0, outputTokens: 0, costUsd: 0, modelCalls: 0, toolCalls: 0, toolMs: 0, byModel: {}, byTool: {} };
}

/**
 * Adds one model call. Reported numbers that are not finite and >= 0 (a broken provider)
 * count as 0 here: one NaN would otherwise stay in the agent's totals for good and disable
 * max_tokens_total (NaN compares false against every limit). Shared group budgets refuse
 * such a charge instead (see BudgetChargeInvalidError).
 */
export function tallyModel(t: RunTally, model: string, usage: { inputTokens: number; outputTokens: number }, costUsd: number | undefined): void {
  const input = amount(usage.inputTokens);
  const output = amount(usage.outputTokens);
  t.inputTokens += input;
  t.outputTokens += output;
  t.modelCalls++;
  if (costUsd !== undefined) {
    t.priced = true;
    t.costUsd = round(t.costUsd + amount(costUsd));
  }
  const m = (t.byModel[model] ??= { calls: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 });
  m.calls++;
  m.inputTokens += input;
  m.outputTokens += output;
  m.costUsd = round(m.costUsd + amount(costUsd));
}

export function tallyTool(t: RunTally, tool: string, ok: boolean, ms: number): void {
  t.toolCalls++;
  t.toolMs += amount(ms);
  const e = (t.byTool[tool] ??= { calls: 0, errors: 0, ms: 0 });
  e.calls++;
  if (!ok) e.errors++;
  e.ms += amount(ms);
}

/** The `usage` of a run's result and events. */
export function runUsage(t: RunTally): RunUsage {
  return { inputTokens: t.inputTokens, outputTokens: t.outputTokens, ...(t.priced ? { costUsd: t.costUsd } : {}) };
}

/**
 * Adds a finished run to the agent's totals. Either side's numbers that are not finite and
 * >= 0 count as 0, so totals an older version stored as NaN heal instead of staying NaN.
 */
export function addRun(totals: AgentUsageTotals, t: RunTally): AgentUsageTotals {
  const out: AgentUsageTotals = structuredClone(totals);
  out.runs = sum(out.runs, 1);
  out.inputTokens = sum(out.inputTokens, t.inputTokens);
  out.outputTokens = sum(out.outputTokens, t.outputTokens);
  out.costUsd = round(sum(out.costUsd, t.costUsd));
  out.modelCalls = sum(out.modelCalls, t.modelCalls);
  out.toolCalls = sum(out.toolCalls, t.toolCalls);
  out.toolMs = sum(out.toolMs, t.toolMs);
  for (const [k, v] of Object.entries(t.byModel)) {
    const m = (out.byModel[k] ??= { calls: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 });
    m.calls = sum(m.calls, v.calls);
    m.inputTokens = sum(m.inputTokens, v.inputTokens);
    m.outputTokens = sum(m.outputTokens, v.outputTokens);
    m.costUsd = round(sum(m.costUsd, v.costUsd));
  }
  for (const [k, v] of Object.entries(t.byTool)) {
    const e = (out.byTool[k] ??= { calls: 0, errors: 0, ms: 0 });
    e.calls = sum(e.calls, v.calls);
    e.errors = sum(e.errors, v.errors);
    e.ms = sum(e.ms, v.ms);
  }
  return out;
}

/** Whether `n` can be counted as usage (tokens, cost, milliseconds): a finite number >= 0. */
export function isUsageAmount(n: unknown): n is number {
  return typeof n === "number" && Number.isFinite(n) && n >= 0;
}

/** A usage number, or 0 for one that cannot be counted. */
function amount(n: unknown): number {
  return isUsageAmount(n) ? n : 0;
}

function sum(a: unknown, b: unknown): number {
  return amount(a) + amount(b);
}

function round(usd: number): number {
  return Math.round(usd * 1e9) / 1e9;
}
