import { describe, expect, it } from "vitest";
import type { Bus } from "../../src/bus/index.js";
import { createOpenAiModel } from "../../src/agents/model/index.js";
import { agentTool } from "../../src/agents/agent-tool.js";
import { defineCoordinator, runSwarm } from "../../src/swarm/index.js";
import { startScriptedModelServer } from "../../src/testing/index.js";
import { fileServer, startRig, uniqueCluster } from "../fixtures/actors/helpers.js";
import { startAgentRig } from "../fixtures/agents/rig.js";
import { declareAgents, isPlanRequest, swarmModel } from "../fixtures/swarm/helpers.js";
import { toolContext } from "../fixtures/tool-call.js";

const server = fileServer();

/**
 * The swarm and agents-as-tools against the agents layer's own agent actor (not the test
 * contract agents): what the coordinator sends and reads is the agent protocol and nothing else.
 */
describe("swarm with LLM agents", () => {
  it("swarm - delegates to agents of the agents layer and synthesizes from their answers", async () => {
    await using model = await startScriptedModelServer({
      handler: swarmModel({
        plan: [
          { task: "find facts on A", capability: "research" },
          { task: "find facts on B", capability: "research" },
          { task: "write it", capability: "write" },
        ],
      }),
    });
    const cluster = uniqueCluster("swa");
    await using agents = await startAgentRig(server.url, cluster, {
      modelUrl: model.url,
      agents: [
        { id: "researcher", model: "main", system: "You research.", capabilities: ["research"] },
        { id: "writer", model: "main", system: "You write.", capabilities: ["write"] },
      ],
    });
    let bus: Bus | undefined;
    const coordinator = defineCoordinator({
      model: () => createOpenAiModel({ name: "planner", baseUrl: model.url, model: "scripted-model", apiKey: "k" }),
      bus: () => bus!,
    });
    await using rig = await startRig(server.url, cluster, [coordinator], { nodeId: "n2" });
    bus = rig.bus;
    await declareAgents(rig.bus, [
      { id: "researcher", type: "researcher", capabilities: ["research"] },
      { id: "writer", type: "writer", capabilities: ["write"] },
      // The coordinator too, as a node would: runSwarm looks it up before sending.
      { id: "planner", type: "coordinator", capabilities: [], node: "n2" },
    ]);
    await rig.host.start("planner", "coordinator");

    const result = await runSwarm(rig.bus, "planner", "A versus B", { sessionId: "s-real" });
    expect(result.status).toBe("completed");
    expect(result.missing).toEqual([]);
    expect(result.output).toBe("ANSWER from 3 results");
    // The agents' model calls ("ok" answers) and the coordinator's two.
    expect(model.requests.filter(isPlanRequest)).toHaveLength(1);
    const synthesis = model.requests.at(-1)!;
    expect(String(synthesis.messages.at(-1)?.content)).toContain("### Subtask 3 (agent writer): write it\nok");
    // The agents ran the children under the ids the coordinator chose, in the swarm's session.
    const children = agents.events.filter((e) => e.type === "run_completed" && e.parentRunId === result.runId);
    expect(children).toHaveLength(3);
    expect(children.every((e) => e.sessionId === "s-real")).toBe(true);
  });

  it("agent tool - a real agent answers as a tool: output, child run linked, usage", async () => {
    await using model = await startScriptedModelServer({ handler: swarmModel({ plan: [] }) });
    await using agents = await startAgentRig(server.url, uniqueCluster("swt"), {
      modelUrl: model.url,
      agents: [{ id: "critic", model: "main", system: "You critique." }],
    });
    const tool = agentTool(agents.client, "critic");
    const result = await tool.run({ task: "critique this" }, toolContext({ sessionId: "s-tool", runId: "parent", idempotencyKey: "parent.e.0" }));
    expect(result.output).toBe("ok");
    expect(result.usage.inputTokens).toBeGreaterThan(0);
    const child = agents.events.find((e) => e.type === "run_started" && e.runId === result.childRunId);
    expect(child?.parentRunId).toBe("parent");
  });
});
