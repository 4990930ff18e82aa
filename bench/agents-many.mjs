// N agents on one node, each running a 3-call tool loop (two calculator calls, then the
// answer) against a scripted model with 500 ms latency, all at once. The ideal wall time
// is set by the scheduler: ceil(3N / max_concurrency) × 500 ms. Target: within 1.3× of it.
// Also the node's memory per hosted agent (heap and RSS growth after starting them).
// AGENTS_BENCH_N (default 1000), AGENTS_BENCH_CONCURRENCY (default 100),
// AGENTS_BENCH_LATENCY_MS (default 500), AGENTS_BENCH_WAL (default full).
import { askAgent } from "../dist/agents/index.js";
import { scriptedReply } from "../dist/testing/index.js";
import { machine } from "./actors-lib.mjs";
import { mb, startAgentBench } from "./agents-lib.mjs";

const N = Number(process.env.AGENTS_BENCH_N ?? 1000);
const C = Number(process.env.AGENTS_BENCH_CONCURRENCY ?? 100);
const LATENCY = Number(process.env.AGENTS_BENCH_LATENCY_MS ?? 500);
const walSync = process.env.AGENTS_BENCH_WAL ?? "full";

const b = await startAgentBench({
  agents: [{ id: "many", model: "main", tools: ["calculator"] }],
  maxConcurrency: C,
  walSync,
  mailbox: { ackWaitMs: 60_000 },
  scripted: {
    latencyMs: LATENCY,
    handler: (req) => {
      const results = req.messages.filter((m) => m.role === "tool").length;
      if (results < 2)
        return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: `${results}+1` } }], { usage: { inputTokens: 50, outputTokens: 10 } });
      return scriptedReply.text("done", { usage: { inputTokens: 80, outputTokens: 2 } });
    },
  },
});
try {
  const ids = Array.from({ length: N }, (_, i) => `many-${i}`);
  globalThis.gc?.();
  const m0 = process.memoryUsage();
  const s0 = performance.now();
  for (let i = 0; i < N; i += 50) await Promise.all(ids.slice(i, i + 50).map((id) => b.host.start(id, "many")));
  const startMs = performance.now() - s0;
  globalThis.gc?.();
  const m1 = process.memoryUsage();
  // Warm the SDK, tokenizer and buckets on one agent so the measured wave is the loop itself.
  await askAgent(b.client, ids[0], "warm-up", { checkAgent: false, timeoutMs: 60_000 });
  const before = b.model.requests.length;
  let peakRss = 0;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 200);
  const t0 = performance.now();
  const results = await Promise.all(ids.map((id) => askAgent(b.client, id, "add twice", { checkAgent: false, timeoutMs: 600_000 })));
  const wall = performance.now() - t0;
  clearInterval(sampler);
  const completed = results.filter((r) => r.status === "completed").length;
  const calls = b.model.requests.length - before;
  const ideal = Math.ceil((3 * N) / C) * LATENCY;
  console.log(`agents many (${machine()}, WAL sync ${walSync}): ${N} agents × 3-call tool loop, model latency ${LATENCY} ms, max_concurrency ${C}`);
  console.log(`  completed ${completed}/${N}, model calls ${calls}`);
  console.log(`  wall ${(wall / 1000).toFixed(2)} s, ideal ${(ideal / 1000).toFixed(2)} s, ratio ${(wall / ideal).toFixed(2)}×`);
  console.log(`  starting ${N} agents: ${(startMs / 1000).toFixed(1)} s`);
  console.log(
    `  node memory per hosted agent: heap ${((m1.heapUsed - m0.heapUsed) / N / 1024).toFixed(1)} KB, rss ${((m1.rss - m0.rss) / N / 1024).toFixed(1)} KB; rss after start ${mb(m1.rss)} MB, peak during the runs ${mb(peakRss)} MB`,
  );
  const stats = b.runtime.scheduler.stats()[0];
  console.log(`  scheduler: granted ${stats.granted}, wait p50 ${stats.classes.default?.waitMs.p50} ms, p99 ${stats.classes.default?.waitMs.p99} ms`);
} finally {
  await b.close();
}
