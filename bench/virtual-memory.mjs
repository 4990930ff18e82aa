// Memory of template instances (virtual actors) on 3 node processes: per active instance
// and per registered-but-passive one, node processes and nats-server.
//   1. activate KOVA_BENCH_ACTIVE (default 1,000) never-seen instances of a counter template
//      (idle_after 20 s): memory with them active;
//   2. wait until all are passivated: what a passive instance leaves (its checkpoint in KV,
//      delete markers in the registry and lease buckets);
//   3. register KOVA_BENCH_PASSIVE (default 100,000) more passive instances the way a
//      passivation leaves them (checkpoint + two delete markers, written directly), restart
//      one node (its KV watches now start over every marker), then activate 1,000 of them:
//      memory must follow the active ones.
import { readFileSync } from "node:fs";
import { Kvm } from "@nats-io/kv";
import { createEnvelope, fmt, machine, sleep, startCluster, waitFor } from "./actors-lib.mjs";

const ACTIVE = Number(process.env.KOVA_BENCH_ACTIVE ?? 1000);
const PASSIVE = Number(process.env.KOVA_BENCH_PASSIVE ?? 100_000);
const nodes = ["n1", "n2", "n3"];
const template = `[[actor_templates]]\nname = "mem"\ntype = "counter"\nidle_after = "20s"\n`;
const c = await startCluster({ nodes, walSync: "normal", extraToml: template, clusterToml: ["max_actors = 200000"] });
const anon = (pid) => Number(/^RssAnon:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) * 1024;
const snapshot = async () => {
  const st = await Promise.all(nodes.map((n) => c.status(n, 10_000)));
  const varz = await c.varz();
  return {
    hosted: st.reduce((s, x) => s + x.actors.hosted, 0),
    nodeAnon: st.reduce((s, x) => s + anon(x.pid), 0),
    nodeHeap: st.reduce((s, x) => s + x.memory.heapUsed, 0),
    server: varz.mem,
  };
};
const mb = (b) => (b / 1024 / 1024).toFixed(1);
const kbPer = (a, b, n) => ((a - b) / n / 1024).toFixed(1);
const activate = async (keys) => {
  for (let i = 0; i < keys.length; i += 50) {
    await Promise.all(keys.slice(i, i + 50).map((k) => c.bus.send(createEnvelope({ from: "bench", to: `mem--${k}`, type: "task_delegate", payload: {} }))));
  }
};
try {
  await sleep(2000);
  const base = await snapshot();
  console.log(`virtual actor memory, 3 node processes (${machine()})`);
  console.log(`  baseline: nodes ${mb(base.nodeAnon)} MB anonymous RSS (sum), nats-server ${mb(base.server)} MB`);

  const t0 = performance.now();
  await activate(Array.from({ length: ACTIVE }, (_, i) => `a${i}`));
  await waitFor(async () => (await snapshot()).hosted === ACTIVE, 120_000, "all active", 250);
  const activateMs = performance.now() - t0;
  const active = await snapshot();
  console.log(
    `  ${ACTIVE} active (activated in ${fmt(activateMs)} ms): per active instance: nodes ${kbPer(active.nodeAnon, base.nodeAnon, ACTIVE)} KB anonymous RSS, ${kbPer(active.nodeHeap, base.nodeHeap, ACTIVE)} KB JS heap; nats-server ${kbPer(active.server, base.server, ACTIVE)} KB`,
  );

  await waitFor(async () => (await snapshot()).hosted === 0, 120_000, "all passivated", 500);
  await sleep(3000);
  const passive = await snapshot();
  console.log(
    `  after all ${ACTIVE} were passivated: per passive instance: nats-server ${kbPer(passive.server, base.server, ACTIVE)} KB; nodes ${kbPer(passive.nodeAnon, base.nodeAnon, ACTIVE)} KB anonymous RSS (V8 keeps heap it grew), ${kbPer(passive.nodeHeap, base.nodeHeap, ACTIVE)} KB JS heap`,
  );

  // What a passivation leaves behind, written directly for PASSIVE more instances.
  const kvm = new Kvm(c.nc);
  const [cps, agents, leases] = await Promise.all(["checkpoints", "agents", "leases"].map((b) => kvm.open(`kova_${c.cluster}_${b}`)));
  const sample = await cps.get("mem--a0");
  const t1 = performance.now();
  for (let i = 0; i < PASSIVE; i += 500) {
    await Promise.all(
      Array.from({ length: Math.min(500, PASSIVE - i) }, async (_, j) => {
        const id = `mem--p${i + j}`;
        await cps.put(id, sample.value);
        await agents.delete(id);
        await leases.delete(id);
      }),
    );
  }
  const seedMs = performance.now() - t1;
  await sleep(3000);
  const registered = await snapshot();
  console.log(
    `  + ${fmt(PASSIVE)} passive instances (seeded in ${fmt(seedMs)} ms): nats-server ${mb(registered.server)} MB (${kbPer(registered.server, passive.server, PASSIVE)} KB per passive instance); nodes ${mb(registered.nodeAnon)} MB anonymous RSS`,
  );
  const t2 = performance.now();
  await c.term("n3");
  await c.startNode("n3");
  console.log(
    `  restart of a node over ${fmt(PASSIVE + ACTIVE)} delete markers in each of its registry and lease watches: ${fmt(performance.now() - t2)} ms to answer status`,
  );

  await activate(Array.from({ length: ACTIVE }, (_, i) => `p${i * Math.floor(PASSIVE / ACTIVE)}`));
  await waitFor(async () => (await snapshot()).hosted === ACTIVE, 120_000, "second wave active", 250);
  const wave = await snapshot();
  console.log(
    `  ${ACTIVE} of the ${fmt(PASSIVE + ACTIVE)} registered active again: nodes ${mb(wave.nodeAnon)} MB anonymous RSS, ${mb(wave.nodeHeap)} MB JS heap (sum); nats-server ${mb(wave.server)} MB`,
  );
} finally {
  await c.stop();
}
