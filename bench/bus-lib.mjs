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

/**
 * `workers` loops calling `call()` for `ms` milliseconds: calls per second, p50 and p99 in µs,
 * and this process's CPU time per call in µs (all threads; load from other processes disturbs
 * it far less than wall time).
 */
export async function drive(ms, workers, call) {
  const lat = [];
  const cpu0 = process.cpuUsage();
  const end = performance.now() + ms;
  const worker = async () => {
    while (performance.now() < end) {
      const t = performance.now();
      await call();
      lat.push(performance.now() - t);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: workers }, worker));
  const secs = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  return { rps: lat.length / secs, p50: percentile(lat, 50) * 1000, p99: percentile(lat, 99) * 1000, cpu: (cpu.user + cpu.system) / lat.length };
}

export function report(title, rows) {
  console.log(`\n${title}`);
  for (const r of rows) console.log(`  ${r}`);
}
