// A preload for the node processes of bench/eval-cells.mjs: where each turn of an experiment's
// actor (`eval--…`) spends its time, from the `kova:phase` channel (src/core/phases.ts).
//
//   KOVA_BENCH_NODE_ARGS="--import ./bench/eval-phases-preload.mjs" KOVA_BENCH_PHASES_DIR=/tmp/phases node bench/eval-cells.mjs
//
// Every 2 s each node writes the medians (ms) over the turns it hosted so far to
// <dir>/phases-<pid>.json: delivery to the checkpoint's start (the handler, its effects), the
// checkpoint's compare-and-set, its end to the ack, the ack to the next delivery (idle time
// included: an empty mailbox), and delivery to ack. The nodes are killed at the end, so the
// file holds the last figures written.
import { subscribe } from "node:diagnostics_channel";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const out = join(process.env.KOVA_BENCH_PHASES_DIR ?? tmpdir(), `phases-${process.pid}.json`);
const turns = new Map();
const spans = { deliveredToCheckpoint: [], checkpoint: [], checkpointToAck: [], ackToNextDelivery: [], deliveredToAck: [] };

subscribe("kova:phase", (s) => {
  if (!s.actorId?.startsWith("eval--")) return;
  let t = turns.get(s.actorId);
  if (!t) turns.set(s.actorId, (t = {}));
  if (s.phase === "mailbox.delivered") {
    if (t.ack !== undefined) spans.ackToNextDelivery.push(s.start - t.ack);
    t.delivered = s.start;
    t.checkpointEnd = undefined;
    t.ack = undefined;
  } else if (s.phase === "kv.checkpoint" && t.delivered !== undefined) {
    t.checkpointEnd = s.end;
    spans.deliveredToCheckpoint.push(s.start - t.delivered);
    spans.checkpoint.push(s.end - s.start);
  } else if (s.phase === "mailbox.ack" && t.delivered !== undefined) {
    t.ack = s.start;
    if (t.checkpointEnd !== undefined) spans.checkpointToAck.push(s.start - t.checkpointEnd);
    spans.deliveredToAck.push(s.start - t.delivered);
  }
});

const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted.length > 0 ? Number(sorted[Math.floor(sorted.length / 2)].toFixed(2)) : null;
};

setInterval(() => {
  if (spans.deliveredToAck.length === 0) return;
  const medians = Object.fromEntries(Object.entries(spans).map(([k, xs]) => [k, median(xs)]));
  writeFileSync(out, JSON.stringify({ turns: spans.deliveredToAck.length, ...medians }));
}, 2000).unref();
