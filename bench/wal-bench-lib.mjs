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

/** Runs `fn` repeatedly for `seconds` with `writers` concurrent loops; returns ops/s. */
export async function rate(writers, fn) {
  let ops = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
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

/** Pipelined: issues `window` operations, awaits the last, repeats for `seconds`. */
export async function pipelined(window, issue) {
  let ops = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
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
