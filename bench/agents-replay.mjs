// Replay after SIGKILL: one node process hosts N agents, each in the middle of a 3-call
// tool loop (two model responses and both tool results recorded, the 3rd model call in
// flight) when the node is killed with SIGKILL and started again. Measures the time from
// the kill to the node answering again, to every run running again (its next model
// request reached the provider), and to every answer. Also checks that no recorded model
// call was made twice. AGENTS_BENCH_RUNS_N (default 200).
import { askAgent } from "../dist/agents/index.js";
import { scriptedReply, startScriptedModelServer } from "../dist/testing/index.js";
import { fmt, machine, startCluster, waitFor } from "./actors-lib.mjs";

const N = Number(process.env.AGENTS_BENCH_RUNS_N ?? 200);
let phase = "before";
const model = await startScriptedModelServer({
  handler: (req) => {
    const results = req.messages.filter((m) => m.role === "tool").length;
    if (results < 2) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: `${results}+1` } }]);
    // Before the kill the 3rd call hangs: the node dies with it in flight.
    return phase === "before" ? scriptedReply.text("too late", { latencyMs: 300_000 }) : scriptedReply.text("done");
  },
});
const agents = [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, `max_concurrency = ${N}`];
for (let i = 0; i < N; i++) agents.push(`[[agents]]`, `id = "r-${i}"`, `model = "main"`, `tools = ["calculator"]`);
const c = await startCluster({ nodes: ["n1"], extraToml: agents.join("\n") });
try {
  // startCluster has started n1.
  await waitFor(async () => [...(await c.agents()).values()].filter((r) => r.node === "n1" && r.state === "Idle").length === N, 120_000, "agents hosted", 250);
  const pending = Array.from({ length: N }, (_, i) => askAgent(c.bus, `r-${i}`, "add twice", { runId: `run-${i}`, timeoutMs: 600_000 }));
  await waitFor(() => model.requests.length >= 3 * N, 120_000, "every run's 3rd model call in flight", 100);
  const beforeKill = model.requests.length;
  phase = "after";
  const t0 = performance.now();
  await c.kill("n1");
  await c.startNode("n1");
  const up = performance.now() - t0;
  await waitFor(() => model.requests.length >= beforeKill + N, 120_000, "every run running again", 20);
  const running = performance.now() - t0;
  const results = await Promise.all(pending);
  const answered = performance.now() - t0;
  const completed = results.filter((r) => r.status === "completed" && r.output === "done").length;
  const after = model.requests.length - beforeKill;
  console.log(`agents replay after SIGKILL (${machine()}, WAL sync full): ${N} runs mid tool loop on one node`);
  console.log(`  kill → node answering again: ${fmt(up)} ms`);
  console.log(`  kill → every run running again (its next model request arrived): ${fmt(running)} ms`);
  console.log(`  kill → every answer: ${fmt(answered)} ms; completed ${completed}/${N}`);
  console.log(`  model requests after the restart: ${after} (exactly ${N} = no recorded call repeated)`);
} finally {
  await c.stop();
  await model.close();
}
