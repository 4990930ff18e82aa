/**
 * The statistics of reports (docs/evals.md, "Reports"): means with t-intervals, pass@k,
 * percentiles and a seeded bootstrap. Pure functions over numbers.
 */

export function mean(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** Two-sided 97.5 % quantiles of Student's t for 1-30 degrees of freedom. */
const T975 = [
  12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069,
  2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/** Student's t quantile at 0.975 (a 95 % two-sided interval): the table to 30 degrees, Cornish-Fisher beyond. */
export function t975(df: number): number {
  if (df <= T975.length) return T975[Math.max(1, Math.round(df)) - 1]!;
  const z = 1.959963985;
  const z3 = z ** 3;
  const z5 = z ** 5;
  return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df ** 2);
}

/** A 95 % t-interval for the mean of `xs`; undefined for fewer than 2 values. */
export function tInterval(xs: readonly number[]): [number, number] | undefined {
  if (xs.length < 2) return undefined;
  const m = mean(xs);
  const sd = Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
  const half = (t975(xs.length - 1) * sd) / Math.sqrt(xs.length);
  return [round(m - half), round(m + half)];
}

/** C(n, k) as a float (n ≤ 100 here: repetitions). */
function choose(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let r = 1;
  for (let i = 1; i <= k; i++) r = (r * (n - k + i)) / i;
  return r;
}

/**
 * pass@k of one task with `n` samples of which `c` passed: the chance that at least one of
 * k samples drawn without replacement passes (the unbiased estimator, 1 − C(n−c, k)/C(n, k)).
 */
export function passAtK(n: number, c: number, k: number): number {
  if (n - c < k) return 1;
  return 1 - choose(n - c, k) / choose(n, k);
}

/** The nearest-rank percentile (p in 0…100) of `xs`; undefined when empty. */
export function percentile(xs: readonly number[], p: number): number | undefined {
  if (xs.length === 0) return undefined;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** A small seeded PRNG (mulberry32): a bootstrap over the same data gives the same interval. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A 32-bit seed from a string (FNV-1a). */
export function seedOf(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** A 95 % percentile bootstrap interval for the mean of `xs` (`resamples` draws of as many values, with replacement). */
export function bootstrapInterval(xs: readonly number[], random: () => number, resamples = 10_000): [number, number] | undefined {
  if (xs.length < 2) return undefined;
  const means = new Float64Array(resamples);
  for (let r = 0; r < resamples; r++) {
    let sum = 0;
    for (let i = 0; i < xs.length; i++) sum += xs[Math.floor(random() * xs.length)]!;
    means[r] = sum / xs.length;
  }
  means.sort();
  return [round(means[Math.floor(0.025 * resamples)]!), round(means[Math.min(resamples - 1, Math.ceil(0.975 * resamples) - 1)]!)];
}

export function round(x: number, digits = 9): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
