import { describe, expect, it } from "vitest";
import { addRun, emptyTotals, newTally, runUsage, tallyModel, tallyTool } from "../../src/agents/usage.js";

describe("agent usage totals", () => {
  it("usage - non-finite or negative reported numbers count as 0 and never poison the totals", () => {
    const t = newTally();
    tallyModel(t, "m", { inputTokens: 100, outputTokens: 10 }, 0.5);
    tallyModel(t, "m", { inputTokens: Number.NaN, outputTokens: Number.POSITIVE_INFINITY }, Number.NaN);
    tallyModel(t, "m", { inputTokens: -7, outputTokens: "3" as unknown as number }, undefined);
    tallyTool(t, "calc", true, Number.NaN);
    expect(runUsage(t)).toEqual({ inputTokens: 100, outputTokens: 10, costUsd: 0.5 });
    expect(t.byModel.m).toEqual({ calls: 3, inputTokens: 100, outputTokens: 10, costUsd: 0.5 });
    expect(t.toolMs).toBe(0);

    const totals = addRun(emptyTotals(), t);
    expect(totals).toMatchObject({ runs: 1, inputTokens: 100, outputTokens: 10, costUsd: 0.5, modelCalls: 3, toolCalls: 1, toolMs: 0 });
    // Totals an older version stored with NaN (JSON null) heal on the next run.
    const poisoned = { ...totals, inputTokens: null as unknown as number, costUsd: Number.NaN };
    expect(addRun(poisoned, t)).toMatchObject({ runs: 2, inputTokens: 100, outputTokens: 20, costUsd: 0.5 });
  });
});
