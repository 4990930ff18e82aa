// The floor under an agent run: the same durable round trips an agent turn makes, written
// by hand with raw nats.js, raw lmdb and the `openai` client, with none of Kova's
// bookkeeping (no envelope, fence, lease, journal replay, budgets, scheduler). What is
// left between Kova and this is Kova's own overhead; what is left between this and the
// direct model call is the price of the guarantees themselves.
//
// `minimal: true` is the least a durable agent turn could do at all (below): durable send,
// delivery, model call, one flushed write of its answer, reply — what the target of
// "1.5× the direct call plus the journal write" leaves room for.
//
// One turn, in the order the agent keeps (docs/actors.md, "The turn protocol"):
//   client: JetStream publish (the durable send), then wait for the reply on an inbox
//   node:   pull delivery → flushed lmdb put (the turn record) → model call, with the
//           `run_started` publish beside it → `model_response` publish → flushed lmdb put
//           ‖ journal-stream append (the recorded model step) → `run_completed` publish →
//           `run_stream_end` publish → KV compare-and-set (the checkpoint) → reply
//           (core publish) → ack, and the record's completion put, not awaited.
import { AckPolicy, RetentionPolicy, StorageType, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, createInbox } from "@nats-io/transport-node";
import { open } from "lmdb";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const enc = new TextEncoder();
const json = (v) => enc.encode(JSON.stringify(v));

/**
 * Starts the hand-written pipeline on `natsUrl`; `call()` is the model call (awaited
 * whole, streamed). Returns `turn()` (one asked turn, resolving with the reply) and `close()`.
 */
export async function startFloor(natsUrl, call, { minimal = false } = {}) {
  const tag = `f${Math.random().toString(36).slice(2, 8)}`;
  const nc = await connect({ servers: natsUrl, noAsyncTraces: true });
  const client = await connect({ servers: natsUrl, noAsyncTraces: true });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const file = { storage: StorageType.File, duplicate_window: 120e9 };
  await jsm.streams.add({ name: `${tag}_A2A`, subjects: [`${tag}.a2a.>`], retention: RetentionPolicy.Workqueue, ...file });
  await jsm.streams.add({ name: `${tag}_EVENTS`, subjects: [`${tag}.events.>`], ...file });
  await jsm.streams.add({ name: `${tag}_JOURNAL`, subjects: [`${tag}.journal.>`], ...file });
  await jsm.consumers.add(`${tag}_A2A`, { durable_name: "agent", ack_policy: AckPolicy.Explicit, max_ack_pending: 1, filter_subject: `${tag}.a2a.agent` });
  const kv = await new Kvm(js).create(`${tag}_checkpoints`, { history: 1 });
  const base = mkdtempSync(join(process.env.KOVA_BENCH_DIR ?? tmpdir(), "kova-bench-floor-"));
  const env = open({ path: join(base, "db"), maxDbs: 4, eventTurnBatching: true, compression: false });
  const db = env.openDB({ name: "turns", encoding: "binary" });
  const flushedPut = async (key, value) => {
    await db.put(key, value);
    await env.flushed;
  };

  let revision = await kv.create("agent", json({ n: 0 }));
  let n = 0;
  const consumer = await js.consumers.get(`${tag}_A2A`, "agent");
  const messages = await consumer.consume({ max_messages: 1 });
  const serving = (async () => {
    for await (const m of messages) {
      const { id, replyTo } = m.json();
      if (minimal) {
        // The least any durable agent turn could do: the message is durable (JetStream),
        // the model's answer is journaled once before it is used, the reply is sent.
        await call();
        await flushedPut(`${id}.0`, Buffer.from(json({ turn: id, step: 0, result: "the answer is 42" })));
        nc.publish(replyTo, json({ for: id, output: "the answer is 42" }));
        m.ack();
        continue;
      }
      const ev = (type) => js.publish(`${tag}.events.${id}`, json({ type, runId: id, ts: Date.now() }), { msgID: `${id}.${type}` });
      await flushedPut(id, Buffer.from(m.data));
      const started = ev("run_started");
      await call();
      await started;
      await ev("model_response");
      const step = json({ turn: id, step: 0, result: "the answer is 42" });
      await Promise.all([flushedPut(`${id}.0`, Buffer.from(step)), js.publish(`${tag}.journal.agent`, step, { msgID: `${id}.0` })]);
      await ev("run_completed");
      await ev("run_stream_end");
      revision = await kv.update("agent", json({ n: ++n, last: id }), revision);
      nc.publish(replyTo, json({ for: id, output: "the answer is 42" }));
      m.ack();
      db.put(`${id}.done`, Buffer.from([1]));
    }
  })();

  const cjs = jetstream(client);
  let seq = 0;
  return {
    /** One flushed lmdb put of a model step's size: "the journal write" of the target. */
    async journalWrite() {
      await flushedPut(`w-${++seq}`, Buffer.from(json({ turn: "w", step: 0, result: "the answer is 42" })));
    },
    async turn() {
      const id = `${tag}-${++seq}`;
      const replyTo = createInbox();
      const sub = client.subscribe(replyTo, { max: 1 });
      const reply = (async () => {
        for await (const r of sub) return r.json();
      })();
      await cjs.publish(`${tag}.a2a.agent`, json({ id, replyTo, type: "task_delegate", payload: { input: "question" } }), { msgID: id });
      return reply;
    },
    async close() {
      messages.stop();
      await serving.catch(() => undefined);
      await client.close();
      await nc.close();
      await env.close();
      rmSync(base, { recursive: true, force: true });
    },
  };
}
