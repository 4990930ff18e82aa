// Model-call throughput with many active template instances against a scripted model:
// KOVA_BENCH_INSTANCES (default 5,000) instances of a `job` template on one in-process
// node each make one call to a model that answers in KOVA_BENCH_MODEL_MS (default 200 ms),
// with KOVA_BENCH_SLOTS (default 64) slots, under each scheduling policy, against the
// ideal max_concurrency / latency. Tasks carry one of 50 users (fair_share keys), a
// priority 0-3 and a deadline, so every policy has something to order by.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ActorTypeRegistry } from "../dist/actors/index.js";
import { createEnvelope } from "../dist/bus/index.js";
import { createLogger } from "../dist/core/logger.js";
import { parseConfig } from "../dist/node/config.js";
import { KovaNode } from "../dist/node/node.js";
import { startModelCallLoad, startNatsServer } from "../dist/testing/index.js";
import { fmt, machine, waitFor } from "./actors-lib.mjs";

const N = Number(process.env.KOVA_BENCH_INSTANCES ?? 5000);
const MODEL_MS = Number(process.env.KOVA_BENCH_MODEL_MS ?? 200);
const SLOTS = Number(process.env.KOVA_BENCH_SLOTS ?? 64);
const POLICIES = ["round_robin", "priority", "fair_share", "deadline"];

const nats = await startNatsServer({ allowExternal: false });
const dir = mkdtempSync(join(tmpdir(), "kova-bench-sched-"));
let done = 0;
const load = await startModelCallLoad({ policy: "round_robin", maxConcurrency: SLOTS, latencyMs: MODEL_MS, onDone: () => done++ });
const scheduler = load.scheduler;
const config = parseConfig(
  `[node]\nid = "s1"\ndata_dir = "${dir}"\n[cluster]\nname = "sched"\nmax_actors = ${N + 100}\nmax_actors_per_node = ${N + 100}\n[nats]\nurls = ["${nats.url}"]\n[wal]\nsync = "normal"\n` +
    `[[actor_templates]]\nname = "job"\ntype = "job"\nidle_after = "0"\n`,
  { env: {} },
);
const node = await KovaNode.start({ config, logger: createLogger({ level: "warn" }), types: new ActorTypeRegistry([load.actor]), modelScheduler: scheduler });
const bus = node.busClient;
const ids = Array.from({ length: N }, (_, i) => `job--k${i}`);
const sendAll = async (payloadOf) => {
  for (let i = 0; i < ids.length; i += 200) {
    await Promise.all(
      ids.slice(i, i + 200).map((id, j) => bus.send(createEnvelope({ from: "bench", to: id, type: "task_delegate", payload: payloadOf(i + j) }))),
    );
  }
};
try {
  console.log(`model-call throughput: ${fmt(N)} active instances, one ${MODEL_MS} ms call each, ${SLOTS} slots (${machine()})`);
  let t0 = performance.now();
  await sendAll(() => ({ call: false }));
  await waitFor(() => done >= N, 600_000, "activation of every instance", 200);
  console.log(`  activation of ${fmt(N)} instances (first message each, no model call): ${fmt(performance.now() - t0)} ms`);
  const ideal = (SLOTS * 1000) / MODEL_MS;
  for (const policy of POLICIES) {
    scheduler.setModel(load.modelName, { maxConcurrency: SLOTS, policy });
    done = 0;
    t0 = performance.now();
    const start = Date.now();
    await sendAll((i) => ({ call: true, user: `u${i % 50}`, priority: i % 4, deadline: start + 5_000 + (i % 100) * 100 }));
    await waitFor(() => done >= N, 600_000, `${policy} round`, 50);
    const secs = (performance.now() - t0) / 1000;
    const lane = scheduler.stats()[0];
    const classes = Object.entries(lane.classes)
      .map(([k, v]) => `${k} p50 ${fmt(v.waitMs.p50)}/p99 ${fmt(v.waitMs.p99)} ms`)
      .join("; ");
    console.log(
      `  ${policy.padEnd(11)} ${fmt(N / secs)} calls/s = ${((N / secs / ideal) * 100).toFixed(0)}% of the ideal ${fmt(ideal)}/s (${secs.toFixed(1)} s); slot waits: ${classes}`,
    );
  }
} finally {
  await node.stop();
  await load[Symbol.asyncDispose]();
  await nats.stop();
  rmSync(dir, { recursive: true, force: true });
}
