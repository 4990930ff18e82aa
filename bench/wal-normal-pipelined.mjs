// normal mode, pipelined appends: a few pipeliners each issue a window of appends and
// wait for them. Two figures: appends alone (records left PENDING in a 2^20 ring), and
// appends whose completes are issued right after (not awaited: they commit together
// with the next appends), as a journaling actor runtime would — two LMDB writes per
// operation. Baseline: raw lmdb puts pipelined the same way (one put per operation).
// Target: ≥ 200,000 appends/s.
import { PAYLOAD, RING_BITS, Wal, rawLmdb, report, seconds, tempDir } from "./wal-bench-lib.mjs";

const window = Number(process.env.KOVA_BENCH_WINDOW ?? 1000);
const pipeliners = Number(process.env.KOVA_BENCH_PIPELINERS ?? 4);

async function pipelined(issue, after) {
  let ops = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
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
let k = 0;
const rawRate = await pipelined(() => raw.db.put(k++ & 0xffff, raw.value));
await raw.close();
a.cleanup();

const c = tempDir("walA");
const appendsOnly = await Wal.open({ dir: c.dir, ringBits: 20, sync: "normal", maxPending: 1 << 21 });
const appendRate = await pipelined(() => appendsOnly.append("step", PAYLOAD));
await appendsOnly.close();
c.cleanup();

const b = tempDir("walP");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "normal", maxPending: 1 << 20 });
const walRate = await pipelined(
  () => wal.append("step", PAYLOAD),
  (seq) => wal.complete(seq),
);
await wal.close();
b.cleanup();
const target = { text: "≥ 200,000/s", met: (o) => o >= 200_000 };
report("wal normal, pipelined appends", appendRate, "raw pipelined puts", rawRate, target);
report("wal normal, pipelined append + complete", walRate, "raw pipelined puts", rawRate, target);
