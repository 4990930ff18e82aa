import type { ModelPrice } from "./config.js";
import type { Usage } from "./types.js";

/** Cost of a call in USD, split by direction. */
export interface Cost {
  input: number;
  output: number;
  total: number;
}

/**
 * The cost of `usage` at `price` (USD per million tokens). Rounded to 1e-9 USD so sums
 * of many calls do not drift into long binary fractions in events and stats.
 */
export function costOf(usage: Usage, price: ModelPrice): Cost {
  const input = roundUsd((usage.inputTokens * price.inputPerMtok) / 1_000_000);
  const output = roundUsd((usage.outputTokens * price.outputPerMtok) / 1_000_000);
  return { input, output, total: roundUsd(input + output) };
}

/** Adds two costs (per run, per agent, per model totals). */
export function addCost(a: Cost, b: Cost): Cost {
  return { input: roundUsd(a.input + b.input), output: roundUsd(a.output + b.output), total: roundUsd(a.total + b.total) };
}

export const ZERO_COST: Cost = Object.freeze({ input: 0, output: 0, total: 0 });

function roundUsd(usd: number): number {
  return Math.round(usd * 1e9) / 1e9;
}
