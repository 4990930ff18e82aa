// Activation latency of template instances (virtual actors) on 3 node processes: from the
// JetStream ack of the first message to a never-seen instance to the start of its turn
// (the probe actor's probe_start event), p50/p99, for each activation path:
//   listener  a plain durable send; a node's core-NATS listener on kova.<c>.a2a.* activates it
//   sweep     the same with [cluster] activation_listener = false: only the A2A stream sweep
//             (activation_sweep_ms, default 1 s) finds it
//   ask       KovaClient-style ask: an activation request, then the send (latency to the reply)
//   warm      a second message to an instance that is already active (the baseline)
// KOVA_BENCH_INSTANCES (default 200 per path), KOVA_BENCH_CONCURRENCY (default 10).
import { REPO, createEnvelope, fmt, machine, startCluster } from "./actors-lib.mjs";
import { percentile } from "./bus-lib.mjs";

const N = Number(process.env.KOVA_BENCH_INSTANCES ?? 200);
const WIDTH = Number(process.env.KOVA_BENCH_CONCURRENCY ?? 10);
const nodes = ["n1", "n2", "n3"];
const probe = `${REPO}/test/fixtures/node/probe-actor.mjs`;
const template = `[[actor_templates]]\nname = "act"\ntype = "probe"\nidle_after = "0"\n`;

async function run(listener) {
  const c = await startCluster({ nodes, walSync: "normal", modules: [probe], extraToml: template, clusterToml: [`activation_listener = ${listener}`] });
  try {
    const started = new Map();
    const sub = c.nc.subscribe(`kova.${c.cluster}.events.actors.*`, {
      callback: (_e, m) => {
        const e = m.json();
        if (e.type === "probe_start") started.set(e.data.id, e.ts);
      },
    });
    await c.nc.flush();
    const measure = async (ids, how) => {
      const lat = [];
      for (let i = 0; i < ids.length; i += WIDTH) {
        await Promise.all(
          ids.slice(i, i + WIDTH).map(async (id) => {
            const env = createEnvelope({ from: "bench", to: id, type: "task_delegate", payload: {} });
            if (how === "ask") {
              const t0 = Date.now();
              await c.bus.ask(env, { timeoutMs: 30_000 });
              lat.push(Date.now() - t0);
              return;
            }
            await c.bus.send(env);
            const acked = Date.now();
            for (let w = 0; !started.has(env.id); w++) {
              if (w > 3000) throw new Error(`no turn for ${id}`);
              await new Promise((r) => setTimeout(r, 2));
            }
            lat.push(started.get(env.id) - acked);
          }),
        );
      }
      return lat.sort((a, b) => a - b);
    };
    const report = (name, lat) =>
      console.log(`  ${name.padEnd(9)} n=${lat.length} p50 ${fmt(percentile(lat, 50))} ms  p99 ${fmt(percentile(lat, 99))} ms  max ${fmt(lat.at(-1))} ms`);
    const cold = Array.from({ length: N }, (_, i) => `act--${listener ? "l" : "s"}${i}`);
    report(listener ? "listener" : "sweep", await measure(cold, "send"));
    if (listener) {
      report("warm", await measure(cold, "send"));
      report(
        "ask",
        await measure(
          Array.from({ length: N }, (_, i) => `act--a${i}`),
          "ask",
        ),
      );
    }
    sub.unsubscribe();
  } finally {
    await c.stop();
  }
}

console.log(`activation latency, first message acked → turn start, ${N} instances per path, ${WIDTH} at a time, 3 node processes (${machine()})`);
await run(true);
await run(false);
