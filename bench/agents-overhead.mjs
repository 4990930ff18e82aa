// Kova's overhead per model call: one agent turn with one model call (no tools) against
// the scripted server with zero latency, vs the `openai` client calling the same server
// directly (streaming, as the agent does). Alternating windows, so load from other
// processes hits both alike. Target: p50 ≤ 1.5× the direct call plus the journal write.
// Then one traced window (the `kova:phase` diagnostics channel) says where a run's time
// goes, phase by phase (AGENTS_BENCH_SHOW_RUN=1 also lists the median run). AGENTS_BENCH_RUNS
// per window (default 100), _ROUNDS (5), AGENTS_BENCH_WAL (full | normal, default full),
// _WARMUP (turns before measuring, default 1,100: past the default processed window);
// KOVA_BENCH_DIR puts the WAL elsewhere (/dev/shm: without the disk's flush time).
// A third baseline, the floor (bench/agents-floor.mjs), makes the same durable round trips
// by hand with raw nats.js and lmdb: Kova's own overhead is the ratio to it.
import OpenAI from "openai";
import { askAgent } from "../dist/agents/index.js";
import { counterActor } from "../dist/actors/index.js";
import { createEnvelope } from "../dist/bus/index.js";
import { scriptedReply } from "../dist/testing/index.js";
import { machine } from "./actors-lib.mjs";
import { startFloor } from "./agents-floor.mjs";
import { median, pct, phaseTable, startAgentBench } from "./agents-lib.mjs";
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import * as core from "../dist/core/index.js";

const RUNS = Number(process.env.AGENTS_BENCH_RUNS ?? 100);
const ROUNDS = Number(process.env.AGENTS_BENCH_ROUNDS ?? 5);
const walSync = process.env.AGENTS_BENCH_WAL ?? "full";
const WARMUP = Number(process.env.AGENTS_BENCH_WARMUP ?? 1100);

const b = await startAgentBench({
  agents: [{ id: "bench", model: "main", system: "Be brief." }],
  walSync,
  scripted: { handler: () => scriptedReply.text("the answer is 42", { usage: { inputTokens: 20, outputTokens: 5 } }) },
});
try {
  await b.host.start("bench", "bench");
  // The actor runtime alone (journaled turn, checkpoint, reply; no model): what an agent turn builds on.
  b.types.register(counterActor);
  await b.host.start("c1", "counter");
  const actorTurn = () => b.client.ask(createEnvelope({ from: "bench", to: "c1", type: "task_delegate", payload: null }), { checkAgent: false });
  const openai = new OpenAI({ baseURL: b.model.url, apiKey: "bench", maxRetries: 0 });
  const direct = async () => {
    const s = await openai.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "question" },
      ],
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const _ of s);
  };
  const viaKova = () => askAgent(b.client, "bench", "question", { checkAgent: false });
  const floor = await startFloor(b.nats.url, direct);
  const least = await startFloor(b.nats.url, direct, { minimal: true });
  const sample = async (fn) => {
    const xs = [];
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      await fn();
      xs.push(performance.now() - t);
    }
    return xs;
  };
  // Warm-up: SDK import, tokenizer, KV buckets, consumer; and the steady state of a busy
  // actor, whose checkpoint carries a full processed-ids window (1,000 by default).
  for (let i = 0; i < WARMUP; i++) await viaKova();
  for (let i = 0; i < 20; i++) await direct();
  for (let i = 0; i < WARMUP; i++) await actorTurn();
  for (let i = 0; i < 20; i++) await floor.turn();
  for (let i = 0; i < 20; i++) await least.turn();
  const kova = [];
  const base = [];
  const actor = [];
  const bare = [];
  const minimal = [];
  const write = [];
  for (let round = 0; round < ROUNDS; round++) {
    base.push(...(await sample(direct)));
    kova.push(...(await sample(viaKova)));
    actor.push(...(await sample(actorTurn)));
    bare.push(...(await sample(floor.turn)));
    minimal.push(...(await sample(least.turn)));
    write.push(...(await sample(floor.journalWrite)));
  }
  await floor.close();
  await least.close();
  const f = (x) => x.toFixed(2);
  console.log(`agents overhead (${machine()}, WAL sync ${walSync}, ${ROUNDS}×${RUNS} runs each)`);
  console.log(`  openai client direct : p50 ${f(median(base))} ms, p99 ${f(pct(base, 0.99))} ms`);
  console.log(`  agent turn via Kova  : p50 ${f(median(kova))} ms, p99 ${f(pct(kova, 0.99))} ms`);
  console.log(`  ratio p50            : ${(median(kova) / median(base)).toFixed(2)}×`);
  console.log(`  plain actor turn     : p50 ${f(median(actor))} ms (counter, no model: the journaled turn an agent run is built on)`);
  console.log(`  floor, by hand       : p50 ${f(median(bare))} ms, p99 ${f(pct(bare, 0.99))} ms (the same durable round trips, raw nats.js + lmdb)`);
  console.log(
    `  ratio p50 to floor   : ${(median(kova) / median(bare)).toFixed(2)}× (Kova's own overhead); floor / direct ${(median(bare) / median(base)).toFixed(2)}× (the guarantees' price)`,
  );
  const target = 1.5 * median(base) + median(write);
  console.log(`  journal write        : p50 ${f(median(write))} ms (one flushed lmdb put of a model step)`);
  console.log(`  target               : ${f(target)} ms (1.5 × direct + journal write)`);
  console.log(
    `  least durable turn   : p50 ${f(median(minimal))} ms (send, delivery, model call, one flushed write, reply: no framework, no other guarantee) = ${(median(minimal) / target).toFixed(2)}× the target`,
  );
  // A build without the channel (an older one, compared under the same load) skips this.
  const { PHASE_CHANNEL } = core;
  if (PHASE_CHANNEL !== undefined) {
    // Where a run's time goes: one more window with the kova:phase channel subscribed (so the
    // timed windows above ran without it), every phase's start and duration relative to the
    // moment askAgent was called, p50 over the window. Concurrent phases overlap.
    const spans = [];
    const onSpan = (s) => spans.push(s);
    subscribe(PHASE_CHANNEL, onSpan);
    const runs = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await viaKova();
      runs.push({ t0, t1: performance.now(), spans: [] });
    }
    unsubscribe(PHASE_CHANNEL, onSpan);
    // A span belongs to the run whose turn had started last when it began (runs are
    // sequential, and a run's tail — WAL complete, ack — may overlap the next ask); the
    // caller's own send belongs to the run it was asked for.
    const starts = spans.filter((sp) => sp.phase === "turn.start").map((sp) => sp.start);
    for (const sp of spans) {
      const i =
        sp.phase === "a2a.send" || sp.phase === "mailbox.delivered" ? runs.findLastIndex((r) => r.t0 <= sp.start) : starts.findLastIndex((t) => t <= sp.start);
      runs[i]?.spans.push(sp);
    }
    console.log(`  where a run's time goes (p50 over ${RUNS} traced runs, ms after askAgent is called; phases that overlap ran concurrently):`);
    for (const line of phaseTable(runs)) console.log(`    ${line}`);
    if (process.env.AGENTS_BENCH_SHOW_RUN) {
      const mid = [...runs].sort((a, b) => a.t1 - a.t0 - (b.t1 - b.t0))[runs.length >> 1];
      console.log(`  the median run (${f(mid.t1 - mid.t0)} ms):`);
      for (const sp of mid.spans.sort((a, b) => a.start - b.start))
        console.log(`    ${sp.phase.padEnd(28)} ${f(sp.start - mid.t0).padStart(6)} ${f(sp.end - mid.t0).padStart(6)}`);
    }
  }
} finally {
  await b.close();
}
