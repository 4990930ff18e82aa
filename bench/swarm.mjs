// A swarm of 100 subtasks over contract agents on 3 node processes (docs/swarm.md), with a
// scripted model of zero latency and of 1 s latency (the coordinator's plan and answer,
// and one call per subtask by the agent that runs it). Reports end-to-end time, its parts
// (plan out, all delegated, last child done, answer), Kova's overhead per subtask, and for
// the slow model the ratio to the ideal that the agents' concurrency sets:
// ideal = plan + ceil(subtasks / agents) x latency + answer.
// KOVA_BENCH_SUBTASKS (default 100), KOVA_BENCH_AGENTS (default 30), KOVA_BENCH_RUNS (default 3),
// KOVA_BENCH_LATENCIES (default "0,1000"), KOVA_BENCH_WAL_SYNC (default full).
import { join } from "node:path";
import { startScriptedModelServer, scriptedReply } from "../dist/testing/index.js";
import { runSwarm } from "../dist/swarm/index.js";
import { fmt, machine, REPO, startCluster, waitFor } from "./actors-lib.mjs";

const SUBTASKS = Number(process.env.KOVA_BENCH_SUBTASKS ?? 100);
const AGENTS = Number(process.env.KOVA_BENCH_AGENTS ?? 30);
const RUNS = Number(process.env.KOVA_BENCH_RUNS ?? 3);
const LATENCIES = (process.env.KOVA_BENCH_LATENCIES ?? "0,1000").split(",").map(Number);
const MODULE = join(REPO, "test/fixtures/swarm/contract-agents.mjs");

let latencyMs = 0;
const model = await startScriptedModelServer({
  handler: (req) => {
    const timing = latencyMs ? { latencyMs } : {};
    if (req.tools.some((t) => t.function.name === "submit_plan")) {
      const subtasks = Array.from({ length: SUBTASKS }, (_, i) => ({ task: `subtask ${i}`, capability: "research" }));
      return scriptedReply.toolCalls([{ name: "submit_plan", arguments: { subtasks } }], timing);
    }
    return scriptedReply.text("ok", timing);
  },
});
process.env.KOVA_TEST_MODEL_URL = model.url;
const agents = Array.from({ length: AGENTS }, (_, i) => ({ id: `a-${i}`, type: "swarm_researcher", module: MODULE }));
const extraToml = [
  `[models.planner]`,
  `base_url = "${model.url}"`,
  `model = "scripted-model"`,
  `max_retries = 0`,
  `[[swarms]]`,
  `id = "planner"`,
  `model = "planner"`,
  `max_subtasks = ${SUBTASKS}`,
  `deadline = "10min"`,
].join("\n");
const c = await startCluster({ nodes: ["n1", "n2", "n3"], walSync: process.env.KOVA_BENCH_WAL_SYNC ?? "full", actors: agents, extraToml });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
try {
  await waitFor(
    async () => {
      const a = await c.agents();
      return a.size === AGENTS + 1 && [...a.values()].every((r) => r.node && r.state === "Idle");
    },
    120_000,
    "placement",
    250,
  );
  const perNode = new Map();
  for (const r of (await c.agents()).values()) if (r.id !== "planner") perNode.set(r.node, (perNode.get(r.node) ?? 0) + 1);
  console.log(
    `swarm of ${SUBTASKS} subtasks, ${AGENTS} agents (${[...perNode.values()].join("/")} per node), WAL sync ${process.env.KOVA_BENCH_WAL_SYNC ?? "full"}; ${machine()}`,
  );
  for (const lat of LATENCIES) {
    latencyMs = lat;
    const rows = [];
    for (let run = 0; run < RUNS + 1; run++) {
      const marks = {};
      let done = 0;
      const t0 = performance.now();
      const result = await runSwarm(c.bus, "planner", `bench ${lat} ${run}`, {
        sessionId: `bench-${lat}-${run}`,
        onEvent: (e) => {
          const at = performance.now() - t0;
          if (e.type === "swarm_planned") marks.planned = at;
          if (e.type === "child_run_linked") marks.delegated = at;
          if (e.type === "run_completed" && e.parentRunId) {
            done++;
            if (done === SUBTASKS) marks.children = at;
          }
        },
      });
      const total = performance.now() - t0;
      if (result.missing.length) throw new Error(`${result.missing.length} subtasks missing`);
      if (run > 0) rows.push({ total, ...marks }); // the first run warms up (SDK load, JIT)
    }
    const total = median(rows.map((r) => r.total));
    const rounds = Math.ceil(SUBTASKS / AGENTS);
    const ideal = lat * (2 + rounds);
    const parts = ["planned", "delegated", "children"].map((k) => `${k} ${fmt(median(rows.map((r) => r[k])))} ms`).join(", ");
    console.log(`model latency ${lat} ms: end-to-end median ${fmt(total)} ms (runs ${rows.map((r) => fmt(r.total)).join(", ")}); ${parts}`);
    console.log(
      `  Kova's overhead: ${fmt(total - ideal)} ms in all, ${((total - ideal) / SUBTASKS).toFixed(1)} ms per subtask` +
        (lat ? `; ideal ${fmt(ideal)} ms (plan + ${rounds} rounds of ${AGENTS} agents + answer), ratio ${(total / ideal).toFixed(2)}` : ""),
    );
  }
} finally {
  await c.stop();
  await model.close();
}
