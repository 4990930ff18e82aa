// Shared helpers of the bus benchmarks: a private nats-server, timing and reporting.
import { startNatsServer } from "../dist/testing/index.js";
import { createLogger } from "../dist/core/logger.js";

export const silent = createLogger({ level: "silent" });
export const fmt = (n) => Math.round(n).toLocaleString("en-US");
export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
export function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export async function withServer(fn) {
  const server = await startNatsServer({ allowExternal: false });
  try {
    return await fn(server);
  } finally {
    await server.stop();
  }
}

/** Runs `ours` and `base` alternately `rounds` times (so drift hits both) and returns the medians. */
export async function alternate(rounds, ours, base) {
  const a = [];
  const b = [];
  for (let i = 0; i < rounds; i++) {
    a.push(await ours(i));
    b.push(await base(i));
  }
  return { ours: a, base: b };
}

export function report(title, rows) {
  console.log(`\n${title}`);
  for (const r of rows) console.log(`  ${r}`);
}
