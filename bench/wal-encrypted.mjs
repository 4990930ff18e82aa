// aes-256-gcm (and sm4) vs unencrypted, in the same run: full mode with 256 concurrent
// writers and normal mode pipelined. Target: aes-256-gcm ≥ 0.5 × unencrypted.
import { PAYLOAD, RING_BITS, Wal, pipelined, rate, report, tempDir } from "./wal-bench-lib.mjs";

const KEY = "hex:" + "7e".repeat(32);
const writers = Number(process.env.KOVA_BENCH_WRITERS ?? 256);
const window = Number(process.env.KOVA_BENCH_WINDOW ?? 1000);

async function measure(encryption) {
  const out = {};
  for (const sync of ["full", "normal"]) {
    const t = tempDir(`enc-${sync}`);
    const wal = await Wal.open({ dir: t.dir, ringBits: RING_BITS, sync, maxPending: 1 << 20, ...(encryption ? { encryption } : {}) });
    out[sync] =
      sync === "full"
        ? await rate(writers, async () => {
            const seq = await wal.append("step", PAYLOAD);
            void wal.complete(seq);
          })
        : await pipelined(window, () => wal.append("step", PAYLOAD).then((seq) => wal.complete(seq)));
    await wal.close();
    t.cleanup();
  }
  return out;
}

const plain = await measure(undefined);
const aes = await measure({ algorithm: "aes-256-gcm", key: KEY });
const sm4 = await measure({ algorithm: "sm4", key: KEY });
const target = { text: "ratio ≥ 0.5", met: (_o, ratio) => ratio >= 0.5 };
report(`aes-256-gcm full, ${writers} writers`, aes.full, "unencrypted", plain.full, target);
report("aes-256-gcm normal, pipelined", aes.normal, "unencrypted", plain.normal, target);
report(`sm4 full, ${writers} writers`, sm4.full, "unencrypted", plain.full);
report("sm4 normal, pipelined", sm4.normal, "unencrypted", plain.normal);
