// full mode, one writer awaiting each append, vs raw lmdb `await put; await db.flushed`.
// Target: ratio ≥ 0.9. Both stores stay open and the measurement alternates between them
// in short windows, so disk and CPU noise from other processes hits both alike.
// The WAL writer also completes each record (not awaited), as a journaling actor would:
// the completion rides in the next append's commit.
import { PAYLOAD, RING_BITS, Wal, rawLmdb, report, tempDir } from "./wal-bench-lib.mjs";

const windows = Number(process.env.KOVA_BENCH_WINDOWS ?? 8);
const windowMs = Number(process.env.KOVA_BENCH_WINDOW_MS ?? 500);
const a = tempDir("raw1");
const raw = rawLmdb(a.dir);
const b = tempDir("wal1");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "full" });

async function during(ms, op) {
  let n = 0;
  const end = performance.now() + ms;
  while (performance.now() < end) {
    await op();
    n++;
  }
  return n;
}

let k = 0;
let rawOps = 0;
let walOps = 0;
let walOnlyOps = 0;
for (let w = 0; w < windows; w++) {
  rawOps += await during(windowMs, async () => {
    await raw.db.put(k++ & 0xffff, raw.value);
    await raw.env.flushed;
  });
  walOps += await during(windowMs, async () => {
    const seq = await wal.append("step", PAYLOAD);
    void wal.complete(seq);
  });
}
// Appends alone (records left PENDING), for reference.
const pendingWal = await Wal.open({ dir: tempDir("wal1b").dir, ringBits: RING_BITS, sync: "full", maxPending: 1 << 20 });
for (let w = 0; w < windows / 2; w++) walOnlyOps += await during(windowMs, () => pendingWal.append("step", PAYLOAD));
await pendingWal.close();
await wal.close();
await raw.close();
a.cleanup();
b.cleanup();
const secs = (windows * windowMs) / 1000;
report("wal full, 1 writer (append + complete)", walOps / secs, "raw put+flushed", rawOps / secs, {
  text: "ratio ≥ 0.9",
  met: (_o, ratio) => ratio >= 0.9,
});
console.log(`  appends alone: ${Math.round(walOnlyOps / (secs / 2)).toLocaleString("en-US")} ops/s (measured after, not interleaved)`);
