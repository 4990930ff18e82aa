// Recovery scan at open over 1,000,000 records (ring of 2^20 slots), two shapes:
// - half PENDING (decoded and handed back), half COMPLETE: the worst case;
// - 1 % PENDING: a node that crashed with a normal backlog.
// Target: open < 3 s. The records are written through the WAL itself in `normal` mode
// first (not timed). Wall time and CPU time of the open are both printed: on a shared
// machine the wall time includes waiting for a core.
import { Wal, report, tempDir } from "./wal-bench-lib.mjs";

const total = Number(process.env.KOVA_BENCH_RECORDS ?? 1_000_000);

async function scenario(pendingEvery) {
  const t = tempDir("recovery");
  const wal = await Wal.open({ dir: t.dir, ringBits: 20, sync: "normal", maxPending: total });
  const window = 10_000;
  for (let i = 0; i < total; i += window) {
    const batch = [];
    for (let j = i; j < Math.min(total, i + window); j++) {
      batch.push(wal.append("step", { j, text: "recorded step" }, { owner: `agent-${j % 1000}` }));
    }
    const seqs = await Promise.all(batch);
    await Promise.all(seqs.filter((s) => s % pendingEvery !== 0).map((s) => wal.complete(s)));
  }
  await wal.close();
  const expectPending = Math.floor(total / pendingEvery);
  const runs = [];
  for (let r = 0; r < Number(process.env.KOVA_BENCH_ROUNDS ?? 2); r++) {
    const start = performance.now();
    const cpu = process.cpuUsage();
    const again = await Wal.open({ dir: t.dir, sync: "normal", maxPending: total });
    const ms = performance.now() - start;
    const used = process.cpuUsage(cpu);
    const { complete, pending, corrupt } = again.recovery;
    if (complete + pending.length !== total || pending.length !== expectPending || corrupt.length !== 0) {
      throw new Error(`unexpected report ${complete}/${pending.length}/${corrupt.length}`);
    }
    await again.close();
    runs.push({ ms, cpuMs: (used.user + used.system) / 1000 });
  }
  t.cleanup();
  const best = runs.reduce((a, b) => (a.ms < b.ms ? a : b));
  const label = `recovery of ${total.toLocaleString("en-US")} records, ${expectPending.toLocaleString("en-US")} PENDING`;
  console.log(`${label}: ${runs.map((r) => `${(r.ms / 1000).toFixed(2)} s wall / ${(r.cpuMs / 1000).toFixed(2)} s cpu`).join(", ")}`);
  report(label, total / (best.ms / 1000), undefined, undefined, { text: "open < 3 s", met: () => best.ms < 3000 });
}

await scenario(2);
await scenario(100);
