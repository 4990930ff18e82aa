// What a node keeps of the template instances it has passivated: one in-process node (its
// JS heap is what is measured, so it runs in this process; with --expose-gc, for a forced
// GC before each reading), KOVA_BENCH_ROUNDS (default 3) rounds of KOVA_BENCH_INSTANCES
// (default 1,000) activations of never-seen `counter` instances (idle_after
// KOVA_BENCH_IDLE_AFTER, default 60 s, so that all of a round's instances are active at
// once: 1,000 activations took up to 22 s here beside another benchmark) and their
// passivation (~2.5 min per 1,000: a node starts at most 32 per check, every 5 s). The JS
// heap after a forced GC at start (the baseline), with each round's instances active, and
// once they are all passivated: memory that follows the active instances comes back after
// each passivation, while what a node keeps per passivated instance grows round by round.
// Two bounded WAL structures grow with the work too: the encodings of record owners
// (actor ids, record-format.ts), kept for up to 10,000 ids and then cleared, and the index
// of completion batches on disk (wal.ts), one per turn batch until the ring comes round.
// Past 10,000 instances (KOVA_BENCH_ROUNDS=12 KOVA_BENCH_IDLE_AFTER=5s: rounds of ~1 min,
// read over the instances active once all were activated) the first is seen cleared.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ActorTypeRegistry, counterActor } from "../dist/actors/index.js";
import { createEnvelope } from "../dist/bus/index.js";
import { createLogger } from "../dist/core/logger.js";
import { parseConfig } from "../dist/node/config.js";
import { KovaNode } from "../dist/node/node.js";
import { startNatsServer } from "../dist/testing/index.js";
import { fmt, machine, sleep, waitFor } from "./actors-lib.mjs";

// run-all.mjs starts every script with plain `node`: take the flag by running again with it.
if (typeof globalThis.gc !== "function") {
  const r = spawnSync(process.execPath, ["--expose-gc", fileURLToPath(import.meta.url)], { stdio: "inherit" });
  process.exit(r.status ?? 1);
}

const N = Number(process.env.KOVA_BENCH_INSTANCES ?? 1000);
const ROUNDS = Number(process.env.KOVA_BENCH_ROUNDS ?? 3);
const IDLE_AFTER = process.env.KOVA_BENCH_IDLE_AFTER ?? "60s";

/** JS heap and anonymous RSS of this process after a full GC (twice: the first one's finalizers free more). */
const measure = async () => {
  for (let i = 0; i < 2; i++) {
    globalThis.gc();
    await sleep(100);
  }
  const anon = Number(/^RssAnon:\s+(\d+)/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1] ?? 0) * 1024;
  return { heap: process.memoryUsage().heapUsed, anon };
};
const mb = (b) => (b / 1024 / 1024).toFixed(1);
/** Signed KB per instance. */
const kbPer = (a, b, n) => {
  const kb = (a - b) / n / 1024;
  return `${kb < 0 ? "" : "+"}${kb.toFixed(2)}`;
};

const nats = await startNatsServer({ allowExternal: false });
const dir = mkdtempSync(join(process.env.KOVA_BENCH_DIR ?? tmpdir(), "kova-bench-retention-"));
const config = parseConfig(
  [
    `[node]`,
    `id = "r1"`,
    `data_dir = "${dir}"`,
    `[cluster]`,
    `name = "retention"`,
    `max_actors = ${N + 100}`,
    `max_actors_per_node = ${N + 100}`,
    `[nats]`,
    `urls = ["${nats.url}"]`,
    `[wal]`,
    `sync = "normal"`,
    `[[actor_templates]]`,
    `name = "mem"`,
    `type = "counter"`,
    `idle_after = "${IDLE_AFTER}"`,
  ].join("\n"),
  { env: {} },
);
const node = await KovaNode.start({ config, logger: createLogger({ level: "warn" }), types: new ActorTypeRegistry([counterActor]) });
const bus = node.busClient;
/** Waits for `cond(status)`; a timeout names what the node hosts and has activated and passivated. */
const until = (cond, what) =>
  waitFor(() => cond(node.status()), 300_000, what, 200).catch((err) => {
    const s = node.status();
    throw new Error(`${err.message} (hosting ${s.actors.hosted}; ${s.virtual.activations} activations, ${s.virtual.passivations} passivations)`);
  });
try {
  await sleep(2000);
  const base = await measure();
  console.log(`node memory kept per passivated instance, 1 in-process node, ${ROUNDS} rounds of ${fmt(N)} (${machine()})`);
  console.log(`  baseline (forced GC): JS heap ${mb(base.heap)} MB, anonymous RSS ${mb(base.anon)} MB`);
  let previous = base;
  for (let r = 1; r <= ROUNDS; r++) {
    const t0 = performance.now();
    for (let i = 0; i < N; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, N - i) }, (_, j) =>
          bus.send(createEnvelope({ from: "bench", to: `mem--r${r}k${i + j}`, type: "task_delegate", payload: {} })),
        ),
      );
    }
    // All of the round's instances at once, unless idle_after is shorter than the activation
    // (a long run): then once all were activated and the first passivated, over those active.
    await until((s) => s.actors.hosted === N || (s.virtual.activations >= r * N && s.virtual.passivations > (r - 1) * N), `round ${r}: all ${N} activated`);
    const activeMs = performance.now() - t0;
    const hosted = node.status().actors.hosted;
    const active = await measure();
    await until((s) => s.actors.hosted === 0 && s.virtual.passivations === r * N, `round ${r}: all ${N} passivated`);
    const passive = await measure();
    console.log(
      `  round ${r}: ${fmt(hosted)}${hosted < N ? ` of ${fmt(N)} (the first passivated before the last was active)` : ""} active (activated in ${fmt(activeMs)} ms): JS heap ${mb(active.heap)} MB (${kbPer(active.heap, base.heap, hosted)} KB per active instance over the baseline); ` +
        `all passivated: JS heap ${mb(passive.heap)} MB = ${kbPer(passive.heap, base.heap, r * N)} KB per instance passivated so far (${fmt(r * N)}), ` +
        `${kbPer(passive.heap, previous.heap, N)} KB per instance over the previous round; anonymous RSS ${mb(passive.anon)} MB`,
    );
    previous = passive;
  }
} finally {
  await node.stop();
  await nats.stop();
  rmSync(dir, { recursive: true, force: true });
}
