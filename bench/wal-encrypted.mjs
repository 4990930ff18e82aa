// aes-256-gcm (and sm4) vs unencrypted, in the same run: full mode with 256 concurrent
// writers and normal mode pipelined. Target: aes-256-gcm ≥ 0.5 × unencrypted.
import { PAYLOAD, RING_BITS, Wal, interleaved, pipelined, rate, report, reportCpu, tempDir } from "./wal-bench-lib.mjs";

const KEY = `hex:${"7e".repeat(32)}`;
const writers = Number(process.env.KOVA_BENCH_WRITERS ?? 256);
const window = Number(process.env.KOVA_BENCH_WINDOW ?? 1000);

// All six WALs stay open; measurement windows alternate between them.
const variants = { plain: undefined, aes: { algorithm: "aes-256-gcm", key: KEY }, sm4: { algorithm: "sm4", key: KEY } };
const wals = {};
const dirs = [];
for (const [name, encryption] of Object.entries(variants)) {
  for (const sync of ["full", "normal"]) {
    const t = tempDir(`enc-${name}-${sync}`);
    dirs.push(t);
    wals[`${name}-${sync}`] = await Wal.open({ dir: t.dir, ringBits: RING_BITS, sync, maxPending: 1 << 20, ...(encryption ? { encryption } : {}) });
  }
}
const r = await interleaved(Object.keys(wals), (name, secs) => {
  const wal = wals[name];
  return name.endsWith("full")
    ? rate(
        writers,
        async () => {
          const seq = await wal.append("step", PAYLOAD);
          void wal.complete(seq);
        },
        secs,
      )
    : pipelined(window, () => wal.append("step", PAYLOAD).then((seq) => wal.complete(seq)), secs);
});
for (const wal of Object.values(wals)) await wal.close();
for (const t of dirs) t.cleanup();
const target = { text: "ratio ≥ 0.5", met: (_o, ratio) => ratio >= 0.5 };
report(`aes-256-gcm full, ${writers} writers`, r["aes-full"], "unencrypted", r["plain-full"], target);
report("aes-256-gcm normal, pipelined", r["aes-normal"], "unencrypted", r["plain-normal"], target);
report(`sm4 full, ${writers} writers`, r["sm4-full"], "unencrypted", r["plain-full"]);
report("sm4 normal, pipelined", r["sm4-normal"], "unencrypted", r["plain-normal"]);
reportCpu(r, { "plain-normal": "plain", "aes-normal": "aes-256-gcm", "sm4-normal": "sm4" });
