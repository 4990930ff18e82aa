// Actor message throughput, send → handler → ack, over 100 `counter` actors hosted by
// 1 and by 3 node processes, beside raw JetStream doing the same shape of work in the
// same run: 100 subjects, one durable consumer each with max_ack_pending 1 (one message
// at a time per actor), publish → consume → ack.
// KOVA_BENCH_MESSAGES (default 3000), KOVA_BENCH_WAL_SYNC (default full).
import { jetstream, jetstreamManager, AckPolicy } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { startNatsServer } from "../dist/testing/index.js";
import { createEnvelope, fmt, machine, startCluster, waitFor } from "./actors-lib.mjs";

const MESSAGES = Number(process.env.KOVA_BENCH_MESSAGES ?? 3000);
const ACTORS = 100;
const WINDOW = 100;
const walSync = process.env.KOVA_BENCH_WAL_SYNC ?? "full";
const actorIds = Array.from({ length: ACTORS }, (_, i) => `c-${i}`);

async function rawJetStream() {
  const server = await startNatsServer({ allowExternal: false });
  const nc = await connect({ servers: server.url });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  await jsm.streams.add({ name: "RAW", subjects: ["raw.*"], retention: "workqueue" });
  let acked = 0;
  let done;
  const finished = new Promise((r) => (done = r));
  const stops = [];
  for (let i = 0; i < ACTORS; i++) {
    await jsm.consumers.add("RAW", { durable_name: `c${i}`, filter_subject: `raw.${i}`, ack_policy: AckPolicy.Explicit, max_ack_pending: 1 });
    const c = await js.consumers.get("RAW", `c${i}`);
    const iter = await c.consume({ max_messages: 1 });
    stops.push(() => iter.stop());
    void (async () => {
      for await (const m of iter) {
        m.ack();
        if (++acked === MESSAGES) done();
      }
    })();
  }
  const payload = new TextEncoder().encode(JSON.stringify({ n: 1 }));
  const start = performance.now();
  for (let i = 0; i < MESSAGES; i += WINDOW) {
    const batch = [];
    for (let j = i; j < Math.min(MESSAGES, i + WINDOW); j++) batch.push(js.publish(`raw.${j % ACTORS}`, payload));
    await Promise.all(batch);
  }
  await finished;
  const rate = MESSAGES / ((performance.now() - start) / 1000);
  for (const s of stops) s();
  await nc.close();
  await server.stop();
  return rate;
}

async function kova(nodeCount) {
  const nodes = Array.from({ length: nodeCount }, (_, i) => `n${i + 1}`);
  const c = await startCluster({ nodes, walSync, heartbeatMs: 500, staleAfterMs: 3000, actors: actorIds.map((id) => ({ id, type: "counter" })) });
  try {
    await waitFor(
      async () => {
        const a = await c.agents();
        return a.size === ACTORS && [...a.values()].every((r) => r.state === "Idle");
      },
      60_000,
      "actors placed",
    );
    const count = async () => {
      const infos = await Promise.all(actorIds.map((id) => c.bus.request(id, "info_request", {}, { timeoutMs: 5000 })));
      return infos.reduce((s, i) => s + i.count, 0);
    };
    const start = performance.now();
    for (let i = 0; i < MESSAGES; i += WINDOW) {
      const batch = [];
      for (let j = i; j < Math.min(MESSAGES, i + WINDOW); j++) {
        batch.push(c.bus.send(createEnvelope({ from: "bench", to: actorIds[j % ACTORS], type: "task_delegate", payload: { n: j } })));
      }
      await Promise.all(batch);
    }
    await waitFor(async () => (await count()) >= MESSAGES, 300_000, "all messages handled", 50);
    return MESSAGES / ((performance.now() - start) / 1000);
  } finally {
    await c.stop();
  }
}

const raw = await rawJetStream();
const one = await kova(1);
const three = await kova(3);
console.log(`actors throughput (${MESSAGES} messages over ${ACTORS} actors, WAL sync ${walSync}; ${machine()})`);
console.log(`  raw JetStream (publish → consume → ack, max_ack_pending 1): ${fmt(raw)} msg/s`);
console.log(`  kova, 1 node:   ${fmt(one)} msg/s  ratio ${(one / raw).toFixed(2)}`);
console.log(`  kova, 3 nodes:  ${fmt(three)} msg/s  ratio ${(three / raw).toFixed(2)}`);
