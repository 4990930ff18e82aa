// MCP `echo` over stdio: Kova's tool (McpManager → McpServerConnection → Tool.run, with the
// per-call time limit, abort wiring and result mapping) against the SDK `Client.callTool`
// alone, each talking to its own server-everything process. Rounds alternate so drift hits
// both. MCP_BENCH_MS per measurement (default 2000), MCP_BENCH_ROUNDS rounds (default 3).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpManager, mcpConfigFrom } from "../dist/tools/mcp/index.js";
import { alternate, drive as driveFor, fmt, median, report, silent } from "./bus-lib.mjs";

const MS = Number(process.env.MCP_BENCH_MS ?? 2000);
const ROUNDS = Number(process.env.MCP_BENCH_ROUNDS ?? 3);

const require = createRequire(import.meta.url);
const manifest = require.resolve("@modelcontextprotocol/server-everything/package.json");
const everything = join(dirname(manifest), JSON.parse(readFileSync(manifest, "utf8")).bin["mcp-server-everything"]);

/** Calls/s, p50 and p99 in µs, and client CPU µs per call (the servers are other processes: not in it). */
const drive = (workers, call) => driveFor(MS, workers, call);

const manager = new McpManager(mcpConfigFrom({ servers: [{ name: "everything", command: process.execPath, args: [everything, "stdio"] }] }), {
  logger: silent,
});
await manager.start();
const tool = manager.list().find((t) => t.name === "everything/echo");
if (!tool) throw new Error(`everything/echo not offered: ${JSON.stringify(manager.status())}`);
// A context per call, as the agent layer builds one per journaled tool step.
const context = () => ({
  agentId: "bench",
  sessionId: "s",
  runId: "r",
  callId: "c",
  idempotencyKey: "k",
  signal: new AbortController().signal,
  logger: silent,
});

const client = new Client({ name: "bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: process.execPath, args: [everything, "stdio"], stderr: "ignore" }));
await client.listTools();

const args = { message: "the quick brown fox jumps over the lazy dog" };
const kova = async () => {
  const out = await tool.run(args, context());
  if (out.text === undefined) throw new Error("no text");
};
const sdk = async () => {
  const out = await client.callTool({ name: "echo", arguments: args });
  if (out.content.length === 0) throw new Error("no content");
};

for (const c of [1, 16]) {
  await drive(c, kova); // warm-up
  await drive(c, sdk);
  const { ours, base } = await alternate(
    ROUNDS,
    () => drive(c, kova),
    () => drive(c, sdk),
  );
  const rows = ours.map((k, i) => {
    const s = base[i];
    return (
      `round ${i + 1}: kova ${fmt(k.rps)} calls/s p50 ${fmt(k.p50)} µs p99 ${fmt(k.p99)} µs cpu ${k.cpu.toFixed(0)} µs/call | ` +
      `sdk ${fmt(s.rps)} calls/s p50 ${fmt(s.p50)} µs p99 ${fmt(s.p99)} µs cpu ${s.cpu.toFixed(0)} µs/call | ratio ${(k.rps / s.rps).toFixed(2)}`
    );
  });
  const med = (runs) => Object.fromEntries(["rps", "p50", "p99", "cpu"].map((f) => [f, median(runs.map((r) => r[f]))]));
  const k = med(ours);
  const s = med(base);
  report(`MCP echo over stdio, concurrency ${c}, ${MS} ms x ${ROUNDS} rounds`, [
    ...rows,
    `median: kova ${fmt(k.rps)} calls/s p50 ${fmt(k.p50)} µs p99 ${fmt(k.p99)} µs cpu ${k.cpu.toFixed(0)} µs/call; sdk ${fmt(s.rps)} calls/s p50 ${fmt(s.p50)} µs p99 ${fmt(s.p99)} µs cpu ${s.cpu.toFixed(0)} µs/call`,
    `throughput ratio kova/sdk ${(k.rps / s.rps).toFixed(2)};  p50 ratio ${(k.p50 / s.p50).toFixed(2)};  p99 ratio ${(k.p99 / s.p99).toFixed(2)};  client CPU per call +${(k.cpu - s.cpu).toFixed(0)} µs`,
  ]);
}

await client.close();
await manager.close();
