// Gateway overhead: the same agent run (a contract agent on a zero-latency scripted model)
// asked three ways by 64 concurrent clients: KovaClient.ask (what `kova ask` does), an A2A
// SendMessage through the gateway (JSON-RPC over HTTP), and an OpenAI-compatible chat
// call through the gateway. Rounds alternate; prints requests/s, p50, p99 and the ratio
// to ask, and what each request cost, counted rather than timed (the machine's load moves
// these far less): NATS messages in + out at the server, CPU µs of this process (clients,
// gateway, node, model) and of nats-server. GW_BENCH_MS per measurement (default 8000),
// GW_BENCH_ROUNDS (default 2).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import OpenAI from "openai";
import { KovaClient } from "../dist/bus/index.js";
import { ActorTypeRegistry, defineActor } from "../dist/actors/index.js";
import { KovaNode, parseConfig } from "../dist/node/index.js";
import { Gateway, generateKey, hashKey, parseGatewayConfig } from "../dist/gateway/index.js";
import { scriptedReply, startScriptedModelServer } from "../dist/testing/index.js";
import { drive, fmt, report, silent, withServer } from "./bus-lib.mjs";
import { cpuMs } from "./actors-lib.mjs";
import { loadavg } from "node:os";

const MS = Number(process.env.GW_BENCH_MS ?? 8000);
const ROUNDS = Number(process.env.GW_BENCH_ROUNDS ?? 2);
const CLIENTS = 64;
const AGENTS = 8;

/** The agent protocol's minimal implementation: run_started, tokens, run_completed, reply. */
function contractAgent(baseURL) {
  const client = new OpenAI({ baseURL, apiKey: "bench", maxRetries: 0 });
  return defineActor({
    type: "bench-agent",
    initialState: () => ({ runs: 0 }),
    handlers: {
      task_delegate: async (ctx) => {
        const p = ctx.message.payload ?? {};
        const ev = { sessionId: p.sessionId ?? ctx.newId(), runId: p.runId ?? ctx.newId() };
        await ctx.emit("run_started", { agentId: ctx.actorId, input: p.input }, ev);
        const res = await ctx.step("model", async () => {
          const stream = await client.chat.completions.create(
            { model: "m", messages: [{ role: "user", content: String(p.input) }], stream: true, stream_options: { include_usage: true } },
            { signal: ctx.signal },
          );
          let text = "";
          let usage = { inputTokens: 0, outputTokens: 0 };
          for await (const c of stream) {
            const d = c.choices[0]?.delta?.content;
            if (d) {
              text += d;
              ctx.stream("model_delta", { text: d }, ev);
            }
            if (c.usage) usage = { inputTokens: c.usage.prompt_tokens, outputTokens: c.usage.completion_tokens };
          }
          return { text, usage };
        });
        ctx.state.runs += 1;
        await ctx.emit("run_completed", { output: res.text, usage: res.usage }, ev);
        await ctx.emit("run_stream_end", { status: "completed" }, ev);
        return { output: res.text, usage: res.usage, runId: ev.runId, sessionId: ev.sessionId, status: "completed" };
      },
    },
  });
}

await withServer(async (server) => {
  const model = await startScriptedModelServer({ handler: () => scriptedReply.text("four short words here", { usage: { inputTokens: 10, outputTokens: 4 } }) });
  const dir = await mkdtemp(join(tmpdir(), "kova-gwbench-"));
  const cluster = `gwb${Date.now() % 1e6}`;
  const agents = Array.from({ length: AGENTS }, (_, i) => `a${i}`);
  const config = parseConfig(
    `[node]\nid = "n1"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\n[nats]\nurls = ["${server.url}"]\n[wal]\nsync = "normal"\n` +
      agents.map((a) => `[[actors]]\nid = "${a}"\ntype = "bench-agent"\n`).join(""),
    { env: {} },
  );
  const node = await KovaNode.start({ config, types: new ActorTypeRegistry([contractAgent(model.url)]), logger: silent });
  while (node.agents().filter((a) => a.state === "Idle").length < AGENTS) await new Promise((r) => setTimeout(r, 50));
  const key = generateKey();
  const gateway = await Gateway.start({
    // The key's quotas above the bench's 64 clients: the gateway's own cost is measured, not its limits.
    config: parseGatewayConfig({
      listen: "127.0.0.1:0",
      keys: [{ name: "bench", hash: hashKey(key), max_concurrent_runs: CLIENTS * 2 }],
      rate_per_minute: 1_000_000,
    }),
    servers: server.url,
    cluster,
    logger: silent,
  });
  const client = await KovaClient.connect({ servers: server.url, cluster });
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json", "A2A-Version": "1.0" };
  let i = 0;
  const next = () => agents[i++ % AGENTS];

  const ask = () => client.ask(next(), "task_delegate", { input: "hello" }, { timeoutMs: 60_000 });
  const a2a = async () => {
    const r = await fetch(`${gateway.url}/agents/${next()}/a2a/jsonrpc`, {
      method: "POST",
      headers,
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "SendMessage",
        params: { message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text: "hello" }] } },
      }),
    });
    const body = await r.json();
    if (body.result?.task?.status?.state !== "TASK_STATE_COMPLETED") throw new Error(`a2a: ${JSON.stringify(body).slice(0, 200)}`);
  };
  const openai = async () => {
    const r = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: next(), messages: [{ role: "user", content: "hello" }] }),
    });
    if (r.status !== 200) throw new Error(`openai: ${r.status} ${await r.text()}`);
    await r.json();
  };

  const varz = async () => (await fetch(`${server.monitorUrl}/varz`)).json();
  /** drive() with nats-server's CPU and the NATS messages per request beside this process's CPU. */
  const measure = async (ms, f) => {
    const [v0, n0] = [await varz(), cpuMs(server.pid)];
    const r = await drive(ms, CLIENTS, f);
    const [v1, n1] = [await varz(), cpuMs(server.pid)];
    const calls = (r.rps * ms) / 1000;
    return { ...r, natsCpu: ((n1 - n0) * 1000) / calls, msgs: (v1.in_msgs - v0.in_msgs + v1.out_msgs - v0.out_msgs) / calls };
  };

  // warm-up: JIT, consumers, connections
  for (const f of [ask, a2a, openai]) await drive(1500, CLIENTS, f);
  const results = { ask: [], a2a: [], openai: [] };
  for (let round = 0; round < ROUNDS; round++) {
    results.ask.push(await measure(MS, ask));
    results.a2a.push(await measure(MS, a2a));
    results.openai.push(await measure(MS, openai));
  }
  const best = (xs) => xs.reduce((a, b) => (b.rps > a.rps ? b : a));
  const base = best(results.ask);
  const line = (name, r) =>
    `${name.padEnd(28)} ${fmt(r.rps).padStart(6)} req/s   p50 ${(r.p50 / 1000).toFixed(1).padStart(6)} ms   p99 ${(r.p99 / 1000).toFixed(1).padStart(6)} ms   ratio ${(r.rps / base.rps).toFixed(2)}` +
    `   per request: ${r.msgs.toFixed(1)} NATS messages, CPU ${fmt(r.cpu)} µs here + ${fmt(r.natsCpu)} µs nats-server`;
  report(`gateway overhead: ${CLIENTS} concurrent clients, ${AGENTS} agents, zero-latency scripted model (best of ${ROUNDS} rounds of ${MS} ms)`, [
    line("KovaClient.ask (kova ask)", base),
    line("A2A SendMessage (gateway)", best(results.a2a)),
    line("OpenAI chat (gateway)", best(results.openai)),
    `load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")}`,
  ]);
  await client.close();
  await gateway.close();
  await node.stop("bench");
  await model.close();
  await rm(dir, { recursive: true, force: true });
});
