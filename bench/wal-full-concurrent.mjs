// full mode, 256 concurrent writers, vs raw batched puts from 256 writers (no flush
// wait: the baseline the issue names, ~590k puts/s here).
// Targets: ≥ 100,000 appends/s and ≥ 0.3 × raw.
import { PAYLOAD, RING_BITS, Wal, rate, rawLmdb, report, tempDir } from "./wal-bench-lib.mjs";

const writers = Number(process.env.KOVA_BENCH_WRITERS ?? 256);
const a = tempDir("rawN");
const raw = rawLmdb(a.dir);
let k = 0;
const rawRate = await rate(writers, () => raw.db.put(k++ & 0xffff, raw.value));
await raw.close();
a.cleanup();

const b = tempDir("walN");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "full", maxPending: 1 << 20 });
const walRate = await rate(writers, async () => {
  const seq = await wal.append("step", PAYLOAD);
  void wal.complete(seq);
});
await wal.close();
b.cleanup();
report(`wal full, ${writers} writers`, walRate, "raw batched puts", rawRate, {
  text: "≥ 100,000/s and ratio ≥ 0.3",
  met: (o, ratio) => o >= 100_000 && ratio >= 0.3,
});
