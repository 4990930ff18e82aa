// Workflow step overhead: a workflow of STEPS sequential agent steps against the same
// agent asked directly (KovaClient.ask, one at a time), in one in-process node, rounds
// alternating. A workflow step costs: the run's turn for the previous result (WAL append,
// a journaled send, two journaled events, checkpoint CAS) plus the agent's own turn; a
// direct ask costs the agent's turn and the reply. The difference is Kova's workflow
// overhead per step. KOVA_BENCH_STEPS (default 10), KOVA_BENCH_ROUNDS (default 6),
// KOVA_BENCH_WAL_SYNC (default full).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startNatsServer } from "../dist/testing/index.js";
import { KovaClient } from "../dist/bus/index.js";
import { defineActor, ActorTypeRegistry } from "../dist/actors/index.js";
import { createLogger } from "../dist/core/logger.js";
import { parseConfig } from "../dist/node/config.js";
import { KovaNode } from "../dist/node/node.js";
import { startRun } from "../dist/cli/workflow-commands.js";
import { machine } from "./actors-lib.mjs";

const STEPS = Number(process.env.KOVA_BENCH_STEPS ?? 10);
const ROUNDS = Number(process.env.KOVA_BENCH_ROUNDS ?? 6);
const walSync = process.env.KOVA_BENCH_WAL_SYNC ?? "full";

// The agent protocol's smallest agent: answers at once.
const echo = defineActor({
  type: "bench-echo",
  initialState: () => ({}),
  handlers: {
    task_delegate: async (ctx) => {
      const p = ctx.message.payload ?? {};
      return { output: `ok ${p.input}`, usage: { inputTokens: 1, outputTokens: 1 }, runId: p.runId ?? "r", sessionId: p.sessionId ?? "s", status: "completed" };
    },
  },
});

const server = await startNatsServer({ allowExternal: false });
const dir = mkdtempSync(join(tmpdir(), "kova-bench-wf-"));
const cluster = `b${Math.random().toString(36).slice(2, 10)}`;
const config = parseConfig(
  `[node]\nid = "n1"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\n[nats]\nurls = ["${server.url}"]\n[wal]\nsync = "${walSync}"\n[[actors]]\nid = "echo"\ntype = "bench-echo"\n`,
  { env: {} },
);
const node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([echo]) });
const client = await KovaClient.connect({ servers: server.url, cluster });
while (!node.agents().some((a) => a.id === "echo" && a.state === "Idle")) await new Promise((r) => setTimeout(r, 50));

const raw = {
  workflow: { id: "chain" },
  steps: Array.from({ length: STEPS }, (_, i) => ({ id: `s${i}`, agent: "echo", task: i === 0 ? "go" : `{{steps.s${i - 1}.output}}` })),
};

async function direct(n) {
  const t = performance.now();
  for (let i = 0; i < n; i++) await client.ask("echo", "task_delegate", { input: `x${i}` }, { timeoutMs: 30_000 });
  return (performance.now() - t) / n;
}

async function workflow() {
  const events = [];
  const sessionId = `s${Math.random().toString(36).slice(2, 10)}`;
  const stream = client.events({ sessionId });
  await client.bus.nc.flush();
  const t0 = performance.now();
  await startRun(client, { raw, input: {}, sessionId });
  for await (const e of stream) {
    events.push({ ...e, at: performance.now() });
    if (e.type === "run_stream_end" && !e.parentRunId) break;
  }
  stream.stop();
  const first = events.find((e) => e.type === "step_started").at;
  const end = events.at(-1).at;
  return { perStep: (end - first) / STEPS, start: first - t0 };
}

await direct(20);
await workflow(); // warm-up
const asks = [];
const steps = [];
const starts = [];
for (let r = 0; r < ROUNDS; r++) {
  asks.push(await direct(STEPS * 2));
  const w = await workflow();
  steps.push(w.perStep);
  starts.push(w.start);
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ask = median(asks);
const step = median(steps);
console.log(`workflow step overhead (${machine()}, WAL sync ${walSync}, ${STEPS} steps x ${ROUNDS} rounds, medians)`);
console.log(`  direct ask (agent turn + reply):            ${ask.toFixed(1)} ms`);
console.log(`  workflow agent step (run turn + agent turn): ${step.toFixed(1)} ms  (${(step / ask).toFixed(2)}x)`);
console.log(`  overhead per step:                          ${(step - ask).toFixed(1)} ms`);
console.log(`  run start (spawn, placement, first step):   ${median(starts).toFixed(1)} ms`);
await client.close();
await node.stop("bench");
await server.stop();
rmSync(dir, { recursive: true, force: true });
