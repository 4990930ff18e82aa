import { describe, expect, it } from "vitest";
import { askAgent } from "../../src/agents/index.js";
import { runSwarm } from "../../src/swarm/index.js";
import { startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { startAgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { isPlanRequest, swarmModel } from "../fixtures/swarm/helpers.js";

const nats = fileServer();

describe("agent services of a node (KovaNode in process, real NATS, scripted model over HTTP)", () => {
  it("scheduler - one model's max_concurrency holds across the node's agents and its swarm coordinator", async () => {
    let maxOthers = 0;
    let arrivals = 0;
    const answer = swarmModel({ plan: [{ task: "half one", capability: "math" }, { task: "half two", capability: "math" }], latencyMs: 500 });
    await using model = await startScriptedModelServer({
      handler: (req: ScriptedRequest) => {
        arrivals++;
        // Requests the server is still answering when this one arrives.
        const others = model.requests.filter((r) => r.index !== req.index && r.endedAt === undefined).length;
        maxOthers = Math.max(maxOthers, others);
        return answer(req);
      },
    });
    const toml = [
      `[models.main]`,
      `base_url = "${model.url}"`,
      `model = "gpt-4o-mini"`,
      `max_concurrency = 1`,
      ...["a", "b"].flatMap((id) => [`[[agents]]`, `id = "${id}"`, `model = "main"`, `capabilities = ["math"]`]),
      `[[swarms]]`,
      `id = "planner"`,
      `model = "main"`,
    ].join("\n");
    await using rig = await startAgentNode(nats.url, uniqueCluster("sch"), { toml, ready: ["a", "b", "planner"] });
    const [ra, rb, swarm] = await Promise.all([
      askAgent(rig.client, "a", "one", { timeoutMs: 30_000 }),
      askAgent(rig.client, "b", "two", { timeoutMs: 30_000 }),
      runSwarm(rig.client, "planner", "split it", { constraints: { deadline: "30s" } }),
    ]);
    expect([ra.status, rb.status]).toEqual(["completed", "completed"]);
    expect(swarm).toMatchObject({ status: "completed", subtasks: 2, output: "ANSWER from 2 results" });
    // Two asks, a plan, two subtasks, the synthesis: six calls of one model, never two at once.
    expect(arrivals).toBe(6);
    expect(model.requests.filter(isPlanRequest)).toHaveLength(1);
    expect(maxOthers).toBe(0);
  }, 60_000);
});
