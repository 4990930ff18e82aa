// Shared helpers for the WAL benchmarks: temp dirs, a raw lmdb baseline environment,
// timing loops, and one-line reporting (Kova figure, baseline, ratio, target).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { open } from "lmdb";

export { Wal } from "../dist/wal/index.js";

export const RING_BITS = 16;
export const PAYLOAD = { agent: "researcher", step: 3, text: "a tool result of modest size ".repeat(2) };

export function tempDir(label) {
  const base = mkdtempSync(join(process.env.KOVA_BENCH_DIR ?? tmpdir(), `kova-bench-${label}-`));
  return { dir: join(base, "db"), cleanup: () => rmSync(base, { recursive: true, force: true }) };
}

/** Raw lmdb with the same layout as the WAL ring: uint32 slot keys, binary values. */
export function rawLmdb(dir) {
  const env = open({ path: dir, maxDbs: 8 });
  const db = env.openDB({ name: "ring", keyEncoding: "uint32", encoding: "binary" });
  return { env, db, value: Buffer.alloc(96, 7), close: () => env.close() };
}

export const seconds = Number(process.env.KOVA_BENCH_SECONDS ?? 2);

/** Runs `fn` repeatedly for `secs` with `writers` concurrent loops; returns ops/s. */
export async function rate(writers, fn, secs = seconds) {
  let ops = 0;
  const start = performance.now();
  const end = start + secs * 1000;
  await Promise.all(
    Array.from({ length: writers }, async () => {
      while (performance.now() < end) {
        await fn();
        ops++;
      }
    }),
  );
  return ops / ((performance.now() - start) / 1000);
}

/** Pipelined: issues `window` operations, awaits them, repeats for `secs`. */
export async function pipelined(window, issue, secs = seconds) {
  let ops = 0;
  const start = performance.now();
  const end = start + secs * 1000;
  while (performance.now() < end) {
    const batch = [];
    for (let i = 0; i < window; i++) batch.push(issue());
    await Promise.all(batch);
    ops += window;
  }
  return ops / ((performance.now() - start) / 1000);
}

const fmt = (n) => Math.round(n).toLocaleString("en-US");

export function report(name, ours, baselineName, baseline, target) {
  const ratio = baseline === undefined ? undefined : ours / baseline;
  const parts = [`${name}: ${fmt(ours)} ops/s`];
  if (baseline !== undefined) parts.push(`${baselineName}: ${fmt(baseline)} ops/s`, `ratio ${ratio.toFixed(2)}`);
  if (target !== undefined) parts.push(`target ${target.text} → ${target.met(ours, ratio) ? "MET" : "MISSED"}`);
  console.log(parts.join(" | "));
  return { ours, baseline, ratio };
}

/**
 * Alternates short measurement windows between the contenders (all kept open), so that
 * noise from other processes on this shared machine hits each alike. `measure(name,
 * secs)` returns ops/s for one window; the result is the mean rate per contender, and
 * `cpu[name]`: process CPU time (all threads) per operation in µs, which other
 * processes' load disturbs far less than the rate.
 */
export async function interleaved(names, measure) {
  const windows = Number(process.env.KOVA_BENCH_WINDOWS ?? 6);
  const secs = (seconds * 2) / windows; // each contender gets `seconds` in total
  const sums = Object.fromEntries(names.map((n) => [n, 0]));
  const cpuSums = Object.fromEntries(names.map((n) => [n, 0]));
  const opSums = Object.fromEntries(names.map((n) => [n, 0]));
  for (let w = 0; w < windows; w++) {
    for (const n of names) {
      const before = process.cpuUsage();
      const opsPerSec = await measure(n, secs);
      const used = process.cpuUsage(before);
      sums[n] += opsPerSec;
      cpuSums[n] += used.user + used.system;
      opSums[n] += opsPerSec * secs;
    }
  }
  const out = Object.fromEntries(names.map((n) => [n, sums[n] / windows]));
  out.cpu = Object.fromEntries(names.map((n) => [n, cpuSums[n] / opSums[n]]));
  return out;
}

/** One line of CPU cost per operation (µs, all threads) for the named contenders. */
export function reportCpu(r, labels) {
  console.log(
    `  cpu per op: ${Object.entries(labels)
      .map(([n, label]) => `${label} ${r.cpu[n].toFixed(1)} µs`)
      .join(", ")}`,
  );
}
