import { headers as natsHeaders } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { askAgent, defineAgent, type AgentInfo } from "../../src/agents/index.js";
import { createEnvelope, encodeEnvelope } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { natsAgentDirectory } from "../../src/swarm/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { startAgentNode } from "../fixtures/agents/node-rig.js";
import { supportTemplateToml } from "../fixtures/agents/support-template.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";
import { controlRequest, nodeSubject } from "../../src/cluster/control.js";

const nats = fileServer();

/** What the model saw of the conversation: the user and assistant texts, in order. */
const said = (req: ScriptedRequest) => req.messages.filter((m) => m.role === "user" || m.role === "assistant").map((m) => String(m.content));

/** Answers with the instance's id and the user messages it has seen, so memory shows in the output. */
function echoModel(tokens: (agent: string) => number = () => 10) {
  return (req: ScriptedRequest) => {
    const agent = req.headers["x-kova-agent"] ?? "?";
    const users = req.messages.filter((m) => m.role === "user").map((m) => String(m.content));
    return scriptedReply.text(`${agent} heard: ${users.join(" | ")}`, { usage: { inputTokens: tokens(agent), outputTokens: 1 } });
  };
}

describe("agent templates (KovaNode in process, real NATS, scripted model over HTTP)", () => {
  it("templates - two instances of one template keep separate conversations, usage and tokens_per_minute buckets; the template itself is no agent; a plain NATS task_delegate reaches a never-seen instance", async () => {
    // alice's first call costs 5 s of refill more than a minute's tokens: her next call, made
    // right after, waits; bob's do not.
    await using model = await startScriptedModelServer({ handler: echoModel((agent) => (agent === "support--alice" ? 65_000 : 10)) });
    await using rig = await startAgentNode(nats.url, uniqueCluster("atpl"), {
      toml: supportTemplateToml(model.url, [
        `idle_after = "10m"`,
        `budget = { tokens_per_minute = 60000 }`,
        `capabilities = ["help"]`,
        `memory = { policy = "fifo", max_tokens = 8000 }`,
        `[[agents]]`,
        `id = "helper"`,
        `model = "main"`,
        `capabilities = ["help"]`,
      ]),
      ready: ["helper"],
    });
    const ask = (id: string, input: string) => askAgent(rig.client, id, input, { sessionId: "s1", timeoutMs: 30_000 });

    expect(await ask("support--alice", "I am Alice")).toMatchObject({ status: "completed", output: "support--alice heard: I am Alice", sessionId: "s1" });
    const alice2 = await ask("support--alice", "Who am I?");
    expect(alice2.output).toBe("support--alice heard: I am Alice | Who am I?");
    expect(said(model.requests.at(-1)!)).toEqual(["I am Alice", "support--alice heard: I am Alice", "Who am I?"]);
    expect(model.requests.at(-1)!.messages[0]).toMatchObject({ role: "system", content: "You help." });
    expect(await ask("support--bob", "I am Bob")).toMatchObject({ status: "completed", output: "support--bob heard: I am Bob" });
    // The same session id, two instances: two conversations.
    const bob2 = await ask("support--bob", "Who am I?");
    expect(bob2.output).toBe("support--bob heard: I am Bob | Who am I?");

    // Budget buckets per instance: only alice waited for hers.
    const waits = rig.events.filter((e) => e.type === "budget_wait");
    expect(waits.map((e) => (e.data as { agentId: string }).agentId)).toEqual(["support--alice"]);
    expect(waits[0]!.runId).toBe(alice2.runId);

    // Usage and state per instance (each its own actor and checkpoint).
    const info = (id: string) => rig.client.request<AgentInfo>(id, "info_request", null);
    expect(await info("support--alice")).toMatchObject({
      agentId: "support--alice",
      model: "main",
      capabilities: ["help"],
      state: "Idle",
      usage: { runs: 2, inputTokens: 130_000 },
    });
    expect(await info("support--bob")).toMatchObject({ agentId: "support--bob", usage: { runs: 2, inputTokens: 20 } });
    expect(
      rig.node
        .agents()
        .filter((a) => a.template === "support")
        .map((a) => a.id)
        .sort(),
    ).toEqual(["support--alice", "support--bob"]);
    // besides every node's experiment templates (docs/evals.md)
    expect(rig.node.status().virtual.templates).toEqual([
      { name: "eval", type: "eval", idleAfterMs: 120_000, hosted: 0 },
      { name: "eval-subject", type: "eval-subject", idleAfterMs: 60_000, hosted: 0 },
      { name: "support", type: "support", idleAfterMs: 600_000, hosted: 2 },
    ]);
    // The template is not an agent anyone can address.
    const none = await askAgent(rig.client, "support", "hi", { timeoutMs: 10_000 }).catch((e: unknown) => e);
    expect(isKovaError(none, "UNKNOWN_AGENT")).toBe(true);
    // A swarm's directory offers declared agents, not users' instances of the same capability.
    expect((await natsAgentDirectory(rig.client).list()).map((c) => c.agentId)).toEqual(["helper"]);

    // A plain NATS publish of task_delegate (JSON), as `nats pub kova.<c>.a2a.support--carol` would send it.
    const env = createEnvelope({
      from: "raw",
      to: "support--carol",
      type: "task_delegate",
      payload: { input: "from raw NATS", sessionId: "raw-s", runId: "raw-run" },
    });
    const h = natsHeaders();
    h.set("Content-Type", "application/json");
    rig.client.nc.publish(rig.client.subjects.a2a("support--carol"), encodeEnvelope(env, "json"), { headers: h });
    const done = await poll(() => rig.eventsOf("raw-run").find((e) => e.type === "run_completed"), {
      timeoutMs: 20_000,
      what: "the raw-NATS task's run_completed",
    });
    expect(done).toMatchObject({ sessionId: "raw-s", data: { agentId: "support--carol", output: "support--carol heard: from raw NATS" } });
    // run_stream_end is published after run_completed: wait for it, then check it is last.
    await poll(() => rig.eventsOf("raw-run").some((e) => e.type === "run_stream_end"), { timeoutMs: 10_000, what: "run_stream_end of the raw run" });
    expect(rig.eventsOf("raw-run").at(-1)?.type).toBe("run_stream_end");
  }, 90_000);

  it("templates - an idle instance is passivated and its next message re-activates it with the conversation, usage and model switch intact", async () => {
    await using model = await startScriptedModelServer({ handler: echoModel() });
    const toml = [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, `[models.alt]`, `base_url = "${model.url}"`, `model = "gpt-4.1"`].join(
      "\n",
    );
    // The template from code, as KovaNode.start({ agents }) takes it.
    const support = defineAgent({ id: "support", model: "main", system: "You help.", budget: { tokensPerMinute: 100_000 }, template: { idleAfterMs: 800 } });
    await using rig = await startAgentNode(nats.url, uniqueCluster("atplp"), { toml, agents: [support] });
    const id = "support--dave";
    expect(await askAgent(rig.client, id, "Remember 7", { sessionId: "s", timeoutMs: 30_000 })).toMatchObject({ status: "completed" });
    await rig.client.request(id, "info_request", null); // hosted now
    // `kova signal support--dave model=alt`: an instance's model switch is its own.
    await controlRequest(rig.client.nc, nodeSubject(rig.cluster, "n1", "signal"), { actorId: id, signal: "model=alt" });

    await poll(() => rig.events.some((e) => e.type === "agent_passivated" && (e.data as { id: string }).id === id), {
      timeoutMs: 20_000,
      what: "agent_passivated",
    });
    expect(rig.node.agents().find((a) => a.id === id)).toBeUndefined();
    expect(rig.node.status().virtual.passivations).toBe(1);

    const again = await askAgent(rig.client, id, "What did I say?", { sessionId: "s", timeoutMs: 30_000 });
    expect(again).toMatchObject({ status: "completed", output: "support--dave heard: Remember 7 | What did I say?" });
    expect(said(model.requests.at(-1)!)).toEqual(["Remember 7", "support--dave heard: Remember 7", "What did I say?"]);
    expect(model.requests.at(-1)!.model).toBe("gpt-4.1"); // the switch outlived the passivation
    expect(rig.node.status().virtual.activations).toBe(2);
    const info = await rig.client.request<AgentInfo>(id, "info_request", null);
    expect(info).toMatchObject({ model: "alt", usage: { runs: 2 } });
  }, 90_000);
});
