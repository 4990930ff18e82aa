// Fast request/reply: Kova's rpc path (envelope + msgpack + validation on both sides,
// typed reply) against a raw nats.js request/respond of the same payload bytes, at
// concurrency 1 and 256. Targets: throughput ratio ≥ 0.9, p50 latency ≤ 1.2×.
// BUS_BENCH_RPC_MS per measurement (default 1500), BUS_BENCH_ROUNDS rounds (default 3).
import { connect } from "@nats-io/transport-node";
import { pack } from "msgpackr";
import { Bus } from "../dist/bus/index.js";
import { alternate, drive as driveFor, fmt, median, report, silent, withServer } from "./bus-lib.mjs";

const MS = Number(process.env.BUS_BENCH_RPC_MS ?? 1500);
const ROUNDS = Number(process.env.BUS_BENCH_ROUNDS ?? 3);
const payload = { question: "what can you do?", detail: "capabilities" };
const answer = { capabilities: ["search", "summarize"], load: 0.2 };

const drive = (workers, call) => driveFor(MS, workers, call);

await withServer(async (server) => {
  // Responder and requester on separate connections, as two services would be.
  const serverBus = await Bus.connect({ servers: server.url, cluster: "benchrpc", logger: silent });
  const clientBus = await Bus.connect({ servers: server.url, cluster: "benchrpc", logger: silent, clientId: "bench" });
  await serverBus.serveRpc("oracle", async () => answer).ready;
  const rawServer = await connect({ servers: server.url });
  const rawClient = await connect({ servers: server.url });
  // Kova's connection sets noAsyncTraces; this shows what that option alone gives raw nats.js.
  const rawClientNt = await connect({ servers: server.url, noAsyncTraces: true });
  const reqBytes = pack(payload);
  const resBytes = pack(answer);
  rawServer.subscribe("raw.oracle", { callback: (_err, m) => m.respond(resBytes) });
  await rawServer.flush();
  const kova = () => clientBus.request("oracle", "capability_query", payload, { timeoutMs: 10_000 });
  const raw = () => rawClient.request("raw.oracle", reqBytes, { timeout: 10_000 });
  const rawNt = () => rawClientNt.request("raw.oracle", reqBytes, { timeout: 10_000 });

  for (const c of [1, 256]) {
    await drive(c, kova); // warm-up
    await drive(c, raw);
    const { ours, base } = await alternate(
      ROUNDS,
      () => drive(c, kova),
      () => drive(c, raw),
    );
    const k = { rps: median(ours.map((r) => r.rps)), p50: median(ours.map((r) => r.p50)), p99: median(ours.map((r) => r.p99)) };
    const r = { rps: median(base.map((x) => x.rps)), p50: median(base.map((x) => x.p50)), p99: median(base.map((x) => x.p99)) };
    const nt = await drive(c, rawNt);
    const tr = k.rps / r.rps;
    const lr = k.p50 / r.p50;
    report(`fast request/reply, concurrency ${c}, ${MS} ms x ${ROUNDS} rounds (median)`, [
      `kova  bus.request : ${fmt(k.rps)} req/s  p50 ${k.p50.toFixed(0)} µs  p99 ${k.p99.toFixed(0)} µs`,
      `raw   nc.request  : ${fmt(r.rps)} req/s  p50 ${r.p50.toFixed(0)} µs  p99 ${r.p99.toFixed(0)} µs`,
      `(raw with noAsyncTraces, one round: ${fmt(nt.rps)} req/s  p50 ${nt.p50.toFixed(0)} µs)`,
      `throughput ratio ${tr.toFixed(2)} (target ≥ 0.90) ${tr >= 0.9 ? "MET" : "MISSED"};  p50 ratio ${lr.toFixed(2)} (target ≤ 1.20) ${lr <= 1.2 ? "MET" : "MISSED"}`,
    ]);
  }
  await clientBus.close();
  await serverBus.close();
  await rawClient.close();
  await rawClientNt.close();
  await rawServer.close();
});
