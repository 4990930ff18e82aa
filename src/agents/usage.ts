import type { AgentUsageTotals, RunUsage } from "./protocol.js";

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

export function tallyModel(t: RunTally, model: string, usage: { inputTokens: number; outputTokens: number }, costUsd: number | undefined): void {
  t.inputTokens += usage.inputTokens;
  t.outputTokens += usage.outputTokens;
  t.modelCalls++;
  if (costUsd !== undefined) {
    t.priced = true;
    t.costUsd = round(t.costUsd + costUsd);
  }
  const m = (t.byModel[model] ??= { calls: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 });
  m.calls++;
  m.inputTokens += usage.inputTokens;
  m.outputTokens += usage.outputTokens;
  m.costUsd = round(m.costUsd + (costUsd ?? 0));
}

export function tallyTool(t: RunTally, tool: string, ok: boolean, ms: number): void {
  t.toolCalls++;
  t.toolMs += ms;
  const e = (t.byTool[tool] ??= { calls: 0, errors: 0, ms: 0 });
  e.calls++;
  if (!ok) e.errors++;
  e.ms += ms;
}

/** The `usage` of a run's result and events. */
export function runUsage(t: RunTally): RunUsage {
  return { inputTokens: t.inputTokens, outputTokens: t.outputTokens, ...(t.priced ? { costUsd: t.costUsd } : {}) };
}

/** Adds a finished run to the agent's totals. */
export function addRun(totals: AgentUsageTotals, t: RunTally): AgentUsageTotals {
  const out: AgentUsageTotals = structuredClone(totals);
  out.runs++;
  out.inputTokens += t.inputTokens;
  out.outputTokens += t.outputTokens;
  out.costUsd = round(out.costUsd + t.costUsd);
  out.modelCalls += t.modelCalls;
  out.toolCalls += t.toolCalls;
  out.toolMs += t.toolMs;
  for (const [k, v] of Object.entries(t.byModel)) {
    const m = (out.byModel[k] ??= { calls: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 });
    m.calls += v.calls;
    m.inputTokens += v.inputTokens;
    m.outputTokens += v.outputTokens;
    m.costUsd = round(m.costUsd + v.costUsd);
  }
  for (const [k, v] of Object.entries(t.byTool)) {
    const e = (out.byTool[k] ??= { calls: 0, errors: 0, ms: 0 });
    e.calls += v.calls;
    e.errors += v.errors;
    e.ms += v.ms;
  }
  return out;
}

function round(usd: number): number {
  return Math.round(usd * 1e9) / 1e9;
}
