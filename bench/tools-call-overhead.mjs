// Tool-call overhead of the tools layer: what the agent loop does per call (parse the
// model's JSON arguments, validate them against the schema with ajv, run, serialize and
// cap the result) against calling the same tool function directly with parsed arguments.
// The journal write is the agent layer's and is not in here. Kova and baseline alternate
// in short windows so that load from other processes hits both alike.
// TOOLS_BENCH_MS per window (default 300), TOOLS_BENCH_ROUNDS (default 5).
import { ArgumentRepairBudget, checkToolCall, createCalculatorTools, defineTool, runTool } from "../dist/tools/index.js";
import { createLogger } from "../dist/core/logger.js";

const MS = Number(process.env.TOOLS_BENCH_MS ?? 300);
const ROUNDS = Number(process.env.TOOLS_BENCH_ROUNDS ?? 5);

const lookup = defineTool({
  name: "lookup_order",
  description: "Looks up an order.",
  idempotent: true,
  parameters: {
    type: "object",
    properties: {
      order_id: { type: "string", pattern: "^[A-Z]{2}-\\d{6}$" },
      fields: { type: "array", items: { enum: ["status", "items", "total", "address"] }, maxItems: 4 },
      include_history: { type: "boolean", default: false },
    },
    required: ["order_id"],
    additionalProperties: false,
  },
  run: (a) => ({ id: a.order_id, status: "shipped", total: 42.5, items: [{ sku: "X-1", qty: 2 }], fields: a.fields }),
});
const [calculator] = createCalculatorTools();
// An async tool: the path where runTool also races the call against its abort signal.
const asyncLookup = defineTool({ ...lookup, name: "lookup_order_async", run: async (a) => lookup.run(a) });
const ctx = {
  agentId: "bench",
  sessionId: "s",
  runId: "r",
  callId: "c",
  idempotencyKey: "k",
  signal: new AbortController().signal,
  logger: createLogger({ level: "silent" }),
};

async function window(call) {
  let n = 0;
  const end = performance.now() + MS;
  const t0 = performance.now();
  while (performance.now() < end) {
    for (let i = 0; i < 100; i++) await call();
    n += 100;
  }
  return ((performance.now() - t0) * 1000) / n; // µs per call
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

for (const [tool, raw] of [
  [lookup, '{"order_id":"AB-123456","fields":["status","total"]}'],
  [asyncLookup, '{"order_id":"AB-123456","fields":["status","total"]}'],
  [calculator, '{"expression":"(3 + 4) * 2 ^ 3 / sqrt(16)"}'],
]) {
  const parsed = JSON.parse(raw);
  const viaKova = async () => {
    const check = checkToolCall(tool, raw, new ArgumentRepairBudget());
    if (check.status !== "valid") throw new Error("invalid");
    return runTool(tool, check.args, ctx);
  };
  const direct = async () => JSON.stringify(await tool.run(JSON.parse(raw), ctx));
  await window(viaKova);
  await window(direct);
  const ours = [];
  const base = [];
  for (let r = 0; r < ROUNDS; r++) {
    ours.push(await window(viaKova));
    base.push(await window(direct));
  }
  const k = median(ours);
  const d = median(base);
  console.log(
    `${tool.name}: through Kova ${k.toFixed(2)} µs/call, direct (JSON.parse + run + JSON.stringify) ${d.toFixed(2)} µs/call, overhead ${(k - d).toFixed(2)} µs (${(k / d).toFixed(2)}x); args ${JSON.stringify(parsed)}`,
  );
}
