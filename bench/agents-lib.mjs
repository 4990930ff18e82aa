// Shared helpers of the agent benchmarks: an in-process "node" (ActorHost on its own
// WAL, AgentRuntime over the real bus, the real `openai` client) next to a nats-server
// and a scripted model server of its own.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startNatsServer, startScriptedModelServer } from "../dist/testing/index.js";
import { Bus } from "../dist/bus/index.js";
import { Wal } from "../dist/wal/index.js";
import { ActorHost, ActorTypeRegistry } from "../dist/actors/index.js";
import { ToolRegistry, builtinTools, toolsConfigFrom } from "../dist/tools/index.js";
import { AgentRuntime, agentActor, defineAgent, parseModelsConfig } from "../dist/agents/index.js";
import { createLogger } from "../dist/core/logger.js";
import { MirroredSettingsStore } from "../dist/cluster/settings-mirror.js";

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
export const pct = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
export const mb = (bytes) => (bytes / 1024 / 1024).toFixed(1);

/**
 * Lines of a phase timeline from traced runs ({ t0, t1, spans: PhaseSpan[] }): each phase
 * (the n-th occurrence of a name in a run is its own row, `wal.replace#2`) with the p50 of
 * its start and end relative to t0 and of its duration, in start order; then the reply.
 */
export function phaseTable(runs) {
  const rows = new Map();
  for (const { t0, spans } of runs) {
    const seen = new Map();
    for (const s of [...spans].sort((a, b) => a.start - b.start)) {
      const n = (seen.get(s.phase) ?? 0) + 1;
      seen.set(s.phase, n);
      const key = n === 1 ? s.phase : `${s.phase}#${n}`;
      let r = rows.get(key);
      if (!r) rows.set(key, (r = { key, start: [], end: [], took: [] }));
      r.start.push(s.start - t0);
      r.end.push(s.end - t0);
      r.took.push(s.end - s.start);
    }
  }
  const f = (x) => x.toFixed(2).padStart(6);
  const out = [`${"phase".padEnd(28)} ${"start".padStart(6)} ${"end".padStart(6)} ${"took".padStart(6)}  runs`];
  // The runs that were the median: a row's start, end and duration are p50s of their own.
  for (const r of [...rows.values()].sort((a, b) => median(a.start) - median(b.start))) {
    out.push(`${r.key.padEnd(28)} ${f(median(r.start))} ${f(median(r.end))} ${f(median(r.took))}  ${r.took.length}`);
  }
  out.push(`${"reply received".padEnd(28)} ${f(median(runs.map((r) => r.t1 - r.t0)))}`);
  return out;
}

/**
 * Starts nats-server, a scripted model server and one in-process host with `agents`
 * (AgentSpec list). `walSync` defaults to `full`, the production default.
 */
export async function startAgentBench({ agents, scripted = {}, maxConcurrency = 8, walSync = "full", mailbox = {} }) {
  const nats = await startNatsServer({ allowExternal: false });
  const model = await startScriptedModelServer(scripted);
  const dir = mkdtempSync(join(process.env.KOVA_BENCH_DIR ?? tmpdir(), "kova-bench-agents-"));
  const cluster = `b${Math.random().toString(36).slice(2, 10)}`;
  const log = createLogger({ level: "silent" });
  const bus = await Bus.connect({ servers: nats.url, cluster, logger: log });
  await bus.ensureStreams();
  const client = await Bus.connect({ servers: nats.url, cluster, logger: log });
  const wal = await Wal.open({ dir: join(dir, "wal"), sync: walSync, ringBits: 16 });
  const types = new ActorTypeRegistry();
  const host = new ActorHost({ bus, wal, nodeId: "bench", types, logger: log, mailbox });
  const models = parseModelsConfig({ main: { base_url: model.url, model: "gpt-4o-mini", max_concurrency: maxConcurrency, max_retries: 0 } }, { env: {} });
  const runtime = new AgentRuntime({
    bus,
    models,
    tools: new ToolRegistry().register(...builtinTools(toolsConfigFrom(undefined))),
    logger: log,
    // As a node does (src/node/agent-services.ts): model switches read from a watched copy.
    openSettings: () => MirroredSettingsStore.open({ js: bus.js, nc: bus.nc, cluster, replicas: 1, logger: log }),
  });
  const defs = agents.map((a) => defineAgent(a));
  // Agents of one definition share a type: register each definition's id once.
  for (const d of new Map(defs.map((d) => [d.id, d])).values()) types.register(agentActor(d, runtime));
  return {
    nats,
    model,
    bus,
    client,
    host,
    types,
    runtime,
    defs,
    async close() {
      await host.stopAll().catch(() => undefined);
      runtime.close();
      await client.close();
      await bus.close();
      await wal.close();
      await model.close();
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
