// normal mode, pipelined appends (a window of outstanding appends), vs raw pipelined puts.
// Target: ≥ 200,000 appends/s.
import { PAYLOAD, RING_BITS, Wal, pipelined, rawLmdb, report, tempDir } from "./wal-bench-lib.mjs";

const window = Number(process.env.KOVA_BENCH_WINDOW ?? 1000);
const a = tempDir("rawP");
const raw = rawLmdb(a.dir);
let k = 0;
const rawRate = await pipelined(window, () => raw.db.put(k++ & 0xffff, raw.value));
await raw.close();
a.cleanup();

const b = tempDir("walP");
const wal = await Wal.open({ dir: b.dir, ringBits: RING_BITS, sync: "normal", maxPending: 1 << 20 });
const walRate = await pipelined(window, () => wal.append("step", PAYLOAD).then((seq) => wal.complete(seq)));
await wal.close();
b.cleanup();
report("wal normal, pipelined", walRate, "raw pipelined puts", rawRate, { text: "≥ 200,000/s", met: (o) => o >= 200_000 });
