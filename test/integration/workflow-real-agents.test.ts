import { describe, expect, it } from "vitest";
import { KovaClient, type KovaEvent } from "../../src/bus/index.js";
import { readRun, startRun } from "../../src/cli/workflow-commands.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { startAgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";
import { swarmModel } from "../fixtures/swarm/helpers.js";
import type { RunSummary } from "../../src/workflow/index.js";

const nats = fileServer();

/** The run's summary once it ended (its run_stream_end seen, then its last turn committed). */
async function finished(client: KovaClient, events: KovaEvent[], runId: string): Promise<RunSummary> {
  await poll(() => events.some((e) => e.runId === runId && e.type === "run_stream_end"), {
    timeoutMs: 30_000,
    what: () =>
      `run ${runId} to end; its events: ${events
        .filter((e) => e.runId === runId)
        .map((e) => e.type)
        .join(", ")}`,
  });
  return poll(
    async () => {
      const r = await readRun(client, runId);
      return r.status !== "running" && r.status !== "new" ? r : undefined;
    },
    { timeoutMs: 10_000, retryErrors: true, what: `the end of run ${runId} committed` },
  );
}

/** `[models.main]` and one `[[agents]]` entry: each node of the test defines only its own agent, so placement puts it there. */
function agentToml(modelUrl: string, agentId: string): string {
  return [`[models.main]`, `base_url = "${modelUrl}"`, `model = "gpt-4o-mini"`, `[[agents]]`, `id = "${agentId}"`, `model = "main"`].join("\n");
}

/**
 * Workflows over the agents layer's own agent actor (the LLM loop, not the test contract
 * agents): what a step's `metadata` template reads comes from a real agent's result.
 */
describe("workflow with LLM agents", () => {
  it("workflow - {{steps.<id>.metadata}} of a real agent's step gives its node, usage and duration", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) => {
        if (req.headers["x-kova-agent"] === "researcher") return scriptedReply.text("facts", { usage: { inputTokens: 42, outputTokens: 5 }, latencyMs: 30 });
        return scriptedReply.text(`wrote: ${String(req.messages.at(-1)?.content)}`, { usage: { inputTokens: 7, outputTokens: 3 } });
      },
    });
    const cluster = uniqueCluster("wfa");
    // The researcher on n1, the writer on n2: each node defines one of them.
    await using n1 = await startAgentNode(nats.url, cluster, { nodeId: "n1", toml: agentToml(model.url, "researcher"), ready: ["researcher"] });
    await using n2 = await startAgentNode(nats.url, cluster, { nodeId: "n2", toml: agentToml(model.url, "writer"), ready: ["writer"] });
    await using client = await KovaClient.connect({ servers: nats.url, cluster });
    const raw = {
      workflow: { id: "meta" },
      steps: [
        { id: "a", agent: "researcher", task: "research nats" },
        {
          id: "b",
          agent: "writer",
          task: "a ran on {{steps.a.metadata.node}}, {{steps.a.metadata.usage.inputTokens}}+{{steps.a.metadata.usage.outputTokens}} tokens, {{steps.a.metadata.durationMs}} ms",
        },
        { id: "c", agent: "researcher", task: "b ran on {{steps.b.metadata.node}} as {{steps.b.metadata.agent}}" },
      ],
    };
    const { runId } = await startRun(client, { raw, input: {} });
    const run = await finished(client, n1.events, runId);
    expect(run.error).toBeUndefined();
    expect(run.status).toBe("completed");

    // What the writer's model was asked: the template rendered from the researcher's result.
    const writerTask = String(model.requests.find((r) => r.headers["x-kova-agent"] === "writer")?.messages.at(-1)?.content);
    expect(writerTask).toMatch(/^a ran on n1, 42\+5 tokens, \d+ ms$/);
    const durationMs = Number(/, (\d+) ms$/.exec(writerTask)![1]);
    // The step's duration covers the model's 30 ms latency.
    expect(durationMs).toBeGreaterThanOrEqual(30);
    const researcherTasks = model.requests.filter((r) => r.headers["x-kova-agent"] === "researcher").map((r) => String(r.messages.at(-1)?.content));
    expect(researcherTasks).toEqual(["research nats", "b ran on n2 as writer"]);
    expect(n2.node.agents().map((a) => a.id)).toContain("writer");
    expect(run.output).toBe("facts");
  }, 60_000);

  it("workflow - a step delegated to a swarm coordinator gets its node in metadata too", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [{ task: "look it up", capability: "research" }] }) });
    const cluster = uniqueCluster("wfs");
    const toml = [agentToml(model.url, "researcher"), `capabilities = ["research"]`, `[[swarms]]`, `id = "planner"`, `model = "main"`].join("\n");
    await using n1 = await startAgentNode(nats.url, cluster, { nodeId: "n1", toml, ready: ["researcher", "planner"] });
    await using client = await KovaClient.connect({ servers: nats.url, cluster });
    const raw = {
      workflow: { id: "swarm-meta" },
      steps: [
        { id: "s", agent: "planner", task: "find out" },
        { id: "w", agent: "researcher", task: "the swarm said {{steps.s.output}} on {{steps.s.metadata.node}}" },
      ],
    };
    const { runId } = await startRun(client, { raw, input: {} });
    const run = await finished(client, n1.events, runId);
    expect(run.error).toBeUndefined();
    const last = model.requests.filter((r) => r.headers["x-kova-agent"] === "researcher").at(-1);
    expect(String(last?.messages.at(-1)?.content)).toBe("the swarm said ANSWER from 1 results on n1");
  }, 60_000);
});
