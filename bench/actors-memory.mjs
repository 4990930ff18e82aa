// 2,000 idle actors on 3 node processes: node memory per idle actor (target < 20 KB)
// and nats-server memory per actor (each actor is a durable consumer, an rpc
// subscription, a registry entry, a lease and a checkpoint key).
// Measured twice: 3 s after placement settled (still carrying the V8 heap and young
// generation grown by the start-up burst) and again after KOVA_BENCH_IDLE_MS (default
// 30 s) of idling, when V8's memory reducer has given the burst's slack back.
// Then KOVA_BENCH_MORE (default 2000) more actors are spawned and, 3 s later, the growth
// between the two measurements is divided by the actors added: the marginal memory of an
// idle actor, without the part a burst of starts leaves behind whatever its size (V8's
// heap pages grown by the burst's garbage, a fixed ~20 MB per node, which divided by 667
// actors reads as ~30 KB each).
// KOVA_BENCH_ACTORS (default 2000).
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { fmt, machine, sleep, startCluster, waitFor } from "./actors-lib.mjs";

/** Anonymous (heap, native allocations) vs file-backed (LMDB's memory map) resident memory, bytes. */
function rssSplit(pid) {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, "m").exec(text)?.[1] ?? 0) * 1024;
  return { anon: kb("RssAnon"), file: kb("RssFile") };
}

const ACTORS = Number(process.env.KOVA_BENCH_ACTORS ?? 2000);
const MORE = Number(process.env.KOVA_BENCH_MORE ?? 2000);
const IDLE_MS = Number(process.env.KOVA_BENCH_IDLE_MS ?? 30_000);
const nodes = ["n1", "n2", "n3"];
const c = await startCluster({ nodes, heartbeatMs: 1000, staleAfterMs: 5000 });
try {
  await sleep(2000);
  const before = await Promise.all(nodes.map((n) => c.status(n)));
  const splitBefore = before.map((s) => rssSplit(s.pid));
  const serverBefore = (await c.varz()).mem;

  const spawnAll = async (from, to) => {
    for (let i = from; i < to; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, to - i) }, (_, j) => c.spawnActor(`idle-${i + j}`, "counter")));
    }
    await waitFor(
      async () => {
        const a = await c.agents();
        return a.size === to && [...a.values()].every((r) => r.state === "Idle" && r.node);
      },
      300_000,
      "all actors Idle",
      1000,
    );
  };
  const t0 = performance.now();
  await spawnAll(0, ACTORS);
  const placedMs = performance.now() - t0;
  await sleep(3000); // let allocation settle
  const after = await Promise.all(nodes.map((n) => c.status(n)));
  const lists = await Promise.all(nodes.map((n) => c.hostedBy(n)));
  const seen = new Map();
  for (const l of lists) for (const a of l) seen.set(a.id, (seen.get(a.id) ?? 0) + 1);
  const twice = [...seen.values()].filter((n) => n > 1).length;
  if (twice > 0 || seen.size !== ACTORS)
    console.log(
      `  WARNING: ${seen.size} distinct actors hosted, ${twice} on more than one node (states: ${JSON.stringify(after.map((s) => s.actors.byState))})`,
    );
  const serverAfter = (await c.varz()).mem;

  console.log(
    `${ACTORS} idle counter actors on 3 node processes (${machine()}; load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")})`,
  );
  console.log(`  spawn + placement of all actors: ${fmt(placedMs)} ms`);
  report("3 s after placement", after);
  if (IDLE_MS > 0) {
    await sleep(IDLE_MS);
    report(`after ${fmt(IDLE_MS / 1000)} s more idle`, await Promise.all(nodes.map((n) => c.status(n))));
  }
  if (MORE > 0) {
    const first = await Promise.all(nodes.map((n) => c.status(n)));
    await spawnAll(ACTORS, ACTORS + MORE);
    await sleep(3000);
    const second = await Promise.all(nodes.map((n) => c.status(n)));
    console.log(`  ${fmt(MORE)} more actors, 3 s after their placement: what each added actor adds (growth / actors added):`);
    let worst = 0;
    for (let i = 0; i < nodes.length; i++) {
      const added = second[i].actors.hosted - first[i].actors.hosted;
      const per = (a, b) => (a - b) / added / 1024;
      const rss = per(second[i].memory.rss, first[i].memory.rss);
      worst = Math.max(worst, rss);
      console.log(
        `    ${nodes[i]}: +${added} actors; per actor: RSS ${rss.toFixed(1)} KB; JS heap used ${per(second[i].memory.heapUsed, first[i].memory.heapUsed).toFixed(1)} KB`,
      );
    }
    console.log(`    marginal RSS per idle actor (worst node): ${worst.toFixed(1)} KB (target < 20 KB)`);
  }
  console.log(
    `  nats-server memory: ${fmt(serverBefore / 1024 / 1024)} MB → ${fmt(serverAfter / 1024 / 1024)} MB, ${((serverAfter - serverBefore) / ACTORS / 1024).toFixed(1)} KB per actor`,
  );

  function report(when, after) {
    console.log(`  ${when}:`);
    const splitAfter = after.map((s) => rssSplit(s.pid));
    let worstAnon = 0;
    let worstRss = 0;
    for (let i = 0; i < nodes.length; i++) {
      const hosted = after[i].actors.hosted;
      const per = (a, b) => (a - b) / hosted / 1024;
      const rss = per(after[i].memory.rss, before[i].memory.rss);
      const anon = per(splitAfter[i].anon, splitBefore[i].anon);
      const file = per(splitAfter[i].file, splitBefore[i].file);
      const heap = per(after[i].memory.heapUsed, before[i].memory.heapUsed);
      worstAnon = Math.max(worstAnon, anon);
      worstRss = Math.max(worstRss, rss);
      console.log(
        `    ${nodes[i]}: ${hosted} actors; per actor: RSS ${rss.toFixed(1)} KB = anonymous ${anon.toFixed(1)} KB + file-backed (LMDB map) ${file.toFixed(1)} KB; JS heap used ${heap.toFixed(1)} KB`,
      );
    }
    console.log(`    node memory per idle actor (worst node): anonymous ${worstAnon.toFixed(1)} KB, total RSS ${worstRss.toFixed(1)} KB (target < 20 KB)`);
  }
} finally {
  await c.stop();
}
