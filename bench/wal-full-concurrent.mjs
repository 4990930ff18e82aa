// full mode, 256 concurrent writers (each append then complete, not awaited), vs raw
// batched puts from 256 writers (each `await put`, no flush wait: the baseline the WAL's
// target is set against, ~590k puts/s on an idle machine). Measurement windows alternate between the two.
// Targets: ≥ 100,000 appends/s and ≥ 0.3 × raw.
import { PAYLOAD, RING_BITS, Wal, interleaved, rate, rawLmdb, report, reportCpu, tempDir } from "./wal-bench-lib.mjs";

const writers = Number(process.env.KOVA_BENCH_WRITERS ?? 256);
const a = tempDir("rawN");
const raw = rawLmdb(a.dir);
const b = tempDir("walN");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "full", maxPending: 1 << 20 });
let k = 0;
const r = await interleaved(["raw", "wal"], (name, secs) =>
  name === "raw"
    ? rate(writers, () => raw.db.put(k++ & 0xffff, raw.value), secs)
    : rate(
        writers,
        async () => {
          const seq = await wal.append("step", PAYLOAD);
          void wal.complete(seq);
        },
        secs,
      ),
);
await wal.close();
await raw.close();
a.cleanup();
b.cleanup();
report(`wal full, ${writers} writers`, r.wal, "raw batched puts", r.raw, {
  text: "≥ 100,000/s and ratio ≥ 0.3",
  met: (o, ratio) => o >= 100_000 && ratio >= 0.3,
});
reportCpu(r, { wal: "wal", raw: "raw" });
