// Memory of template instances (virtual actors) on 3 node processes: per active instance
// and per registered-but-passive one, node processes and nats-server.
//   1. activate KOVA_BENCH_ACTIVE (default 1,000) never-seen instances of a counter template
//      `mem` (idle_after KOVA_BENCH_IDLE_AFTER_S, default 90 s: every instance must still be
//      active when the last one is, and 1,000 activations took ~60 s at load average 14 on
//      2 cores): memory with them active;
//   2. wait until all are passivated: what a passive instance leaves (its checkpoint in KV,
//      delete markers in the registry and lease buckets);
//   3. register KOVA_BENCH_PASSIVE (default 100,000) more passive instances the way a
//      passivation leaves them (checkpoint + two delete markers, written directly, not by
//      activating and passivating each: that would take hours here), restart one node (its
//      KV watches now start over every marker);
//   4. compact the registry and lease buckets with compactMarkers, what the first live node
//      runs every `[cluster] marker_compaction` (turned off on the nodes here, so that it runs
//      once, at this point, over every marker: the default 10 min would fire mid-run over
//      some of them), leaving the checkpoint as the only message of a passive instance;
//   5. activate 1,000 of the seeded instances: memory must follow the active ones; then
//      activate one really passivated and one seeded instance and check that each answers
//      info_request with the state its checkpoint holds (the run fails otherwise).
// The seeded instances are of a second template, `hot`, the same counter that is never
// passivated, so that the 1,000 of step 5 stay active while the server restarts below.
// nats-server's memory is read two ways: its RSS (varz `mem`) and its live Go heap right
// after a forced GC (pprof, `goMemory`), the counterpart of a node's heap after a forced GC;
// the RSS also holds garbage up to Go's next GC and memory freed but not yet returned, which
// varies with the moment it is read. Both are read at once and, at steps 3-5, after a restart
// of the server the bench started, with the nodes connected (`steadyServer`), which drops
// what activations, seeding and compaction left in Go's hands. What JetStream stores per
// passive instance is printed for the really passivated ones of step 2 and for the seeded
// ones of step 3: the seeding stands for real passivation only if they match.
import { readFileSync } from "node:fs";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers } from "@nats-io/transport-node";
import { compactMarkers } from "../dist/cluster/marker-compaction.js";
import { createEnvelope, fmt, machine, sleep, startCluster, waitFor } from "./actors-lib.mjs";

const ACTIVE = Number(process.env.KOVA_BENCH_ACTIVE ?? 1000);
const PASSIVE = Number(process.env.KOVA_BENCH_PASSIVE ?? 100_000);
const IDLE_AFTER_S = Number(process.env.KOVA_BENCH_IDLE_AFTER_S ?? 90);
/** How long nats-server's RSS is sampled after a restart, once the nodes are back. */
const SETTLE_MS = Number(process.env.KOVA_BENCH_SETTLE_MS ?? 60_000);
const nodes = ["n1", "n2", "n3"];
const templates = [
  `[[actor_templates]]\nname = "mem"\ntype = "counter"\nidle_after = "${IDLE_AFTER_S}s"`,
  `[[actor_templates]]\nname = "hot"\ntype = "counter"\nidle_after = "0"`,
].join("\n");
const c = await startCluster({
  nodes,
  walSync: "normal",
  extraToml: templates,
  clusterToml: ["max_actors = 200000", `marker_compaction = "0"`],
  profile: true,
});
const anon = (pid) => Number(/^RssAnon:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) * 1024;
const snapshot = async () => {
  const st = await Promise.all(nodes.map((n) => c.status(n, 10_000)));
  return {
    hosted: st.reduce((s, x) => s + x.actors.hosted, 0),
    nodeAnon: st.reduce((s, x) => s + anon(x.pid), 0),
    nodeHeap: st.reduce((s, x) => s + x.memory.heapUsed, 0),
  };
};
const mb = (b) => (b / 1024 / 1024).toFixed(1);
const kbPer = (a, b, n) => ((a - b) / n / 1024).toFixed(2);
const jsz = async () => await (await fetch(`${c.server.monitorUrl}/jsz`)).json();
/** Waits until the nodes host `n` actors; a timeout says how many they host. */
let lastHosted = 0;
const hostedIs = (n, what, everyMs, timeoutMs = 120_000) =>
  waitFor(async () => (lastHosted = (await snapshot()).hosted) === n, timeoutMs, what, everyMs).catch((err) => {
    throw new Error(`${err.message} (hosting ${lastHosted} of ${n})`);
  });
/** nats-server's RSS now and its live Go heap after a forced GC (which comes second: it changes the RSS). */
const server = async () => {
  const rss = (await c.varz()).mem;
  return { rss, heap: (await c.goMemory()).heapAlloc };
};
/**
 * nats-server's memory after a restart (SIGTERM, same ports and store) with the nodes
 * connected: what Go freed but kept (block caches, the garbage of activations, seeding and
 * compaction) is gone; the nodes reconnect and recreate their watches. The RSS is sampled
 * every second for SETTLE_MS once every node answers status again, the server has as many
 * connections and consumers as before and the nodes host `hosted` actors; then the heap
 * after a forced GC. The RSS depends on the moment: loading 300,000 stored messages at the
 * restart held ~140 MB until a GC 4-30 s later, or past the minute; with 1,000 active it
 * climbed 77 → 96 MB in the minute as Go's heap grew toward its next GC. The last sample is
 * the figure, with the low and the peak of the minute beside it.
 */
const steadyServer = async (hosted) => {
  const [conns, consumers] = [(await c.varz()).connections, (await jsz()).consumers];
  await c.server.restart();
  const t0 = performance.now();
  await waitFor(
    async () => {
      try {
        await Promise.all(nodes.map((n) => c.status(n, 2000)));
        return (await c.varz()).connections >= conns && (await jsz()).consumers >= consumers;
      } catch {
        return false;
      }
    },
    120_000,
    "nodes back after the nats-server restart",
    250,
  );
  await hostedIs(hosted, "every actor hosted again after the nats-server restart", 250);
  const backMs = performance.now() - t0;
  const samples = [];
  for (const end = performance.now() + SETTLE_MS; performance.now() < end; await sleep(1000)) samples.push((await c.varz()).mem);
  samples.push((await c.varz()).mem);
  if (process.env.KOVA_BENCH_DEBUG) console.log(`    nats-server RSS after the restart, every second (MB): ${samples.map(mb).join(" ")}`);
  return { backMs, low: Math.min(...samples), peak: Math.max(...samples), rss: samples.at(-1), heap: (await c.goMemory()).heapAlloc };
};
const restarted = (s) =>
  `nats-server restarted, nodes back in ${fmt(s.backMs)} ms; RSS over the next ${fmt(SETTLE_MS / 1000)} s low ${mb(s.low)} MB, peak ${mb(s.peak)} MB`;
/** nats-server's RSS and heap per instance, `a` over `b`, KB. */
const serverPer = (a, b, n) => `nats-server ${kbPer(a.rss, b.rss, n)} KB RSS, ${kbPer(a.heap, b.heap, n)} KB heap`;
const serverMb = (a) => `nats-server RSS ${mb(a.rss)} MB, heap ${mb(a.heap)} MB`;
/** A KV delete marker as `kv.delete(id, { previousSeq })` writes it. */
const deleteMarker = () => {
  const h = headers();
  h.set("KV-Operation", "DEL");
  h.set("Nats-Expected-Last-Subject-Sequence", "0");
  return h;
};
/** Messages and bytes JetStream holds in the buckets a passive instance leaves entries in. */
const stored = async () => {
  // A bucket is created on first use (the checkpoints one by the first checkpoint): none yet is nothing stored.
  const state = (b) =>
    c.bus.jsm.streams.info(`KV_kova_${c.cluster}_${b}`).then(
      (i) => i.state,
      () => ({ messages: 0, bytes: 0 }),
    );
  const all = await Promise.all(["checkpoints", "agents", "leases"].map(state));
  return { messages: all.reduce((s, i) => s + i.messages, 0), bytes: all.reduce((s, i) => s + i.bytes, 0) };
};
const perStored = (a, b, n) => `${((a.messages - b.messages) / n).toFixed(2)} messages, ${fmt((a.bytes - b.bytes) / n)} bytes`;
const activate = async (ids) => {
  for (let i = 0; i < ids.length; i += 50) {
    await Promise.all(ids.slice(i, i + 50).map((id) => c.bus.send(createEnvelope({ from: "bench", to: id, type: "task_delegate", payload: {} }))));
  }
};
/**
 * Activates a passive instance with an activation request (no message, so its state is
 * the checkpoint's) and checks that its info_request answer is the state its checkpoint in
 * KV holds, not a fresh one. Throws otherwise: the figures stand for real passivated
 * instances only if the seeded ones come back like them.
 */
const checkRestored = async (cps, id, what) => {
  const held = JSON.parse((await cps.get(id))?.string() || "null")?.state;
  if (!(held?.count > 0)) throw new Error(`${what} ${id}: no checkpoint with a count in KV (${JSON.stringify(held)})`);
  await c.bus.activate(id, 5000);
  const got = await waitFor(
    () => c.bus.request(id, "info_request", {}, { timeoutMs: 2000 }).catch(() => undefined),
    60_000,
    `${what} ${id} answering info_request after its activation`,
    200,
  );
  if (JSON.stringify(got) !== JSON.stringify(held)) {
    throw new Error(`${what} ${id} came back with ${JSON.stringify(got)}, its checkpoint holds ${JSON.stringify(held)}`);
  }
  return got;
};
try {
  await sleep(2000);
  const base = await snapshot();
  const baseServer = await server();
  const baseStored = await stored();
  const baseSteady = await steadyServer(0);
  console.log(`virtual actor memory, 3 node processes (${machine()}); nats-server: RSS, and live Go heap after a forced GC`);
  console.log(
    `  baseline: nodes ${mb(base.nodeAnon)} MB anonymous RSS (sum); ${serverMb(baseServer)}; after a restart ${serverMb(baseSteady)} (${restarted(baseSteady)})`,
  );

  const t0 = performance.now();
  await activate(Array.from({ length: ACTIVE }, (_, i) => `mem--a${i}`));
  await hostedIs(ACTIVE, "all active", 250);
  const activateMs = performance.now() - t0;
  const active = await snapshot();
  const activeServer = await server();
  console.log(
    `  ${fmt(ACTIVE)} active (activated in ${fmt(activateMs)} ms): per active instance: nodes ${kbPer(active.nodeAnon, base.nodeAnon, ACTIVE)} KB anonymous RSS, ${kbPer(active.nodeHeap, base.nodeHeap, ACTIVE)} KB JS heap; ${serverPer(activeServer, baseServer, ACTIVE)}`,
  );

  // The first ones passivate idle_after after their turn, the last ones as much later as the activation took,
  // and a node passivates at most 32 per check (every quarter of idle_after, at most 5 s).
  const t1 = performance.now();
  await hostedIs(0, "all passivated", 500, IDLE_AFTER_S * 1000 + activateMs + 120_000);
  const passivatedMs = performance.now() - t1;
  await sleep(3000);
  const passive = await snapshot();
  const passiveServer = await server();
  const passiveStored = await stored();
  console.log(`  stored per really passivated instance: ${perStored(passiveStored, baseStored, ACTIVE)} (checkpoint, registry and lease buckets)`);
  console.log(
    `  after all ${fmt(ACTIVE)} were passivated (${fmt(passivatedMs)} ms after the last was active): per passive instance: ${serverPer(passiveServer, baseServer, ACTIVE)}; nodes ${kbPer(passive.nodeAnon, base.nodeAnon, ACTIVE)} KB anonymous RSS (V8 keeps heap it grew), ${kbPer(passive.nodeHeap, base.nodeHeap, ACTIVE)} KB JS heap`,
  );

  // What a passivation leaves behind, written directly for PASSIVE more instances.
  const kvm = new Kvm(c.nc);
  const cps = await kvm.open(`kova_${c.cluster}_checkpoints`);
  const sample = await cps.get("mem--a0");
  const t2 = performance.now();
  for (let i = 0; i < PASSIVE; i += 500) {
    await Promise.all(
      Array.from({ length: Math.min(500, PASSIVE - i) }, async (_, j) => {
        // The same messages as a real passivation leaves, compare-and-set headers included
        // (its writes expect the key's last revision; 0 here, since the key is new).
        const id = `hot--p${i + j}`;
        await cps.create(id, sample.value);
        await Promise.all(
          ["agents", "leases"].map((b) => c.bus.js.publish(`$KV.kova_${c.cluster}_${b}.${id}`, new Uint8Array(0), { headers: deleteMarker() })),
        );
      }),
    );
  }
  const seedMs = performance.now() - t2;
  await sleep(3000);
  const registered = await snapshot();
  const registeredServer = await server();
  const all = PASSIVE + ACTIVE;
  console.log(`  stored per seeded passive instance: ${perStored(await stored(), passiveStored, PASSIVE)}`);
  console.log(
    `  + ${fmt(PASSIVE)} passive instances (seeded in ${fmt(seedMs)} ms): per passive instance, at once: ${serverPer(registeredServer, passiveServer, PASSIVE)}; nodes ${mb(registered.nodeAnon)} MB anonymous RSS`,
  );
  const t3 = performance.now();
  await c.term("n3");
  await c.startNode("n3");
  console.log(
    `  restart of a node over ${fmt(all)} delete markers in each of its registry and lease watches: ${fmt(performance.now() - t3)} ms to answer status`,
  );
  const before = await steadyServer(0);
  console.log(
    `  ${fmt(all)} passive, before compaction, after a restart: ${serverMb(before)} = per passive instance ${serverPer(before, baseSteady, all)} (${restarted(before)})`,
  );

  const jsm = await jetstreamManager(c.nc);
  for (const b of ["agents", "leases"]) {
    const r = await compactMarkers(await kvm.open(`kova_${c.cluster}_${b}`), jsm, { olderThanMs: 0 });
    // Every instance's marker goes but the stream's last message (compactMarkers keeps it).
    if (r.removed < all - 1) throw new Error(`compaction of ${r.bucket} removed ${r.removed} of ${all} markers`);
    console.log(`  compaction of ${r.bucket}: scanned ${fmt(r.scanned)} keys, removed ${fmt(r.removed)} markers in ${fmt(r.ms)} ms`);
  }
  const compacted = await server();
  console.log(`  stored per passive instance after compaction: ${perStored(await stored(), baseStored, all)}; at once ${serverMb(compacted)}`);
  const after = await steadyServer(0);
  console.log(
    `  ${fmt(all)} passive, after compaction, after a restart: ${serverMb(after)} = per passive instance ${serverPer(after, baseSteady, all)} (${restarted(after)})`,
  );

  const waveIds = Array.from({ length: ACTIVE }, (_, i) => `hot--p${i * Math.floor(PASSIVE / ACTIVE)}`);
  await activate(waveIds);
  await hostedIs(ACTIVE, "second wave active", 250);
  const wave = await snapshot();
  const waveServer = await server();
  console.log(
    `  ${fmt(ACTIVE)} of the ${fmt(all)} registered active again: nodes ${mb(wave.nodeAnon)} MB anonymous RSS, ${mb(wave.nodeHeap)} MB JS heap (sum); at once ${serverMb(waveServer)}`,
  );
  const waveSteady = await steadyServer(ACTIVE);
  console.log(`  the same after a restart: ${serverMb(waveSteady)} (${restarted(waveSteady)})`);
  const parts = (what, a) =>
    `${what} ${mb(waveSteady[a])} MB = baseline ${mb(baseSteady[a])} + ${fmt(all)} passive ${mb(after[a] - baseSteady[a])} + ${fmt(ACTIVE)} active ${mb(waveSteady[a] - after[a])} MB (${kbPer(waveSteady[a], after[a], ACTIVE)} KB each)`;
  console.log(`  nats-server after a restart, ${fmt(all)} passive (compacted) + ${fmt(ACTIVE)} active: ${parts("heap", "heap")}; ${parts("RSS", "rss")}`);
  console.log(
    `  nats-server, the first ${fmt(ACTIVE)} active alone (step 1, at once): heap +${mb(activeServer.heap - baseServer.heap)} MB, RSS +${mb(activeServer.rss - baseServer.rss)} MB over the baseline`,
  );

  // The seeded instances stand for passivated ones only if they come back like them, after compaction too.
  // The seeded one is not of the wave, so its checkpoint is still the one seeded.
  const seededId = Array.from({ length: PASSIVE }, (_, i) => `hot--p${PASSIVE - 1 - i}`).find((id) => !waveIds.includes(id));
  const real = await checkRestored(cps, `mem--a${ACTIVE - 1}`, "really passivated instance");
  const seeded = await checkRestored(cps, seededId, "seeded instance");
  console.log(
    `  activated again after compaction, each answers info_request with its checkpoint's state: mem--a${ACTIVE - 1} (count ${real.count}), ${seededId} (count ${seeded.count})`,
  );
} finally {
  await c.stop();
}
