import { headers as natsHeaders } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { createEnvelope, encodeEnvelope } from "../../src/bus/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { supportTemplateToml } from "../fixtures/agents/support-template.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/** Answers with the instance's id and every user message it was sent, in a few streamed pieces. */
function echo(req: ScriptedRequest) {
  const users = req.messages.filter((m) => m.role === "user").map((m) => String(m.content));
  const text = `${req.headers["x-kova-agent"]} heard: ${users.join(" | ")}`;
  // Pieces 150 ms apart: a node reads the pieces that arrive together as one delta, and on a
  // loaded machine a process can stall for tens of milliseconds, so 5 ms apart they were
  // sometimes read, and sent, as one.
  return scriptedReply.text(text, { chunks: text.split(/(?<= )/), chunkDelayMs: 150, usage: { inputTokens: 20, outputTokens: 5 } });
}

describe("agent templates from kova.toml across node processes, driven by the kova CLI", () => {
  it("e2e - kova ask support --key <k> streams the answer of that instance; instances keep their own conversations; a raw NATS task_delegate reaches a new one; after passivation and the SIGKILL of its node, an instance still has its conversation", async () => {
    await using model = await startScriptedModelServer({ handler: echo });
    await using tc = await TestCluster.create({
      nodes: ["n1", "n2"],
      extraToml: supportTemplateToml(model.url, [`idle_after = "1500ms"`, `capabilities = ["support"]`]),
      // Not the harness's 2 s: at load 20+ a node stalled past 2 s is taken for dead mid-answer,
      // and the peer's answer then follows the tokens the stalled node had already streamed.
      staleAfterMs: 6_000,
      logLevel: "warn",
    });

    const a1 = await tc.cli(["ask", "support", "--key", "user-42", "I", "am", "42", "--session", "s"]);
    expect(a1.code, a1.stderr).toBe(0);
    // On failure, say which node did what: a takeover during the ask makes the run's model call again.
    const why = () =>
      JSON.stringify({
        modelCalls: model.requests.map((r) => ({ run: r.headers["x-kova-run"], cut: r.clientClosed })),
        events: tc.events
          .filter((e) => e.type !== "model_delta")
          .map((e) => [e.type, (e.data as { node?: string; reason?: string } | undefined)?.node, (e.data as { reason?: string } | undefined)?.reason]),
      });
    expect(a1.stdout, why()).toBe("support--user-42 heard: I am 42\n");
    expect(a1.stderr).toMatch(/\[completed · run [\w-]+ · session s · 20 in \/ 5 out\]/);
    // Streamed: the answer went out as several model_delta events.
    const run1 = tc.events.find((e) => e.type === "run_completed" && (e.data as { agentId?: string }).agentId === "support--user-42")!.runId;
    expect(tc.events.filter((e) => e.runId === run1 && e.type === "model_delta").length).toBeGreaterThan(1);

    const b1 = await tc.cli(["ask", "support", "--key", "user-7", "I", "am", "7", "--session", "s"]);
    expect(b1.stdout).toBe("support--user-7 heard: I am 7\n");
    const a2 = await tc.cli(["ask", "support", "--key", "user-42", "who", "am", "I?", "--session", "s", "--chat"]);
    expect(a2.stdout).toBe("support--user-42 heard: I am 42 | who am I?\n");
    const lastTurnAt = performance.now();
    const records = await tc.agents();
    expect(records.get("support--user-42")).toMatchObject({ template: "support", type: "support", capabilities: ["support"] });
    expect(records.has("support")).toBe(false);

    // Any NATS client: a JSON task_delegate published on the instance's inbox.
    const h = natsHeaders();
    h.set("Content-Type", "application/json");
    const env = createEnvelope({
      from: "raw",
      to: "support--raw",
      type: "task_delegate",
      payload: { input: "raw hello", sessionId: "raw-s", runId: "raw-run" },
    });
    tc.nc.publish(`kova.${tc.cluster}.a2a.support--raw`, encodeEnvelope(env, "json"), { headers: h });
    const raw = await poll(() => tc.events.find((e) => e.runId === "raw-run" && e.type === "run_completed"), {
      timeoutMs: 20_000,
      what: "the raw task's run_completed",
    });
    expect(raw.data).toMatchObject({ agentId: "support--raw", output: "support--raw heard: raw hello" });

    // Idle for idle_after: passivated by its host. Then its host dies; the conversation is on NATS.
    // (An earlier passivation between the asks is possible on a slow machine: take the one after the last.)
    const passivated = await poll(
      () => tc.events.find((e) => e.type === "agent_passivated" && e.at > lastTurnAt && (e.data as { id: string }).id === "support--user-42"),
      {
        timeoutMs: 20_000,
        what: "support--user-42 passivated",
      },
    );
    const host = (passivated.data as { node: string }).node;
    tc.kill(host);
    const a3 = await tc.cli(["ask", "support", "--key", "user-42", "still", "there?", "--session", "s", "--chat"]);
    expect(a3.code, a3.stderr).toBe(0);
    expect(a3.stdout).toBe("support--user-42 heard: I am 42 | who am I? | still there?\n");
    const survivor = host === "n1" ? "n2" : "n1";
    expect((await tc.agents()).get("support--user-42")?.node).toBe(survivor);
    expect(await tc.dlqCount()).toBe(0);
  }, 120_000);
});
