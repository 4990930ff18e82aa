import { describe, expect, it } from "vitest";
import type { TaskDelegatePayload } from "../../src/agents/run-protocol.js";
import type { KovaEvent } from "../../src/bus/index.js";
import { RunTree } from "../../src/cli/run-tree.js";
import { runSwarm } from "../../src/swarm/index.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { startAgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { recordPublished } from "../fixtures/bus/published.js";
import { poll } from "../fixtures/poll.js";
import { isPlanRequest, isSynthesisRequest, swarmModel } from "../fixtures/swarm/helpers.js";

const nats = fileServer();

/**
 * One run tree three runs deep, across two nodes (KovaNodes in this process, real NATS, the
 * scripted model over HTTP): a swarm delegates to an LLM agent, which calls another agent
 * as a tool, hosted by the other node.
 */
/** The scripted model of the tree: the researcher asks the critic (agent:critic) once, then answers. */
function treeModel() {
  const swarm = swarmModel({ plan: [] });
  return startScriptedModelServer({
    handler: (req) => {
      const agent = req.headers["x-kova-agent"];
      if (agent === "critic") return scriptedReply.text("critic: sound", { usage: { inputTokens: 11, outputTokens: 2 } });
      if (agent === "researcher") {
        const result = req.messages.find((m) => m.role === "tool");
        if (!result)
          return scriptedReply.toolCalls([{ id: "call-crit", name: "agent_critic", arguments: { task: "check the findings" } }], {
            usage: { inputTokens: 20, outputTokens: 4 },
          });
        const { output } = JSON.parse(String(result.content)) as { output: string };
        return scriptedReply.text(`findings, checked (${output})`, { usage: { inputTokens: 30, outputTokens: 5 } });
      }
      return swarm(req);
    },
  });
}

/** n1: the coordinator and the researcher (which names agent:critic, defined on n2 only); n2: the critic. */
function treeTomls(modelUrl: string): { n1Toml: string; n2Toml: string } {
  const models = [`[models.main]`, `base_url = "${modelUrl}"`, `model = "gpt-4o-mini"`];
  const researcher = [`[[agents]]`, `id = "researcher"`, `model = "main"`, `capabilities = ["research"]`, `tools = ["agent:critic"]`];
  return {
    n1Toml: [...models, `[[swarms]]`, `id = "planner"`, `model = "main"`, ...researcher].join("\n"),
    n2Toml: [...models, `[[agents]]`, `id = "critic"`, `model = "main"`].join("\n"),
  };
}

describe("swarm run tree", () => {
  it("run tree - swarm → subtask agent → agent-as-tool on another node: every run in the session, parentRunId links at each depth, one tree", async () => {
    await using model = await treeModel();
    const cluster = uniqueCluster("tree");
    const { n1Toml, n2Toml } = treeTomls(model.url);
    await using n1 = await startAgentNode(nats.url, cluster, { nodeId: "n1", toml: n1Toml, ready: ["planner", "researcher"] });
    await using n2 = await startAgentNode(nats.url, cluster, { nodeId: "n2", toml: n2Toml, ready: ["critic"] });
    // Placement puts an agent only on a node that defines it.
    expect(n1.node.agents().map((a) => a.id)).not.toContain("critic");
    expect(n2.node.agents().map((a) => a.id)).toEqual(["critic"]);

    const result = await runSwarm(n1.client, "planner", "Study nats", {
      sessionId: "s-tree",
      constraints: { deadline: "60s" },
      plan: [{ task: "research nats", capability: "research" }],
    });
    expect(result).toMatchObject({ status: "completed", output: "ANSWER from 1 results", missing: [] });
    const synthesis = model.requests.at(-1)!;
    expect(String(synthesis.messages.at(-1)?.content)).toContain("findings, checked (critic: sound)");

    // Every run of the tree, in the swarm's session, once each has ended.
    const events = await poll(
      () => {
        const s = n1.events.filter((e) => e.sessionId === "s-tree");
        return s.filter((e) => e.type === "run_stream_end").length === 3 ? s : undefined;
      },
      { timeoutMs: 15_000, what: "three runs of session s-tree to end" },
    );
    const started = (agentId: string) => events.find((e) => e.type === "run_started" && (e.data as { agentId?: string }).agentId === agentId)!;
    const root = started("planner");
    const child = started("researcher");
    const grandchild = started("critic");
    expect(root.runId).toBe(result.runId);
    expect(root.parentRunId).toBeUndefined();
    expect(child.parentRunId).toBe(root.runId);
    expect(grandchild.parentRunId).toBe(child.runId);
    // Each parent links its child: the swarm by subtask, the researcher by its tool call.
    const links = events.filter((e) => e.type === "child_run_linked");
    expect(links.map((e) => [e.runId, (e.data as { childRunId: string }).childRunId])).toEqual([
      [root.runId, child.runId],
      [child.runId, grandchild.runId],
    ]);
    expect(links[1]!.data).toMatchObject({ callId: "call-crit", agentId: "critic" });
    // Every event of a child run names its parent; none leaves the session.
    for (const e of events.filter((x) => x.runId === child.runId || x.runId === grandchild.runId)) {
      expect(e.parentRunId, `${e.type} of ${e.runId}`).toBe(e.runId === child.runId ? root.runId : child.runId);
    }

    const tree = new RunTree();
    for (const e of events) tree.apply(e);
    const lines = tree.render();
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(new RegExp(`^planner {2}${root.runId} {2}completed`));
    expect(lines[1]).toMatch(new RegExp(`^└─ subtask-0 → researcher {2}${child.runId} {2}completed .*tokens 61/11`));
    expect(lines[2]).toMatch(new RegExp(`^ {3}└─ call-crit → critic {2}${grandchild.runId} {2}completed .*tokens 11/2`));
  }, 60_000);

  it("run tree - a priced model: the coordinator's plan and answer carry costUsd, run_completed totals them with its child's, the CLI tree shows it", async () => {
    // Round token counts at $1,000 / $4,000 per million: every call's cost is exact in cents.
    const usage = {
      plan: { inputTokens: 100, outputTokens: 10 },
      synthesize: { inputTokens: 200, outputTokens: 20 },
      research: { inputTokens: 30, outputTokens: 5 },
    };
    await using model = await startScriptedModelServer({
      handler: (req) => {
        if (isPlanRequest(req))
          return scriptedReply.toolCalls([{ name: "submit_plan", arguments: { subtasks: [{ task: "research nats", capability: "research" }] } }], {
            usage: usage.plan,
          });
        if (isSynthesisRequest(req)) return scriptedReply.text("ANSWER", { usage: usage.synthesize });
        return scriptedReply.text("findings", { usage: usage.research });
      },
    });
    const toml = [
      `[models.main]`,
      `base_url = "${model.url}"`,
      `model = "gpt-4o-mini"`,
      `price = { input_per_mtok = 1000, output_per_mtok = 4000 }`,
      `[[swarms]]`,
      `id = "planner"`,
      `model = "main"`,
      `[[agents]]`,
      `id = "researcher"`,
      `model = "main"`,
      `capabilities = ["research"]`,
    ].join("\n");
    await using n1 = await startAgentNode(nats.url, uniqueCluster("priced"), { toml, ready: ["planner", "researcher"] });
    // No static plan: the coordinator's model plans, then answers.
    const result = await runSwarm(n1.client, "planner", "Study nats", { sessionId: "s-priced", constraints: { deadline: "60s" } });
    expect(result).toMatchObject({ status: "completed", output: "ANSWER" });

    const events = await poll(
      () => {
        const s = n1.events.filter((e) => e.sessionId === "s-priced");
        return s.filter((e) => e.type === "run_stream_end").length === 2 ? s : undefined;
      },
      { timeoutMs: 15_000, what: "both runs of session s-priced to end" },
    );
    type Data = { usage: { inputTokens: number; outputTokens: number; costUsd?: number }; costUsd?: number; purpose?: string; ownUsage?: { costUsd?: number } };
    const data = (e: KovaEvent) => e.data as Data;
    const own = events.filter((e) => e.runId === result.runId && e.type === "model_response").map(data);
    // $1,000 per million in, $4,000 out: plan 0.1 + 0.04, answer 0.2 + 0.08, the researcher 0.03 + 0.02.
    expect(own.map((d) => [d.purpose, d.usage, d.costUsd])).toEqual([
      ["plan", usage.plan, 0.14],
      ["synthesize", usage.synthesize, 0.28],
    ]);
    const child = events.find((e) => e.runId !== result.runId && e.type === "model_response")!;
    expect(data(child).costUsd).toBe(0.05);
    // The swarm's run_completed (and its reply): the sum of every model call's costUsd in its tree.
    const completed = data(events.find((e) => e.runId === result.runId && e.type === "run_completed")!);
    const sum = (ds: Data[]) => ds.reduce((t, d) => t + (d.costUsd ?? 0), 0);
    expect(completed.usage.costUsd).toBeCloseTo(sum([...own, data(child)]), 9);
    expect(completed.usage.costUsd).toBeCloseTo(0.47, 9);
    expect(completed.ownUsage?.costUsd).toBeCloseTo(sum(own), 9);
    expect(result.usage).toEqual(completed.usage);
    expect(result.usage).toMatchObject({ inputTokens: 330, outputTokens: 35 });

    // kova events tail --tree: the swarm's line totals its own calls and its child's.
    const tree = new RunTree();
    for (const e of events) tree.apply(e);
    const lines = tree.render();
    expect(lines[0]).toMatch(new RegExp(`^planner {2}${result.runId} {2}completed .*tokens 330/35 {2}\\$0\\.4700$`));
    expect(lines[1]).toMatch(/^└─ subtask-0 → researcher .*tokens 30\/5 {2}\$0\.0500$/);
  }, 60_000);

  it("run tree - the end user and priority of a swarm reach every run of its tree (subtask, and the agent the subtask calls as a tool)", async () => {
    await using model = await treeModel();
    const cluster = uniqueCluster("inherit");
    const { n1Toml, n2Toml } = treeTomls(model.url);
    await using n1 = await startAgentNode(nats.url, cluster, { nodeId: "n1", toml: n1Toml, ready: ["planner", "researcher"] });
    await using n2 = await startAgentNode(nats.url, cluster, { nodeId: "n2", toml: n2Toml, ready: ["critic"] });
    // What each child was asked, as published.
    using published = await recordPublished(n2.client, ["researcher", "critic"]);
    const result = await runSwarm(n1.client, "planner", "Study nats", {
      sessionId: "s-inherit",
      constraints: { deadline: "60s", user: "alice", priority: 7 },
      plan: [{ task: "research nats", capability: "research" }],
    });
    expect(result).toMatchObject({ status: "completed", output: "ANSWER from 1 results" });
    const asked = (id: string) => (published.to(id)[0]?.payload as TaskDelegatePayload | undefined)?.constraints;
    await poll(() => asked("researcher") !== undefined && asked("critic") !== undefined, { timeoutMs: 5000, what: "both child delegations seen" });
    expect(asked("researcher")).toMatchObject({ user: "alice", priority: 7 });
    expect(asked("critic")).toMatchObject({ user: "alice", priority: 7 });
    // The swarm's own budget group (its session, by default) goes down the tree as before.
    expect(asked("critic")?.budget_group).toBe(asked("researcher")?.budget_group);
  }, 60_000);
});
