// Kova's overhead per model call: one agent turn with one model call (no tools) against
// the scripted server with zero latency, vs the `openai` client calling the same server
// directly (streaming, as the agent does). Alternating windows, so load from other
// processes hits both alike. Target: p50 ≤ 1.5× the direct call plus the journal write.
// Also splits a turn into before the provider call, the call, and after it, from the
// scripted server's timestamps. AGENTS_BENCH_RUNS per window (default 100), _ROUNDS (5),
// AGENTS_BENCH_WAL (full | normal, default full).
import OpenAI from "openai";
import { askAgent } from "../dist/agents/index.js";
import { counterActor } from "../dist/actors/index.js";
import { createEnvelope } from "../dist/bus/index.js";
import { scriptedReply } from "../dist/testing/index.js";
import { machine } from "./actors-lib.mjs";
import { median, pct, startAgentBench } from "./agents-lib.mjs";

const RUNS = Number(process.env.AGENTS_BENCH_RUNS ?? 100);
const ROUNDS = Number(process.env.AGENTS_BENCH_ROUNDS ?? 5);
const walSync = process.env.AGENTS_BENCH_WAL ?? "full";

const b = await startAgentBench({ agents: [{ id: "bench", model: "main", system: "Be brief." }], walSync, scripted: { handler: () => scriptedReply.text("the answer is 42", { usage: { inputTokens: 20, outputTokens: 5 } }) } });
try {
  await b.host.start("bench", "bench");
  // The actor runtime alone (journaled turn, checkpoint, reply; no model): what an agent turn builds on.
  b.types.register(counterActor);
  await b.host.start("c1", "counter");
  const actorTurn = () => b.client.ask(createEnvelope({ from: "bench", to: "c1", type: "task_delegate", payload: null }), { checkAgent: false });
  const openai = new OpenAI({ baseURL: b.model.url, apiKey: "bench", maxRetries: 0 });
  const direct = async () => {
    const s = await openai.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "question" }], stream: true, stream_options: { include_usage: true } });
    for await (const _ of s);
  };
  // Phases from the events' timestamps and the scripted server's log (Date.now, 1 ms resolution).
  const phases = { "send → run_started": [], "run_started → provider request": [], "provider call": [], "response → run_stream_end": [], "run_stream_end → reply": [] };
  const viaKova = async () => {
    const ev = {};
    const t0 = Date.now();
    const n = b.model.requests.length;
    await askAgent(b.client, "bench", "question", { checkAgent: false, onEvent: (e) => (ev[e.type] ??= e.ts) });
    const t1 = Date.now();
    const r = b.model.requests[n];
    const end = r.endedAt ?? r.at;
    phases["send → run_started"].push(ev.run_started - t0);
    phases["run_started → provider request"].push(r.at - ev.run_started);
    phases["provider call"].push(end - r.at);
    phases["response → run_stream_end"].push(ev.run_stream_end - end);
    phases["run_stream_end → reply"].push(t1 - ev.run_stream_end);
  };
  const sample = async (fn) => {
    const xs = [];
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      await fn();
      xs.push(performance.now() - t);
    }
    return xs;
  };
  for (let i = 0; i < 20; i++) await viaKova(); // warm-up: SDK import, tokenizer, KV buckets, consumer
  for (let i = 0; i < 20; i++) await direct();
  for (let i = 0; i < 20; i++) await actorTurn();
  for (const k of Object.keys(phases)) phases[k] = [];
  const kova = [];
  const base = [];
  const actor = [];
  for (let round = 0; round < ROUNDS; round++) {
    base.push(...(await sample(direct)));
    kova.push(...(await sample(viaKova)));
    actor.push(...(await sample(actorTurn)));
  }
  const f = (x) => x.toFixed(2);
  console.log(`agents overhead (${machine()}, WAL sync ${walSync}, ${ROUNDS}×${RUNS} runs each)`);
  console.log(`  openai client direct : p50 ${f(median(base))} ms, p99 ${f(pct(base, 0.99))} ms`);
  console.log(`  agent turn via Kova  : p50 ${f(median(kova))} ms, p99 ${f(pct(kova, 0.99))} ms`);
  console.log(`  ratio p50            : ${(median(kova) / median(base)).toFixed(2)}×`);
  console.log(`  plain actor turn     : p50 ${f(median(actor))} ms (counter, no model: the journaled turn an agent run is built on)`);
  console.log("  where a turn's time goes (p50, ms):");
  for (const [k, xs] of Object.entries(phases)) console.log(`    ${k.padEnd(32)} ${median(xs)}`);
} finally {
  await b.close();
}
