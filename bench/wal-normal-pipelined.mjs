// normal mode, pipelined appends: a few pipeliners each issue a window of appends and
// wait for them. Two figures: appends alone (records left PENDING in a 2^20 ring), and
// appends whose completes are issued right after (not awaited: they commit together
// with the next appends), as a journaling actor runtime would — two LMDB writes per
// operation. Baseline: raw lmdb puts pipelined the same way (one put per operation).
// Target: ≥ 200,000 appends/s.
import { PAYLOAD, RING_BITS, Wal, interleaved, rawLmdb, report, reportCpu, tempDir } from "./wal-bench-lib.mjs";

const window = Number(process.env.KOVA_BENCH_WINDOW ?? 1000);
const pipeliners = Number(process.env.KOVA_BENCH_PIPELINERS ?? 4);

async function pipelined(issue, after, secs) {
  let ops = 0;
  const start = performance.now();
  const end = start + secs * 1000;
  await Promise.all(
    Array.from({ length: pipeliners }, async () => {
      while (performance.now() < end) {
        const batch = [];
        for (let i = 0; i < window; i++) batch.push(issue());
        const results = await Promise.all(batch);
        if (after) for (const r of results) void after(r);
        ops += window;
      }
    }),
  );
  return ops / ((performance.now() - start) / 1000);
}

const a = tempDir("rawP");
const raw = rawLmdb(a.dir);
const c = tempDir("walA");
const appendsOnly = await Wal.open({ dir: c.dir, ringBits: 20, sync: "normal", maxPending: 1 << 21 });
const b = tempDir("walP");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "normal", maxPending: 1 << 20 });
let k = 0;
const r = await interleaved(["raw", "appends", "both"], (name, secs) => {
  if (name === "raw") return pipelined(() => raw.db.put(k++ & 0xffff, raw.value), undefined, secs);
  if (name === "appends") return pipelined(() => appendsOnly.append("step", PAYLOAD), undefined, secs);
  return pipelined(
    () => wal.append("step", PAYLOAD),
    (seq) => wal.complete(seq),
    secs,
  );
});
await appendsOnly.close();
await wal.close();
await raw.close();
for (const t of [a, b, c]) t.cleanup();
const target = { text: "≥ 200,000/s", met: (o) => o >= 200_000 };
report("wal normal, pipelined appends", r.appends, "raw pipelined puts", r.raw, target);
report("wal normal, pipelined append + complete", r.both, "raw pipelined puts", r.raw, target);
reportCpu(r, { appends: "appends", both: "append + complete", raw: "raw put" });
