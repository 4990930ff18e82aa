// full mode, one writer awaiting each append, vs raw lmdb `await put; await db.flushed`.
// Target: ratio ≥ 0.9. All stores stay open and the measurement alternates between them
// in short windows, so disk and CPU noise from other processes hits each alike.
// Two WAL figures: appends alone (the target's wording), and append then complete (not
// awaited; the completion rides in the next append's commit), as a journaling actor does.
import { PAYLOAD, RING_BITS, Wal, interleaved, rawLmdb, report, reportCpu, tempDir } from "./wal-bench-lib.mjs";

const a = tempDir("raw1");
const raw = rawLmdb(a.dir);
const b = tempDir("wal1");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "full" });
const c = tempDir("wal1a");
const appendsOnly = await Wal.open({ dir: c.dir, ringBits: RING_BITS, sync: "full", maxPending: 1 << 20 });

async function during(secs, op) {
  let n = 0;
  const start = performance.now();
  const end = start + secs * 1000;
  while (performance.now() < end) {
    await op();
    n++;
  }
  return n / ((performance.now() - start) / 1000);
}

let k = 0;
const r = await interleaved(["raw", "appends", "both"], (name, secs) => {
  if (name === "raw")
    return during(secs, async () => {
      await raw.db.put(k++ & 0xffff, raw.value);
      await raw.env.flushed;
    });
  if (name === "appends") return during(secs, () => appendsOnly.append("step", PAYLOAD));
  return during(secs, async () => {
    const seq = await wal.append("step", PAYLOAD);
    void wal.complete(seq);
  });
});
await appendsOnly.close();
await wal.close();
await raw.close();
for (const t of [a, b, c]) t.cleanup();
const target = { text: "ratio ≥ 0.9", met: (_o, ratio) => ratio >= 0.9 };
report("wal full, 1 writer, appends", r.appends, "raw put+flushed", r.raw, target);
report("wal full, 1 writer, append + complete", r.both, "raw put+flushed", r.raw, target);
reportCpu(r, { appends: "appends", both: "append + complete", raw: "raw put+flushed" });
