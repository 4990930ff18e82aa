// Tool-call overhead through the agent loop: what one more tool call costs a run, end to
// end: argument validation, the journaled step (WAL append, cross-node journal append on
// NATS), the tool_call / tool_result events (stored: JetStream acks), running the tool,
// and its result back to the model in the next request. Measured as the difference between
// a run whose first model response asks for K calls and one that asks for 1 (both make two
// model calls against the scripted server with zero latency), divided by K - 1; against
// calling the tool function directly. Sequential calls (parallel_tool_calls = false) and
// concurrent ones (the default). Runs alternate, so load from other processes hits both.
// TOOLS_JOURNAL_K (default 20), TOOLS_JOURNAL_RUNS per window (10), TOOLS_JOURNAL_ROUNDS (5),
// TOOLS_JOURNAL_WAL (full | normal, default full).
import { askAgent } from "../dist/agents/index.js";
import { createCalculatorTools } from "../dist/tools/index.js";
import { scriptedReply } from "../dist/testing/index.js";
import { machine } from "./actors-lib.mjs";
import { median, startAgentBench } from "./agents-lib.mjs";

const K = Number(process.env.TOOLS_JOURNAL_K ?? 20);
const RUNS = Number(process.env.TOOLS_JOURNAL_RUNS ?? 10);
const ROUNDS = Number(process.env.TOOLS_JOURNAL_ROUNDS ?? 5);
const walSync = process.env.TOOLS_JOURNAL_WAL ?? "full";

// The user message says how many calls the first response asks for.
const handler = (req) => {
  if (req.messages.some((m) => m.role === "tool")) return scriptedReply.text("done", { usage: { inputTokens: 40, outputTokens: 2 } });
  const k = Number(/calls=(\d+)/.exec(String(req.messages.at(-1)?.content))?.[1] ?? 1);
  return scriptedReply.toolCalls(
    Array.from({ length: k }, (_, i) => ({ id: `c${i}`, name: "calculator", arguments: { expression: `${i}*7` } })),
    { usage: { inputTokens: 20, outputTokens: 5 * k } },
  );
};
const run = { maxToolCalls: 10_000 };
const b = await startAgentBench({
  walSync,
  scripted: { handler },
  agents: [
    { id: "seq", model: "main", tools: ["calculator"], run: { ...run, parallelToolCalls: false } },
    { id: "par", model: "main", tools: ["calculator"], run },
  ],
});
try {
  await b.host.start("seq", "seq");
  await b.host.start("par", "par");
  const ask = async (agent, k) => {
    const t = performance.now();
    const r = await askAgent(b.client, agent, `calls=${k}`, { checkAgent: false, timeoutMs: 60_000 });
    if (r.status !== "completed") throw new Error(`run ${r.status}: ${r.error?.message}`);
    return performance.now() - t;
  };
  const window = async (agent, k) => {
    const xs = [];
    for (let i = 0; i < RUNS; i++) xs.push(await ask(agent, k));
    return median(xs);
  };
  const [calculator] = createCalculatorTools();
  const directPerCall = () => {
    const n = 20_000;
    const t = performance.now();
    for (let i = 0; i < n; i++) JSON.stringify(calculator.run(JSON.parse(`{"expression":"${i % 100}*7"}`)));
    return ((performance.now() - t) / n) * 1000;
  };
  for (const agent of ["seq", "par"]) for (const k of [1, K]) await window(agent, k); // warm-up
  const out = { seq: { one: [], many: [] }, par: { one: [], many: [] } };
  const direct = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (const agent of ["seq", "par"]) {
      out[agent].one.push(await window(agent, 1));
      out[agent].many.push(await window(agent, K));
    }
    direct.push(directPerCall());
  }
  console.log(
    `tool-call overhead through the agent loop (${machine()}, WAL sync ${walSync}, journal on NATS, K=${K}, ${RUNS} runs x ${ROUNDS} rounds, medians)`,
  );
  console.log(`  the tool called directly (parse + run + stringify): ${median(direct).toFixed(1)} µs per call`);
  for (const [agent, label] of [
    ["seq", "sequential"],
    ["par", "concurrent"],
  ]) {
    const one = median(out[agent].one);
    const many = median(out[agent].many);
    const per = (many - one) / (K - 1);
    console.log(
      `  ${label.padEnd(10)}: run with 1 call ${one.toFixed(1)} ms, with ${K} calls ${many.toFixed(1)} ms -> ${(per * 1000).toFixed(0)} µs per extra call`,
    );
  }
} finally {
  await b.close();
}
