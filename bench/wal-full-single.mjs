// full mode, one writer awaiting each append, vs raw `await put; await db.flushed`.
// Target: ratio ≥ 0.9. Runs alternate (raw, wal, raw, wal) to even out disk noise.
import { PAYLOAD, RING_BITS, Wal, rate, rawLmdb, report, tempDir } from "./wal-bench-lib.mjs";

const rounds = Number(process.env.KOVA_BENCH_ROUNDS ?? 2);
let rawTotal = 0;
let walTotal = 0;
for (let r = 0; r < rounds; r++) {
  const a = tempDir("raw1");
  const raw = rawLmdb(a.dir);
  let k = 0;
  rawTotal += await rate(1, async () => {
    await raw.db.put(k++ & 0xffff, raw.value);
    await raw.env.flushed;
  });
  await raw.close();
  a.cleanup();

  const b = tempDir("wal1");
  const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "full" });
  walTotal += await rate(1, async () => {
    const seq = await wal.append("step", PAYLOAD);
    // complete off the measured path's critical await, as a journaling actor would
    void wal.complete(seq);
  });
  await wal.close();
  b.cleanup();
}
report("wal full, 1 writer", walTotal / rounds, "raw put+flushed", rawTotal / rounds, {
  text: "ratio ≥ 0.9",
  met: (_o, ratio) => ratio >= 0.9,
});
