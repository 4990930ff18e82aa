// Delete markers of passivated instances (docs/virtual-actors.md, "Purge markers"): a node
// restarting over KOVA_BENCH_MARKERS (default 100,000) markers in each of its registry and
// lease buckets, then the compaction of both buckets (compactMarkers, what the first live
// node runs every `[cluster] marker_compaction`), then the same restart over the compacted
// buckets. One node process (marker_compaction = "0": the bench compacts by itself).
import { Kvm } from "@nats-io/kv";
import { jetstreamManager } from "@nats-io/jetstream";
import { compactMarkers } from "../dist/cluster/marker-compaction.js";
import { fmt, machine, startCluster } from "./actors-lib.mjs";

const MARKERS = Number(process.env.KOVA_BENCH_MARKERS ?? 100_000);
const c = await startCluster({ nodes: ["n1"], walSync: "normal", clusterToml: [`marker_compaction = "0"`] });
const restart = async () => {
  await c.term("n1");
  const t = performance.now();
  await c.startNode("n1");
  return performance.now() - t;
};
try {
  const kvm = new Kvm(c.nc);
  const [agents, leases] = await Promise.all(["agents", "leases"].map((b) => kvm.open(`kova_${c.cluster}_${b}`)));
  const t0 = performance.now();
  for (let i = 0; i < MARKERS; i += 500) {
    await Promise.all(
      Array.from({ length: Math.min(500, MARKERS - i) }, async (_, j) => {
        const id = `mem--p${i + j}`;
        await agents.delete(id);
        await leases.delete(id);
      }),
    );
  }
  console.log(`delete markers of passivated instances, 1 node process (${machine()})`);
  console.log(`  seeded ${fmt(MARKERS)} markers in each of the registry and lease buckets in ${fmt(performance.now() - t0)} ms`);
  const before = [];
  for (let i = 0; i < 3; i++) before.push(await restart());
  console.log(`  restart over the markers, until status answers: ${before.map(fmt).join(", ")} ms`);
  const jsm = await jetstreamManager(c.nc);
  for (const kv of [agents, leases]) {
    const r = await compactMarkers(kv, jsm, { olderThanMs: 0 });
    console.log(`  compaction of ${r.bucket}: scanned ${fmt(r.scanned)} keys, removed ${fmt(r.removed)} markers in ${fmt(r.ms)} ms`);
  }
  const after = [];
  for (let i = 0; i < 3; i++) after.push(await restart());
  console.log(`  restart after the compaction: ${after.map(fmt).join(", ")} ms`);
} finally {
  await c.stop();
}
