// Durable A2A delivery: Kova send → mailbox handler → ack, against raw nats.js
// JetStream publish → consume → ack with the same stream and consumer settings
// (WorkQueue file stream, Nats-Msg-Id, one durable consumer, explicit ack,
// max_ack_pending 1, max_messages 1). Target: ratio ≥ 0.8.
// BUS_BENCH_N messages per round (default 5000), BUS_BENCH_ROUNDS rounds (default 3).
import { AckPolicy, RetentionPolicy, StorageType, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { pack, unpack } from "msgpackr";
import { Bus, createEnvelope } from "../dist/bus/index.js";
import { alternate, fmt, median, report, silent, withServer } from "./bus-lib.mjs";

const N = Number(process.env.BUS_BENCH_N ?? 5000);
const ROUNDS = Number(process.env.BUS_BENCH_ROUNDS ?? 3);
const WINDOW = 128; // sends in flight
const payload = { task: "summarize", text: "x".repeat(200), constraints: { max_tokens: 512 } };

/** Sends n items with at most WINDOW unacknowledged publishes. */
async function pipeline(n, sendOne) {
  let next = 0;
  const worker = async () => {
    while (next < n) await sendOne(next++);
  };
  await Promise.all(Array.from({ length: WINDOW }, worker));
}

async function kovaRound(url, round) {
  const bus = await Bus.connect({ servers: url, cluster: `bench${round}k${Date.now() % 1e6}`, logger: silent });
  await bus.ensureStreams();
  let handled = 0;
  let done;
  const all = new Promise((r) => (done = r));
  const mb = await bus.openMailbox("bench", async () => {
    if (++handled === N) done();
  });
  const t0 = performance.now();
  await pipeline(N, () => bus.send(createEnvelope({ from: "bench", to: "bench", type: "task_delegate", payload })));
  await all;
  const secs = (performance.now() - t0) / 1000;
  await mb.stop();
  await bus.close();
  return N / secs;
}

async function rawRound(url, round, decode = false) {
  const nc = await connect({ servers: url });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const stream = `RAW_${round}_${Date.now() % 1e6}`;
  const subject = `raw${round}.${Date.now() % 1e6}.a2a.bench`;
  await jsm.streams.add({ name: stream, subjects: [subject], retention: RetentionPolicy.Workqueue, storage: StorageType.File, duplicate_window: 120e9 });
  await jsm.consumers.add(stream, { durable_name: "bench", ack_policy: AckPolicy.Explicit, max_ack_pending: 1, filter_subject: subject });
  const consumer = await js.consumers.get(stream, "bench");
  let handled = 0;
  let done;
  const all = new Promise((r) => (done = r));
  const messages = await consumer.consume({ max_messages: 1 });
  const reading = (async () => {
    for await (const m of messages) {
      // The reference line: what any real consumer must do at least (read the bytes).
      if (decode) unpack(m.data);
      m.ack();
      if (++handled === N) {
        done();
        break;
      }
    }
  })();
  const t0 = performance.now();
  // The raw user still has to encode something: the same payload, msgpack.
  await pipeline(N, () => js.publish(subject, pack({ id: randomUUID(), payload }), { msgID: randomUUID() }));
  await all;
  const secs = (performance.now() - t0) / 1000;
  await reading;
  await nc.close();
  return N / secs;
}

await withServer(async (server) => {
  // Warm-up (JIT, file store) outside the measurement.
  await kovaRound(server.url, 99);
  await rawRound(server.url, 99);
  const { ours, base } = await alternate(
    ROUNDS,
    (i) => kovaRound(server.url, i),
    (i) => rawRound(server.url, i),
  );
  const k = median(ours);
  const r = median(base);
  const decoded = [];
  for (let i = 0; i < ROUNDS; i++) decoded.push(await rawRound(server.url, 200 + i, true));
  const d = median(decoded);
  report(`durable A2A delivery, ${N} messages x ${ROUNDS} rounds (median), ${WINDOW} sends in flight`, [
    `kova  send → mailbox → ack : ${fmt(k)} msg/s   (rounds: ${ours.map(fmt).join(", ")})`,
    `raw   publish → consume → ack: ${fmt(r)} msg/s   (rounds: ${base.map(fmt).join(", ")})`,
    `ratio ${(k / r).toFixed(2)}  (target ≥ 0.80) ${k / r >= 0.8 ? "MET" : "MISSED"}`,
    `reference: raw + msgpack decode before ack: ${fmt(d)} msg/s (kova / that = ${(k / d).toFixed(2)})`,
  ]);
});
