// What the step journal on NATS costs (src/actors/step-journal.ts): the same actor, on
// the same nats-server and the same kind of WAL, with `stepJournal: "nats"` (the default:
// each step also appended to KOVA_<C>_JOURNAL) and `"local"` (the WAL only), alternating
// in one run.
//  1. latency per journaled step, p50 / p99, for an idempotent step (one WAL write + one
//     NATS append) and a non-idempotent one (intent + result: two of each);
//  2. actor throughput (turns/s) of 50 counters, send → turn (one step) → checkpoint → ack.
// KOVA_BENCH_STEPS (default 2000 per kind and mode), KOVA_BENCH_MESSAGES (default 2000),
// KOVA_BENCH_WAL_SYNC (default normal: with "full" an fsync per write dominates and hides the parallel NATS append).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startNatsServer } from "../dist/testing/index.js";
import { Bus, createEnvelope } from "../dist/bus/index.js";
import { Wal } from "../dist/wal/index.js";
import { ActorHost, ActorTypeRegistry, counterActor, defineActor } from "../dist/actors/index.js";
import { createLogger } from "../dist/core/logger.js";
import { fmt, machine } from "./actors-lib.mjs";

const STEPS = Number(process.env.KOVA_BENCH_STEPS ?? 2000);
const MESSAGES = Number(process.env.KOVA_BENCH_MESSAGES ?? 2000);
const COUNTERS = 50;
const STEPS_PER_TURN = 50;
const walSync = process.env.KOVA_BENCH_WAL_SYNC ?? "normal";
const log = createLogger({ level: "silent" });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const server = await startNatsServer({ allowExternal: false });
const cluster = `bj${Math.random().toString(36).slice(2, 8)}`;
const dir = mkdtempSync(join(tmpdir(), "kova-bench-journal-"));

/** Each turn runs STEPS_PER_TURN steps of the kind its payload names and reports each step's time. */
const timings = { nats: { idem: [], once: [] }, local: { idem: [], once: [] } };
const stepper = defineActor({
  type: "stepper",
  initialState: () => ({ turns: 0 }),
  handlers: {
    task_delegate: async (ctx) => {
      const { mode, kind } = ctx.message.payload;
      for (let i = 0; i < STEPS_PER_TURN; i++) {
        const t0 = performance.now();
        await ctx.step(`s${i}`, () => ({ i, text: "a model reply or tool result of modest size ".repeat(4) }), { idempotent: kind === "idem" });
        timings[mode][kind].push(performance.now() - t0);
      }
      ctx.state.turns++;
      return ctx.state.turns;
    },
  },
});

async function host(mode) {
  const bus = await Bus.connect({ servers: server.url, cluster, logger: log });
  await bus.ensureStreams();
  const wal = await Wal.open({ dir: join(dir, mode), sync: walSync, ringBits: 12, logger: log });
  const h = new ActorHost({ bus, wal, nodeId: mode, types: new ActorTypeRegistry([counterActor, stepper]), logger: log, stepJournal: mode });
  return {
    bus,
    wal,
    host: h,
    close: async () => {
      await h.stopAll();
      await bus.close();
      await wal.close();
    },
  };
}

const hosts = { nats: await host("nats"), local: await host("local") };
for (const mode of ["nats", "local"]) {
  await hosts[mode].host.start(`st-${mode}`, "stepper");
  for (let i = 0; i < COUNTERS; i++) await hosts[mode].host.start(`c-${mode}-${i}`, "counter");
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

// 1. Step latency: turns of the two modes alternate, one at a time (nothing else runs).
async function turn(mode, kind) {
  const h = hosts[mode];
  await h.bus.ask(createEnvelope({ from: "bench", to: `st-${mode}`, type: "task_delegate", payload: { mode, kind } }), { timeoutMs: 60_000 });
}
for (const kind of ["idem", "once"]) {
  await turn("nats", kind); // warm-up
  await turn("local", kind);
  timings.nats[kind].length = 0;
  timings.local[kind].length = 0;
  for (let t = 0; t < Math.ceil(STEPS / STEPS_PER_TURN); t++) {
    await turn("nats", kind);
    await turn("local", kind);
  }
}

// 2. Throughput: all counters of one mode busy, 100 sends in flight; the modes alternate in rounds.
async function throughput(mode) {
  const h = hosts[mode];
  const start = performance.now();
  const before = await Promise.all(Array.from({ length: COUNTERS }, (_, i) => h.bus.request(`c-${mode}-${i}`, "info_request", null)));
  const base = before.reduce((n, s) => n + s.count, 0);
  for (let i = 0; i < MESSAGES; i += 100) {
    const batch = [];
    for (let j = i; j < Math.min(MESSAGES, i + 100); j++) {
      batch.push(h.bus.send(createEnvelope({ from: "bench", to: `c-${mode}-${j % COUNTERS}`, type: "task_delegate", payload: null })));
    }
    await Promise.all(batch);
  }
  for (;;) {
    const states = await Promise.all(Array.from({ length: COUNTERS }, (_, i) => h.bus.request(`c-${mode}-${i}`, "info_request", null)));
    if (states.reduce((n, s) => n + s.count, 0) - base >= MESSAGES) break;
    await sleep(20);
  }
  return MESSAGES / ((performance.now() - start) / 1000);
}
const rates = { nats: [], local: [] };
for (let round = 0; round < 3; round++) {
  rates.local.push(await throughput("local"));
  rates.nats.push(await throughput("nats"));
}

const ms = (x) => x.toFixed(3);
console.log(`actors-journal: ${machine()}, WAL sync ${walSync}, ${STEPS_PER_TURN} steps per turn, ~${STEPS} steps per kind and mode`);
for (const [kind, label] of [
  ["idem", "idempotent step (1 WAL write + 1 NATS append)"],
  ["once", "non-idempotent step (intent + result: 2 of each)"],
]) {
  const n = timings.nats[kind];
  const l = timings.local[kind];
  console.log(`  ${label}`);
  console.log(`    WAL only      p50 ${ms(pct(l, 50))} ms  p99 ${ms(pct(l, 99))} ms`);
  console.log(`    WAL + NATS    p50 ${ms(pct(n, 50))} ms  p99 ${ms(pct(n, 99))} ms`);
  console.log(`    extra         p50 ${ms(pct(n, 50) - pct(l, 50))} ms  p99 ${ms(pct(n, 99) - pct(l, 99))} ms`);
}
const med = (xs) => pct(xs, 50);
console.log(`  throughput, ${COUNTERS} counters, ${MESSAGES} messages x 3 rounds (turns/s, median of rounds [min-max])`);
console.log(`    WAL only      ${fmt(med(rates.local))} [${fmt(Math.min(...rates.local))}-${fmt(Math.max(...rates.local))}]`);
console.log(`    WAL + NATS    ${fmt(med(rates.nats))} [${fmt(Math.min(...rates.nats))}-${fmt(Math.max(...rates.nats))}]`);
console.log(`    ratio         ${(med(rates.nats) / med(rates.local)).toFixed(2)}`);

await hosts.nats.close();
await hosts.local.close();
await server.stop();
rmSync(dir, { recursive: true, force: true });
