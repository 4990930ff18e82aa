// Kova beside the agent runtimes a user would pick instead, in one run on one machine:
// LangGraph.js with MemorySaver (in memory) and with PostgresSaver (durable, the local
// PostgreSQL), the OpenAI Agents SDK (in memory), the bare `openai` client, and the
// hand-written durable floor of bench/agents-floor.mjs (one-call scenario only). Every
// system calls the same mock model (bench/peers/mock-model.mjs, a process of its own).
//
// Two scenarios: one model call per run; and a tool loop (model → two parallel
// get_weather calls → model). For each, windows alternate between the systems (the order
// rotates each round): a c=1 window of sequential runs (latency) and a c=16 window of
// 16 concurrent callers (runs/s). After every window the bench checks that the system made
// exactly the model calls, messages and tool calls its runs should (the mock counts per
// system), and reads the CPU time of this process, of Kova's nats-server and of the mock
// from /proc. Kova is an in-process node (`KovaNode`, WAL `full`, defaults), asked through
// `askAgent` on a `KovaClient`; at c=16 each caller has an agent of its own (one run at a
// time per agent), as each LangGraph caller has a thread of its own.
//
// Run: `npm run build` at the root, then here `npm ci && npm run bench` (Node 24 from this
// package's own `node` dependency). PEERS_ROUNDS (default 5), PEERS_RUNS (c=1 runs per
// window, 200), PEERS_WINDOW_MS (c=16 window, 2000), PEERS_WARMUP (c=1 runs before measuring,
// 1,100: past Kova's processed window), PEERS_SYSTEMS (comma list), PEERS_SCENARIOS
// (one,tools), PEERS_TRACE=1 (Kova's phase timeline after the figures), PG_URL (default postgresql://postgres@127.0.0.1:5432/test), KOVA_BENCH_DIR, KOVA_DIST.
import { fork } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";

const HERE = dirname(fileURLToPath(import.meta.url));
const env = process.env;

if (Number(process.versions.node.split(".")[0]) < 22) {
  console.error(
    `bench/peers needs Node >= 22 (LangGraph's OpenAI binding and openai 7 do); this is ${process.version}. Run it with \`npm run bench\` in bench/peers.`,
  );
  process.exit(2);
}

// KOVA_DIST runs another build (a copy of dist/ inside this repository, so that it finds
// node_modules); KOVA_BASE_DIST adds a second Kova from such a copy (`kova-base`, on a
// nats-server of its own): a change's before and after, side by side in one run.
const distUrl = (dir) => pathToFileURL(`${resolve(dir)}/`).href;
const DIST = env.KOVA_DIST ? distUrl(env.KOVA_DIST) : new URL("../../dist/", import.meta.url).href;
const { KOVA_VERSION } = await import(`${DIST}index.js`);
const { startFloor } = await import("../agents-floor.mjs");
const { default: OpenAI } = await import("openai");
const { z } = await import("zod");

const ROUNDS = Number(env.PEERS_ROUNDS ?? 5);
const RUNS = Number(env.PEERS_RUNS ?? 200);
const WINDOW_MS = Number(env.PEERS_WINDOW_MS ?? 2000);
const WARMUP = Number(env.PEERS_WARMUP ?? 1100);
const CONCURRENCY = 16;
const PG_URL = env.PG_URL ?? "postgresql://postgres@127.0.0.1:5432/test";
const SCENARIOS = (env.PEERS_SCENARIOS ?? "one,tools").split(",");
const SYSTEM = "Be brief.";
const QUESTION = "What is the weather in Paris and in Oslo?";
/** What one run must cost each system: model calls, messages sent to the model, tool calls. */
const EXPECTED = { one: { modelCalls: 1, messages: 2, toolResults: 0, toolCalls: 0 }, tools: { modelCalls: 2, messages: 7, toolResults: 2, toolCalls: 2 } };

const pkg = (name) => JSON.parse(readFileSync(join(HERE, "node_modules", name, "package.json"), "utf8")).version;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

// ---- the mock model, in its own process -------------------------------------------------
const mock = fork(join(HERE, "mock-model.mjs"), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
const mockUrl = await new Promise((resolve, reject) => {
  mock.once("message", (m) => resolve(m.url));
  mock.once("exit", (code) => reject(new Error(`mock model exited with ${code}`)));
});
const modelCounts = () =>
  new Promise((resolve) => {
    mock.once("message", (m) => resolve(m.counts));
    mock.send("counts");
  });

// ---- the tool every system offers -------------------------------------------------------
const toolCalls = new Map();
const weather = (system, city) => {
  toolCalls.set(system, (toolCalls.get(system) ?? 0) + 1);
  return { city, forecast: "sunny", celsius: 21 };
};
const WEATHER = { name: "get_weather", description: "Returns today's weather forecast for a city." };

// ---- CPU time from /proc ----------------------------------------------------------------
const TICK_MS = 10; // USER_HZ = 100 on Linux
const cpuMs = (pid) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) * TICK_MS; // utime + stime
  } catch {
    return Number.NaN;
  }
};

/** nats-server's message and byte counters (in = from clients, out = to clients). */
const natsCounters = async (nats) => (await fetch(`${nats.monitorUrl}/varz`)).json();

// ---- the systems ------------------------------------------------------------------------
async function kova(dist, name) {
  const { KovaClient, KovaNode, askAgent, defineAgent, defineTool, parseConfig } = await import(`${dist}index.js`);
  const { startNatsServer } = await import(`${dist}testing/index.js`);
  const { createLogger } = await import(`${dist}core/logger.js`);
  const nats = await startNatsServer({ allowExternal: false });
  const dir = mkdtempSync(join(env.KOVA_BENCH_DIR ?? tmpdir(), "kova-peers-"));
  const cluster = `p${Math.random().toString(36).slice(2, 10)}`;
  const silent = createLogger({ level: "silent" });
  // max_concurrency above the bench's 16 callers: the provider's capacity, not a Kova setting.
  const config = parseConfig(
    `[node]\nid = "peers"\ndata_dir = "${join(dir, "node")}"\n[cluster]\nname = "${cluster}"\n[nats]\nurls = ["${nats.url}"]\n` +
      `[models.main]\nbase_url = "${mockUrl}"\nmodel = "${name}"\nmax_concurrency = 64\n`,
    { env: {} },
  );
  const tool = defineTool({
    ...WEATHER,
    idempotent: true,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    run: ({ city }) => weather(name, city),
  });
  const agents = [];
  for (let i = 0; i < CONCURRENCY; i++) {
    agents.push(defineAgent({ id: `one${i}`, model: "main", system: SYSTEM }));
    agents.push(defineAgent({ id: `tools${i}`, model: "main", system: SYSTEM, tools: ["get_weather"] }));
  }
  const node = await KovaNode.start({ config, agents, tools: [tool], logger: silent });
  while (node.agents().filter((a) => a.state === "Idle").length < agents.length) await new Promise((r) => setTimeout(r, 50));
  const client = await KovaClient.connect({ servers: nats.url, cluster });
  const ask = async (id) => {
    const r = await askAgent(client, id, QUESTION);
    if (r.status !== "completed") throw new Error(`kova: run ${r.status}: ${JSON.stringify(r.error)}`);
  };
  return {
    name,
    label: `Kova ${name === "kova" ? "" : `${name} `}(in-process node, WAL full)`,
    nats,
    run: { one: (w) => ask(`one${w}`), tools: (w) => ask(`tools${w}`) },
    async close() {
      await client.close();
      await node.stop("bench");
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The hand-written durable floor (bench/agents-floor.mjs) on Kova's nats-server: one call, streamed as Kova's is. */
async function floor(natsUrl) {
  const openai = new OpenAI({ baseURL: mockUrl, apiKey: "bench", maxRetries: 0 });
  const call = async () => {
    const s = await openai.chat.completions.create({
      model: "floor",
      messages: [
        { role: "system", content: SYSTEM },
        { role: "user", content: QUESTION },
      ],
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const _ of s);
  };
  const f = await startFloor(natsUrl, call);
  return { name: "floor", label: "durable floor by hand (agents-floor.mjs)", run: { one: () => f.turn() }, close: () => f.close() };
}

async function langgraph(kind) {
  const { StateGraph, MessagesAnnotation, START, END, MemorySaver } = await import("@langchain/langgraph");
  const { ToolNode, toolsCondition } = await import("@langchain/langgraph/prebuilt");
  const { ChatOpenAI } = await import("@langchain/openai");
  const { tool } = await import("@langchain/core/tools");
  const { HumanMessage, SystemMessage } = await import("@langchain/core/messages");
  const name = `langgraph-${kind}`;
  let checkpointer;
  let schema;
  if (kind === "memory") checkpointer = new MemorySaver();
  else {
    const { PostgresSaver } = await import("@langchain/langgraph-checkpoint-postgres");
    schema = `kova_peers_${Math.random().toString(36).slice(2, 10)}`;
    checkpointer = PostgresSaver.fromConnString(PG_URL, { schema });
    await checkpointer.setup();
  }
  const llm = new ChatOpenAI({ model: name, apiKey: "bench", maxRetries: 0, configuration: { baseURL: mockUrl } });
  const tools = [tool(({ city }) => weather(name, city), { ...WEATHER, schema: z.object({ city: z.string() }) })];
  const build = (withTools) => {
    const model = withTools ? llm.bindTools(tools) : llm;
    const g = new StateGraph(MessagesAnnotation).addNode("agent", async (s) => ({ messages: [await model.invoke(s.messages)] })).addEdge(START, "agent");
    if (withTools) g.addNode("tools", new ToolNode(tools)).addConditionalEdges("agent", toolsCondition).addEdge("tools", "agent");
    else g.addEdge("agent", END);
    return g.compile({ checkpointer });
  };
  const graphs = { one: build(false), tools: build(true) };
  // A thread per run: every run is a new conversation, as every Kova run here is.
  const invoke = (g) => g.invoke({ messages: [new SystemMessage(SYSTEM), new HumanMessage(QUESTION)] }, { configurable: { thread_id: randomUUID() } });
  return {
    name,
    label: `LangGraph.js ${pkg("@langchain/langgraph")} + ${kind === "memory" ? "MemorySaver" : `PostgresSaver ${pkg("@langchain/langgraph-checkpoint-postgres")}`}`,
    run: { one: () => invoke(graphs.one), tools: () => invoke(graphs.tools) },
    async close() {
      if (schema) {
        await checkpointer.pool.query(`DROP SCHEMA ${schema} CASCADE`);
        await checkpointer.end();
      }
    },
  };
}

async function openaiAgents() {
  const { Agent, Runner, tool, setTracingDisabled, OpenAIChatCompletionsModel } = await import("@openai/agents");
  setTracingDisabled(true);
  const client = new OpenAI({ baseURL: mockUrl, apiKey: "bench", maxRetries: 0 });
  const model = new OpenAIChatCompletionsModel(client, "openai-agents");
  const t = tool({ ...WEATHER, parameters: z.object({ city: z.string() }), execute: ({ city }) => weather("openai-agents", city) });
  const agents = {
    one: new Agent({ name: "bench", instructions: SYSTEM, model }),
    tools: new Agent({ name: "bench", instructions: SYSTEM, model, tools: [t] }),
  };
  const runner = new Runner();
  return {
    name: "openai-agents",
    label: `OpenAI Agents JS ${pkg("@openai/agents")}`,
    run: { one: () => runner.run(agents.one, QUESTION), tools: () => runner.run(agents.tools, QUESTION) },
    close: async () => undefined,
  };
}

async function bareOpenai() {
  const client = new OpenAI({ baseURL: mockUrl, apiKey: "bench", maxRetries: 0 });
  const toolSpec = { type: "function", function: { ...WEATHER, parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };
  const run = async (withTools) => {
    const messages = [
      { role: "system", content: SYSTEM },
      { role: "user", content: QUESTION },
    ];
    for (;;) {
      const r = await client.chat.completions.create({ model: "openai", messages, ...(withTools ? { tools: [toolSpec] } : {}) });
      const m = r.choices[0].message;
      if (!m.tool_calls?.length) return m.content;
      messages.push(m);
      const results = await Promise.all(m.tool_calls.map(async (c) => weather("openai", JSON.parse(c.function.arguments).city)));
      for (const [i, c] of m.tool_calls.entries()) messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify(results[i]) });
    }
  };
  return { name: "openai", label: `openai ${pkg("openai")} by hand`, run: { one: () => run(false), tools: () => run(true) }, close: async () => undefined };
}

// ---- measuring --------------------------------------------------------------------------
const wanted = env.PEERS_SYSTEMS?.split(",");
const systems = [];
const k = await kova(DIST, "kova");
for (const [name, make] of [
  ["kova", async () => k],
  ...(env.KOVA_BASE_DIST ? [["kova-base", () => kova(distUrl(env.KOVA_BASE_DIST), "kova-base")]] : []),
  ["floor", () => floor(k.nats.url)],
  ["langgraph-memory", () => langgraph("memory")],
  ["langgraph-postgres", () => langgraph("postgres")],
  ["openai-agents", openaiAgents],
  ["openai", bareOpenai],
]) {
  if (!wanted || wanted.includes(name) || name === "kova" || name === "kova-base") systems.push(await make());
}

const failures = [];
/** One window of `system` in `scenario`: c=1 (`runs` sequential) or c=16 (for `ms`); checks its calls. */
async function window(system, scenario, { runs, ms }) {
  const fn = system.run[scenario];
  const before = { counts: (await modelCounts())[system.name], tools: toolCalls.get(system.name) ?? 0 };
  const nats = system.nats ?? k.nats;
  const varz0 = await natsCounters(nats);
  const cpu0 = { self: process.cpuUsage(), nats: cpuMs(nats.pid), mock: cpuMs(mock.pid) };
  const t0 = performance.now();
  const latencies = [];
  let done = 0;
  if (runs !== undefined) {
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      await fn(0);
      latencies.push(performance.now() - t);
    }
    done = runs;
  } else {
    const end = t0 + ms;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, w) => {
        while (performance.now() < end) {
          await fn(w);
          done += 1;
        }
      }),
    );
  }
  const elapsed = performance.now() - t0;
  const self = process.cpuUsage(cpu0.self);
  const cpu = { self: (self.user + self.system) / 1000 / done, nats: (cpuMs(nats.pid) - cpu0.nats) / done, mock: (cpuMs(mock.pid) - cpu0.mock) / done };
  const varz1 = await natsCounters(nats);
  cpu.natsMsgs = (varz1.in_msgs - varz0.in_msgs + varz1.out_msgs - varz0.out_msgs) / done;
  cpu.natsKB = (varz1.in_bytes - varz0.in_bytes + varz1.out_bytes - varz0.out_bytes) / 1024 / done;
  const after = { counts: (await modelCounts())[system.name], tools: toolCalls.get(system.name) ?? 0 };
  const got = {
    modelCalls: (after.counts?.modelCalls ?? 0) - (before.counts?.modelCalls ?? 0),
    messages: (after.counts?.messages ?? 0) - (before.counts?.messages ?? 0),
    toolResults: (after.counts?.toolResults ?? 0) - (before.counts?.toolResults ?? 0),
    toolCalls: after.tools - before.tools,
  };
  for (const [key, per] of Object.entries(EXPECTED[scenario])) {
    if (got[key] !== per * done)
      failures.push(`${system.name} ${scenario} ${runs !== undefined ? "c=1" : "c=16"}: ${key} ${got[key]}, expected ${per * done} for ${done} runs`);
  }
  return { latencies, runs: done, elapsed, cpu };
}

const fmt = (x, d = 2) => x.toFixed(d);
const start = new Date();
const loads = [loadavg()[0]];
const results = new Map(); // `${scenario}/${system}` → { c1: [], c16: [], cpu1: [], cpu16: [] } per round
for (const scenario of SCENARIOS) {
  const those = systems.filter((s) => s.run[scenario]);
  for (const s of those) {
    for (let i = 0; i < WARMUP; i++) await s.run[scenario](0);
    await window(s, scenario, { ms: Math.min(WINDOW_MS, 1000) });
    results.set(`${scenario}/${s.name}`, { c1: [], c16: [], cpu1: [], cpu16: [] });
  }
}
loads.push(loadavg()[0]);
for (let round = 0; round < ROUNDS; round++) {
  for (const scenario of SCENARIOS) {
    const those = systems.filter((s) => s.run[scenario]);
    // Rotate the order, so that no system always follows the same one.
    const order = those.map((_, i) => those[(i + round) % those.length]);
    for (const s of order) {
      const r = results.get(`${scenario}/${s.name}`);
      const one = await window(s, scenario, { runs: RUNS });
      r.c1.push(one.latencies);
      r.cpu1.push(one.cpu);
      const many = await window(s, scenario, { ms: WINDOW_MS });
      r.c16.push(many.runs / (many.elapsed / 1000));
      r.cpu16.push(many.cpu);
    }
  }
  loads.push(loadavg()[0]);
  process.stderr.write(`round ${round + 1}/${ROUNDS} done, load ${fmt(loadavg()[0])}\n`);
}

// ---- report -----------------------------------------------------------------------------
const versions = [
  `node ${process.version}`,
  `Kova ${KOVA_VERSION} (openai ${JSON.parse(readFileSync(join(HERE, "..", "..", "node_modules", "openai", "package.json"), "utf8")).version})`,
  `LangGraph.js ${pkg("@langchain/langgraph")}`,
  `@langchain/openai ${pkg("@langchain/openai")}`,
  `@langchain/core ${pkg("@langchain/core")}`,
  `PostgresSaver ${pkg("@langchain/langgraph-checkpoint-postgres")}`,
  `OpenAI Agents JS ${pkg("@openai/agents")}`,
  `openai ${pkg("openai")}`,
];
const builds = [env.KOVA_DIST ? `Kova from ${env.KOVA_DIST}` : "", env.KOVA_BASE_DIST ? `kova-base from ${env.KOVA_BASE_DIST}` : ""].filter(Boolean);
console.log(`peers bench, ${start.toISOString()}: ${versions.join(", ")}${builds.length ? ` (${builds.join("; ")})` : ""}`);
console.log(`load average (1 min) at start, after warm-up and after each round: ${loads.map((l) => fmt(l, 1)).join(" ")}`);
console.log(
  `${ROUNDS} rounds; per round and system: ${RUNS} runs at c=1, ${WINDOW_MS} ms at c=${CONCURRENCY}. CPU is ms per run: this process / nats-server / mock model.`,
);
const avg = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const cpuText = (xs) => `${fmt(avg(xs.map((c) => c.self)))} / ${fmt(avg(xs.map((c) => c.nats)))} / ${fmt(avg(xs.map((c) => c.mock)))}`;
/** CPU per run of every process the system used (this one, nats-server, the mock), c=16 windows. */
const cpuTotal = (xs) => avg(xs.map((c) => c.self + c.nats + c.mock));
for (const scenario of SCENARIOS) {
  console.log(`\n${scenario === "one" ? "one model call per run" : "tool loop: model → 2 parallel tool calls → model"}`);
  const base = results.get(`${scenario}/kova`);
  const kovaP50 = median(base.c1.flat());
  const kovaRps = avg(base.c16);
  const kovaCpu = cpuTotal(base.cpu16);
  const cpuLines = [];
  console.log(
    `  ${"system".padEnd(46)} ${"c=1 p50".padStart(8)} ${"p99".padStart(7)} ${"c=16 runs/s".padStart(11)}   ${"Kova÷ p50".padStart(9)} ${"Kova÷ runs/s".padStart(12)}   per-round ratios p50 | runs/s   CPU c=1 | c=16`,
  );
  const extra = [];
  for (const s of systems.filter((x) => x.run[scenario])) {
    const r = results.get(`${scenario}/${s.name}`);
    const p50 = median(r.c1.flat());
    const rps = avg(r.c16);
    const rounds1 = base.c1.map((xs, i) => median(xs) / median(r.c1[i]));
    const rounds16 = base.c16.map((x, i) => x / r.c16[i]);
    const range = (xs) => `${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}`;
    // On two saturated cores throughput follows CPU per run: the ratio the load disturbs least.
    cpuLines.push(`${s.label} ${fmt(cpuTotal(r.cpu16))} ms (Kova÷ ${fmt(cpuTotal(r.cpu16) / kovaCpu)})`);
    if (s.nats || s.name === "floor")
      extra.push(
        `  ${s.label}: NATS messages (in + out) per run c=1 ${fmt(avg(r.cpu1.map((c) => c.natsMsgs)), 1)}, c=16 ${fmt(avg(r.cpu16.map((c) => c.natsMsgs)), 1)}; KB per run c=1 ${fmt(avg(r.cpu1.map((c) => c.natsKB)), 1)} (its agent's window of processed ids full), c=16 ${fmt(avg(r.cpu16.map((c) => c.natsKB)), 1)}`,
      );
    console.log(
      `  ${s.label.padEnd(46)} ${fmt(p50).padStart(8)} ${fmt(pct(r.c1.flat(), 0.99)).padStart(7)} ${fmt(rps, 0).padStart(11)}   ${fmt(kovaP50 / p50).padStart(9)} ${fmt(kovaRps / rps).padStart(12)}   ${range(rounds1)} | ${range(rounds16)}   ${cpuText(r.cpu1)} | ${cpuText(r.cpu16)}`,
    );
  }
  for (const line of extra) console.log(line);
  console.log(`  CPU per run at c=16, all processes (runs/s at equal CPU, Kova÷ = peer's CPU ÷ Kova's): ${cpuLines.join("; ")}`);
  console.log("  (PostgreSQL's own CPU is not counted: LangGraph + PostgresSaver costs more than shown.)");
}
if (env.PEERS_TRACE) {
  // Where a Kova run's time goes: one more c=1 window per scenario with the kova:phase
  // channel subscribed (the timed windows ran without it), p50 of each phase's start and end.
  const { subscribe, unsubscribe } = await import("node:diagnostics_channel");
  const { phaseTable } = await import("../agents-lib.mjs");
  for (const scenario of SCENARIOS) {
    const spans = [];
    // A tool step is named by its call id: one row per call position instead.
    const onSpan = (sp) => spans.push({ ...sp, phase: sp.phase.replace(/^step:tool:.*_(\d+)$/, "step:tool[$1]") });
    subscribe("kova:phase", onSpan);
    const runs = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await k.run[scenario](0);
      runs.push({ t0, t1: performance.now(), spans: [] });
    }
    unsubscribe("kova:phase", onSpan);
    for (const sp of spans) runs[runs.findLastIndex((r) => r.t0 <= sp.start)]?.spans.push(sp);
    console.log(`\nwhere a Kova run's time goes, ${scenario} (p50 over ${RUNS} runs, ms after askAgent is called):`);
    for (const line of phaseTable(runs)) console.log(`  ${line}`);
  }
}
for (const f of failures) console.log(`MISMATCH ${f}`);
for (const s of systems) await s.close();
mock.send("close");
process.exitCode = failures.length > 0 ? 1 : 0;
