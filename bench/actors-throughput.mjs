// Actor message throughput, send → handler → ack, over 100 `counter` actors hosted by
// 1 and by 3 node processes, beside raw JetStream doing the same shape of work in the
// same run: 100 subjects, one durable consumer each with max_ack_pending 1 (one message
// at a time per actor), publish → consume → ack.
// Besides the rates it prints what each message cost, counted rather than timed (the load
// does not move these): NATS messages in + out at the server, and CPU ms of the node
// processes, of nats-server and of this process (the sender; raw: sender and consumer).
// KOVA_BENCH_MESSAGES (default 3000), KOVA_BENCH_WAL_SYNC (default full).
import { loadavg } from "node:os";
import { jetstream, jetstreamManager, AckPolicy } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { startNatsServer } from "../dist/testing/index.js";
import { cpuMs, createEnvelope, fmt, machine, startCluster, waitFor } from "./actors-lib.mjs";

const MESSAGES = Number(process.env.KOVA_BENCH_MESSAGES ?? 3000);
const ACTORS = 100;
const WINDOW = 100;
const walSync = process.env.KOVA_BENCH_WAL_SYNC ?? "full";
const actorIds = Array.from({ length: ACTORS }, (_, i) => `c-${i}`);

const varz = async (server) => (await fetch(`${server.monitorUrl}/varz`)).json();
const selfMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
/** Counters of a server and the processes around it, to be read before and after a run. */
async function counters(server, pids) {
  const v = await varz(server);
  return {
    msgs: v.in_msgs + v.out_msgs,
    bytes: v.in_bytes + v.out_bytes,
    nats: cpuMs(server.pid),
    nodes: pids.reduce((s, p) => s + cpuMs(p), 0),
    self: selfMs(),
  };
}
/** Per message: NATS messages, KB, CPU ms; `extraMsgs` are the bench's own (count polls) to leave out. */
function perMessage(a, b, extraMsgs = 0) {
  const per = (x) => x / MESSAGES;
  return {
    msgs: per(b.msgs - a.msgs - extraMsgs),
    kb: per((b.bytes - a.bytes) / 1024),
    nats: per(b.nats - a.nats),
    nodes: per(b.nodes - a.nodes),
    self: per(b.self - a.self),
  };
}
const costText = (c) =>
  `per message: ${c.msgs.toFixed(1)} NATS messages, ${c.kb.toFixed(2)} KB; CPU ms nodes ${c.nodes.toFixed(3)} + nats-server ${c.nats.toFixed(3)} + bench ${c.self.toFixed(3)} = ${(c.nodes + c.nats + c.self).toFixed(3)}`;

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
  const before = await counters(server, []);
  const start = performance.now();
  for (let i = 0; i < MESSAGES; i += WINDOW) {
    const batch = [];
    for (let j = i; j < Math.min(MESSAGES, i + WINDOW); j++) batch.push(js.publish(`raw.${j % ACTORS}`, payload));
    await Promise.all(batch);
  }
  await finished;
  const rate = MESSAGES / ((performance.now() - start) / 1000);
  const cost = perMessage(before, await counters(server, []));
  for (const s of stops) s();
  await nc.close();
  await server.stop();
  return { rate, cost };
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
    let polls = 0;
    const count = async () => {
      polls++;
      const infos = await Promise.all(actorIds.map((id) => c.bus.request(id, "info_request", {}, { timeoutMs: 5000 })));
      return infos.reduce((s, i) => s + i.count, 0);
    };
    const pids = [...c.pids().values()];
    const before = await counters(c.server, pids);
    const start = performance.now();
    for (let i = 0; i < MESSAGES; i += WINDOW) {
      const batch = [];
      for (let j = i; j < Math.min(MESSAGES, i + WINDOW); j++) {
        batch.push(c.bus.send(createEnvelope({ from: "bench", to: actorIds[j % ACTORS], type: "task_delegate", payload: { n: j } })));
      }
      await Promise.all(batch);
    }
    await waitFor(async () => (await count()) >= MESSAGES, 300_000, "all messages handled", 50);
    const rate = MESSAGES / ((performance.now() - start) / 1000);
    // Each info_request poll of an actor: request in, to the node, reply in, to the bench.
    return { rate, cost: perMessage(before, await counters(c.server, pids), polls * ACTORS * 4) };
  } finally {
    await c.stop();
  }
}

const raw = await rawJetStream();
const one = await kova(1);
const three = await kova(3);
console.log(`actors throughput (${MESSAGES} messages over ${ACTORS} actors, WAL sync ${walSync}; ${machine()})`);
console.log(`  raw JetStream (publish → consume → ack, max_ack_pending 1): ${fmt(raw.rate)} msg/s; ${costText(raw.cost)}`);
console.log(`  kova, 1 node:   ${fmt(one.rate)} msg/s  ratio ${(one.rate / raw.rate).toFixed(2)}; ${costText(one.cost)}`);
console.log(`  kova, 3 nodes:  ${fmt(three.rate)} msg/s  ratio ${(three.rate / raw.rate).toFixed(2)}; ${costText(three.cost)}`);
console.log(
  `  load average ${loadavg()
    .map((l) => l.toFixed(1))
    .join(" ")}`,
);
