// An experiment of 1,000 cells (2 subjects x 100 tasks x 5 repetitions) on 3 node
// processes (docs/evals.md), each cell an agent run with one call to a scripted model.
//
// Zero-latency model: Kova's overhead per cell is the experiment's wall time minus the wall
// time of the same 1,000 model calls made directly (the `openai` client, as many in flight
// as the experiment's concurrency), divided by the cells; both measured in the same run,
// alternating, so their ratio holds on a loaded machine. Also the median latency of a cell
// (its attempt record's duration: delegation sent to its answer back) beside a direct call's.
//
// 1 s model: the wall time against the ideal for the configured concurrency,
// ideal = ceil(cells / concurrency) x latency.
//
// Each run also prints the CPU time per cell of the node processes and of nats-server
// (/proc/<pid>/stat over the experiment), which moves less with the machine's load; where
// each turn of the experiment's actor spends its time: bench/eval-phases-preload.mjs.
//
// KOVA_BENCH_RUNS (default 3, after one warm-up), KOVA_BENCH_CONCURRENCY (default 50),
// KOVA_BENCH_LATENCIES (default "0,1000"), KOVA_BENCH_WAL_SYNC (default full).
import { readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { createOpenAiModel, parseModelsConfig } from "../dist/agents/index.js";
import { defineExperiment, evalStore, runExperiment } from "../dist/eval/index.js";
import { scriptedReply, startScriptedModelServer } from "../dist/testing/index.js";
import { fmt, machine, startCluster } from "./actors-lib.mjs";

const RUNS = Number(process.env.KOVA_BENCH_RUNS ?? 3);
const CONCURRENCY = Number(process.env.KOVA_BENCH_CONCURRENCY ?? 50);
const LATENCIES = (process.env.KOVA_BENCH_LATENCIES ?? "0,1000").split(",").map(Number);
const TASKS = 100;
const REPETITIONS = 5;

let latencyMs = 0;
const model = await startScriptedModelServer({
  handler: (req) => {
    const i = Number(/^q(\d+)/.exec(String(req.messages.at(-1)?.content))?.[1] ?? 0);
    return scriptedReply.text(String(2 * i), { usage: { inputTokens: 20, outputTokens: 2 }, ...(latencyMs ? { latencyMs } : {}) });
  },
});
const extraToml = [
  `[models.main]`,
  `base_url = "${model.url}"`,
  `model = "scripted-model"`,
  `max_concurrency = ${CONCURRENCY * 2}`,
  `max_retries = 0`,
  `[[agents]]`,
  `id = "helper"`,
  `model = "main"`,
  `system = "You are A."`,
].join("\n");
const c = await startCluster({ nodes: ["n1", "n2", "n3"], walSync: process.env.KOVA_BENCH_WAL_SYNC ?? "full", extraToml });
const tasks = Array.from({ length: TASKS }, (_, i) => ({ id: `t${i}`, input: `q${i}: what is ${i} + ${i}?`, expected: String(2 * i) }));
const spec = (name) =>
  defineExperiment({
    experiment: { name, repetitions: REPETITIONS, concurrency: CONCURRENCY, per_subject: Math.ceil(CONCURRENCY / 2) },
    subjects: [
      { id: "a", agent: "helper" },
      { id: "b", agent: "helper", system: "You are B." },
    ],
    tasks,
    verifiers: [{ type: "exact" }],
  });
const CELLS = 2 * TASKS * REPETITIONS;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const direct = await createOpenAiModel(parseModelsConfig({ main: { base_url: model.url, model: "scripted-model", max_retries: 0 } }).get("main"));

/** The same calls an experiment makes, made directly: `CELLS` completions, `CONCURRENCY` at a time. */
async function directCalls() {
  const latencies = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < CELLS) {
        const i = next++ % TASKS;
        const s = performance.now();
        await direct.complete({
          messages: [
            { role: "system", content: "You are A." },
            { role: "user", content: tasks[i].input },
          ],
        });
        latencies.push(performance.now() - s);
      }
    }),
  );
  return { wall: performance.now() - t0, p50: median(latencies) };
}

/**
 * CPU time (user + system, ms) the node processes and nats-server have used so far, from
 * /proc/<pid>/stat (clock ticks of 10 ms); undefined where /proc is not there.
 */
function cpuMs() {
  const of = (pid) => {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  };
  try {
    return { nodes: [...c.pids().values()].reduce((sum, pid) => sum + of(pid), 0), nats: c.server.pid ? of(c.server.pid) : Number.NaN };
  } catch {
    return undefined;
  }
}

async function experiment(name) {
  const cpu0 = cpuMs();
  const t0 = performance.now();
  const report = await runExperiment(c.bus, spec(name));
  const wall = performance.now() - t0;
  const cpu1 = cpuMs();
  const cpu = cpu0 && cpu1 ? { nodes: (cpu1.nodes - cpu0.nodes) / CELLS, nats: (cpu1.nats - cpu0.nats) / CELLS } : undefined;
  if (report.status !== "completed" || report.subjects.some((s) => s.scored !== CELLS / 2))
    throw new Error(`experiment ${report.experimentId} ended ${report.status}`);
  const records = await (await evalStore(c.bus)).attempts(report.experimentId);
  return { wall, p50: median(records.map((r) => r.durationMs)), attempts: records.length, cpu };
}

const cpuText = (cpu) => (cpu ? `; CPU per cell: nodes ${cpu.nodes.toFixed(2)} ms, nats-server ${cpu.nats.toFixed(2)} ms` : "");

try {
  console.log(
    `eval cells: ${CELLS} cells (2 subjects x ${TASKS} tasks x ${REPETITIONS} repetitions) on 3 node processes, concurrency ${CONCURRENCY}, WAL sync ${process.env.KOVA_BENCH_WAL_SYNC ?? "full"}; ${machine()}, ${cpus().length} cores, load ${loadavg()
      .map((x) => x.toFixed(1))
      .join(" ")}`,
  );
  for (const lat of LATENCIES) {
    latencyMs = lat;
    const rows = [];
    for (let run = 0; run <= RUNS; run++) {
      // The first run warms up (instances activated, the SDK loaded, JIT); then they alternate with the direct calls.
      const k = await experiment(`bench-${lat}-${run}`);
      const d = lat === 0 ? await directCalls() : undefined;
      if (run > 0) rows.push({ k, d, load: loadavg()[0] });
    }
    if (lat === 0) {
      for (const r of rows) {
        console.log(
          `  model 0 ms: experiment ${fmt(r.k.wall)} ms, direct ${fmt(r.d.wall)} ms -> overhead ${((r.k.wall - r.d.wall) / CELLS).toFixed(2)} ms per cell; cell p50 ${r.k.p50} ms vs direct call p50 ${r.d.p50.toFixed(2)} ms${cpuText(r.k.cpu)} (load ${r.load.toFixed(1)})`,
        );
      }
      const per = rows.map((r) => (r.k.wall - r.d.wall) / CELLS);
      console.log(
        `model 0 ms: overhead per cell ${Math.min(...per).toFixed(2)}-${Math.max(...per).toFixed(2)} ms (median ${median(per).toFixed(2)}, target <= 10)`,
      );
    } else {
      const ideal = Math.ceil(CELLS / CONCURRENCY) * lat;
      for (const r of rows)
        console.log(
          `  model ${lat} ms: experiment ${fmt(r.k.wall)} ms, ideal ${fmt(ideal)} ms -> ${(r.k.wall / ideal).toFixed(3)} x ideal${cpuText(r.k.cpu)} (load ${r.load.toFixed(1)})`,
        );
      const ratios = rows.map((r) => r.k.wall / ideal);
      console.log(`model ${lat} ms: wall time ${Math.min(...ratios).toFixed(3)}-${Math.max(...ratios).toFixed(3)} x ideal (target <= 1.2)`);
    }
  }
} finally {
  await c.stop();
  await model.close();
}
