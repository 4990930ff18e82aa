import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { askAgent, type AgentResult } from "../../src/agents/index.js";
import { NatsApprovalStore, type ApprovalRecord } from "../../src/agents/approvals.js";
import { type KovaEvent, bucketName } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { approveSubject, controlRequest, nodeSubject, type ApproveReply, type ApproveRequest } from "../../src/cluster/control.js";
import { defineTool } from "../../src/tools/define-tool.js";
import { scriptedReply, startScriptedModelServer, type ScriptedModelServer } from "../../src/testing/index.js";
import { startAgentNode, type AgentNode } from "../fixtures/agents/node-rig.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { kovaCli } from "../fixtures/kova-cli.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

/** A tool with a side effect the test can count: it must not run before (or without) approval. */
function countingTool(name: string, opts: { requiresApproval?: boolean } = {}) {
  const runs: unknown[] = [];
  const tool = defineTool<{ target: string }>({
    name,
    description: `${name}s a target`,
    idempotent: false,
    ...(opts.requiresApproval ? { requiresApproval: true } : {}),
    parameters: { type: "object", properties: { target: { type: "string" } }, required: ["target"], additionalProperties: false },
    run: (args) => {
      runs.push(args);
      return { done: args.target };
    },
  });
  return { tool, runs };
}

/** A model that calls `tool` once, then answers with what the tool result said. */
async function oneCallModel(tool: string): Promise<ScriptedModelServer> {
  return startScriptedModelServer({
    handler: (req) => {
      const result = req.messages.find((m) => m.role === "tool");
      if (!result) return scriptedReply.toolCalls([{ id: "call-1", name: tool, arguments: { target: "prod" } }]);
      return scriptedReply.text(`tool said: ${String(result.content)}`);
    },
  });
}

function agentToml(url: string, agent: string): string {
  return [`[models.main]`, `base_url = "${url}"`, `model = "gpt-4o-mini"`, `[[agents]]`, `id = "ops"`, `model = "main"`, agent].join("\n");
}

function decide(rig: AgentNode, req: ApproveRequest): Promise<ApproveReply> {
  return controlRequest<ApproveReply>(rig.client.nc, approveSubject(rig.cluster), req);
}

async function requested(
  rig: AgentNode,
  runId: string,
): Promise<KovaEvent & { data: { approvalId: string; tool: string; args: unknown; callId: string; expiresAt: number } }> {
  return poll(() => rig.eventsOf(runId).find((e) => e.type === "approval_requested") as never, { timeoutMs: 20_000, what: `approval_requested of ${runId}` });
}

describe("human approval of tool calls (KovaNode in process, real NATS KV, scripted model)", () => {
  it("approve - a call named by the agent's approval list waits in waiting_approval, holding no model request, and runs once approved over the control subject", async () => {
    const deploy = countingTool("deploy");
    await using model = await oneCallModel("deploy");
    await using rig = await startAgentNode(nats.url, uniqueCluster("apa"), {
      toml: agentToml(model.url, `tools = ["deploy"]\napproval = ["deploy"]`),
      tools: [deploy.tool],
      ready: ["ops"],
    });
    const pending: Promise<AgentResult> = askAgent(rig.client, "ops", "ship it", { runId: "run-a", timeoutMs: 30_000 });
    const asked = await requested(rig, "run-a");
    expect(asked.data).toMatchObject({ tool: "deploy", args: { target: "prod" }, callId: "call-1" });
    expect(asked.data.approvalId).toMatch(/^ap-[0-9a-f]{12}$/);
    expect(asked.data.expiresAt - asked.ts).toBeGreaterThan(3_500_000); // the default timeout, 1 h
    const info = await rig.client.request<{ state: string }>("ops", "info_request", null);
    expect(info.state).toBe("waiting_approval");
    // Waiting holds no model call open, and the tool has not run.
    expect(model.requests).toHaveLength(1);
    expect(model.requests[0]!.endedAt).toBeDefined();
    expect(deploy.runs).toEqual([]);
    // The record is in the bucket, pending, for any node to decide.
    const store = await NatsApprovalStore.open({ js: rig.client.js, cluster: rig.cluster });
    expect(await store.get("run-a", asked.data.approvalId)).toMatchObject({ status: "pending", agentId: "ops", tool: "deploy", sessionId: "run-a" });

    const reply = await decide(rig, { runId: "run-a", approvalId: asked.data.approvalId, approved: true, by: "ann" });
    expect(reply).toMatchObject({ status: "approved", changed: true, agentId: "ops", tool: "deploy", via: "n1" });
    const result = await pending;
    expect(result).toMatchObject({ status: "completed", runId: "run-a", output: 'tool said: {"done":"prod"}' });
    expect(deploy.runs).toEqual([{ target: "prod" }]);
    const types = rig
      .eventsOf("run-a")
      .map((e) => e.type)
      .filter((t) => t !== "model_delta" && t !== "model_request");
    expect(types.indexOf("approval_requested")).toBeLessThan(types.indexOf("approval_granted"));
    expect(types.indexOf("approval_granted")).toBeLessThan(types.indexOf("tool_call"));
    expect(rig.eventsOf("run-a").find((e) => e.type === "approval_granted")!.data).toMatchObject({
      approvalId: asked.data.approvalId,
      by: "ann",
      tool: "deploy",
    });
    // The same decision again is accepted as a repeat.
    expect(await decide(rig, { runId: "run-a", approvalId: asked.data.approvalId, approved: true })).toMatchObject({ changed: false, status: "approved" });
    expect((await rig.client.request<{ state: string }>("ops", "info_request", null)).state).toBe("Idle");
  }, 60_000);

  it("reject - a tool declaring requiresApproval is rejected with a comment: it never runs and the model reads why; a second, different decision is refused", async () => {
    const wipe = countingTool("wipe", { requiresApproval: true });
    await using model = await oneCallModel("wipe");
    await using rig = await startAgentNode(nats.url, uniqueCluster("apr"), {
      toml: agentToml(model.url, `tools = ["wipe"]`),
      tools: [wipe.tool],
      ready: ["ops"],
    });
    const pending = askAgent(rig.client, "ops", "wipe prod", { runId: "run-r", timeoutMs: 30_000 });
    const asked = await requested(rig, "run-r");
    const reply = await decide(rig, { runId: "run-r", approvalId: asked.data.approvalId, approved: false, by: "bob", comment: "not on a Friday" });
    expect(reply).toMatchObject({ status: "rejected", changed: true });
    const result = await pending;
    expect(result.status).toBe("completed");
    expect(wipe.runs).toEqual([]);
    const toolMessage = JSON.parse(String(model.requests[1]!.messages.find((m) => m.role === "tool")!.content)) as {
      error: { code: string; message: string; comment: string };
    };
    expect(toolMessage.error).toMatchObject({ code: "TOOL_CALL_REJECTED", comment: "not on a Friday" });
    expect(toolMessage.error.message).toContain("rejected by bob");
    const toolResult = rig.eventsOf("run-r").find((e) => e.type === "tool_result")!;
    expect(toolResult.data).toMatchObject({ tool: "wipe", ok: false, error: { code: "TOOL_CALL_REJECTED" } });
    expect(rig.eventsOf("run-r").some((e) => e.type === "approval_rejected")).toBe(true);
    const late = await decide(rig, { runId: "run-r", approvalId: asked.data.approvalId, approved: true }).catch((e: unknown) => e);
    expect(isKovaError(late, "APPROVAL_ALREADY_DECIDED")).toBe(true);
    const unknown = await decide(rig, { runId: "run-r", approvalId: "ap-000000000000", approved: true }).catch((e: unknown) => e);
    expect(isKovaError(unknown, "APPROVAL_NOT_FOUND")).toBe(true);
    const malformed = await controlRequest(rig.client.nc, approveSubject(rig.cluster), {
      runId: "run-r",
      approvalId: asked.data.approvalId,
      approved: "yes",
    }).catch((e: unknown) => e);
    expect(isKovaError(malformed, "INVALID_ARGUMENT")).toBe(true);
  }, 60_000);

  it("cli by call id - kova approve|reject <runId> <callId> decides the approval holding that tool call; a call id the model reused in a later response names its pending approval, then the last one", async () => {
    const deploy = countingTool("deploy");
    // Both responses call deploy under the same call id, as some local models do.
    await using model = await startScriptedModelServer({
      handler: (req) => {
        const done = req.messages.filter((m) => m.role === "tool").length;
        if (done === 2) return scriptedReply.text("both deployed");
        return scriptedReply.toolCalls([{ id: "call-1", name: "deploy", arguments: { target: done === 0 ? "staging" : "prod" } }]);
      },
    });
    const cluster = uniqueCluster("apc");
    await using rig = await startAgentNode(nats.url, cluster, {
      toml: agentToml(model.url, `tools = ["deploy"]\napproval = ["deploy"]`),
      tools: [deploy.tool],
      ready: ["ops"],
    });
    const kova = (...args: string[]) => kovaCli(nats.url, cluster, args);
    const pending = askAgent(rig.client, "ops", "ship it twice", { runId: "run-c", timeoutMs: 60_000 });
    const asks = () => rig.eventsOf("run-c").filter((e) => e.type === "approval_requested");
    const first = (await requested(rig, "run-c")).data.approvalId;
    const approved = await kova("approve", "run-c", "call-1", "--by", "ann");
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toBe(`approved ${first} (tool call call-1) of run-c (agent ops, tool deploy)\n`);
    const second = await poll(() => (asks()[1]?.data as { approvalId: string } | undefined)?.approvalId, { timeoutMs: 20_000, what: "the second approval" });
    expect(second).not.toBe(first);
    const again = await kova("approve", "run-c", "call-1");
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toBe(`approved ${second} (tool call call-1) of run-c (agent ops, tool deploy)\n`);
    expect(await pending).toMatchObject({ status: "completed", output: "both deployed" });
    expect(deploy.runs).toEqual([{ target: "staging" }, { target: "prod" }]);
    // Both decided: the call id names the one asked last.
    const repeat = await kova("approve", "run-c", "call-1");
    expect(repeat.stdout).toBe(`already approved ${second} (tool call call-1) of run-c (agent ops, tool deploy)\n`);
    const changed = await kova("reject", "run-c", "call-1");
    expect(changed.code).toBe(1);
    expect(changed.stderr).toContain(`approval ${second} of run run-c was approved`);
    expect(changed.stderr).toContain("APPROVAL_ALREADY_DECIDED");
    const none = await kova("approve", "run-c", "call-9");
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no approval call-9 of run run-c: run run-c has no approval for tool call call-9: .*\[APPROVAL_NOT_FOUND\]/);
    // The endpoint takes one of the two names, never both.
    const both = await controlRequest(rig.client.nc, approveSubject(cluster), { runId: "run-c", approvalId: second, callId: "call-1", approved: true }).catch(
      (e: unknown) => e,
    );
    expect(isKovaError(both, "INVALID_ARGUMENT")).toBe(true);
  }, 90_000);

  it("model slot - a run waiting for approval holds no slot of its model (max_concurrency = 1): another agent on that model runs to completion meanwhile, and the waiting run completes once approved", async () => {
    const deploy = countingTool("deploy");
    await using model = await startScriptedModelServer({
      handler: (req) => {
        if (req.headers["x-kova-agent"] === "writer") return scriptedReply.text("a haiku, written while ops waits");
        const result = req.messages.find((m) => m.role === "tool");
        if (!result) return scriptedReply.toolCalls([{ id: "call-1", name: "deploy", arguments: { target: "prod" } }]);
        return scriptedReply.text(`tool said: ${String(result.content)}`);
      },
    });
    const toml = [
      `[models.main]`,
      `base_url = "${model.url}"`,
      `model = "gpt-4o-mini"`,
      `max_concurrency = 1`,
      `[[agents]]`,
      `id = "ops"`,
      `model = "main"`,
      `tools = ["deploy"]`,
      `approval = ["deploy"]`,
      `[[agents]]`,
      `id = "writer"`,
      `model = "main"`,
    ].join("\n");
    await using rig = await startAgentNode(nats.url, uniqueCluster("apm"), { toml, tools: [deploy.tool], ready: ["ops", "writer"] });
    const waiting = askAgent(rig.client, "ops", "ship it", { runId: "run-m", timeoutMs: 60_000 });
    const asked = await requested(rig, "run-m");
    const lane = () => rig.node.modelScheduler.stats().find((s) => s.model === "main")!;
    expect(lane()).toMatchObject({ maxConcurrency: 1, inFlight: 0, queued: 0 });
    // The only slot of the model is free: the other agent's run goes through while ops waits.
    const other = await askAgent(rig.client, "writer", "write a haiku", { runId: "run-w2", timeoutMs: 20_000 });
    expect(other).toMatchObject({ status: "completed", output: "a haiku, written while ops waits" });
    expect((await rig.client.request<{ state: string }>("ops", "info_request", null)).state).toBe("waiting_approval");
    const store = await NatsApprovalStore.open({ js: rig.client.js, cluster: rig.cluster });
    expect(await store.get("run-m", asked.data.approvalId)).toMatchObject({ status: "pending" });
    expect(deploy.runs).toEqual([]);
    await decide(rig, { runId: "run-m", approvalId: asked.data.approvalId, approved: true });
    expect(await waiting).toMatchObject({ status: "completed", output: 'tool said: {"done":"prod"}' });
    expect(deploy.runs).toEqual([{ target: "prod" }]);
    expect(model.requests.map((r) => r.headers["x-kova-agent"])).toEqual(["ops", "writer", "ops"]);
  }, 60_000);

  it("timeout - no decision within the agent's approval timeout rejects the call (recorded as timed out), the mailbox keeps the message in progress past ack_wait meanwhile; a late approval is refused", async () => {
    const deploy = countingTool("deploy");
    await using model = await oneCallModel("deploy");
    // ack_wait far below the wait: only the mailbox's in-progress acks keep the message from being redelivered.
    const toml = `${agentToml(model.url, `tools = ["deploy"]\napproval = { tools = ["dep*"], timeout = "1500ms" }`)}\n[mailbox]\nack_wait_ms = 400`;
    await using rig = await startAgentNode(nats.url, uniqueCluster("apt"), { toml, tools: [deploy.tool], ready: ["ops"] });
    const started = Date.now();
    const result = await askAgent(rig.client, "ops", "ship it", { runId: "run-t", timeoutMs: 30_000 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1500);
    expect(result.status).toBe("completed");
    expect(deploy.runs).toEqual([]);
    expect(result.output).toContain("TOOL_APPROVAL_TIMEOUT");
    const consumer = await rig.client.jsm.consumers.info(rig.client.subjects.streams.a2a, rig.client.subjects.consumer("ops"));
    expect(consumer.num_redelivered).toBe(0);
    expect(consumer.delivered.consumer_seq).toBe(1);
    expect(rig.eventsOf("run-t").filter((e) => e.type === "run_started")).toHaveLength(1);
    const asked = await requested(rig, "run-t");
    const rejected = rig.eventsOf("run-t").find((e) => e.type === "approval_rejected")!;
    expect(rejected.data).toMatchObject({ approvalId: asked.data.approvalId, timedOut: true });
    const kv = await new Kvm(rig.client.js).open(bucketName(rig.cluster, "approvals"));
    const stored = (await kv.get(`run-t.${asked.data.approvalId}`))!.json<ApprovalRecord>();
    expect(stored).toMatchObject({ status: "rejected", timedOut: true, expiresAt: asked.data.expiresAt });
    const late = await decide(rig, { runId: "run-t", approvalId: asked.data.approvalId, approved: true }).catch((e: unknown) => e);
    expect(isKovaError(late, "APPROVAL_ALREADY_DECIDED")).toBe(true);
    expect((late as Error).message).toContain("rejected by its timeout");
  }, 60_000);

  it("restart - a decision given while the agent's node is stopped is found by the restarted node, which keeps the deadline and runs the call once", async () => {
    const deploy = countingTool("deploy");
    await using model = await oneCallModel("deploy");
    const base = agentToml(model.url, `tools = ["deploy"]\napproval = ["deploy"]`);
    const cluster = uniqueCluster("aps");
    await using first = await startAgentNode(nats.url, cluster, { toml: base, tools: [deploy.tool], ready: ["ops"] });
    const pending = askAgent(first.client, "ops", "ship it", { runId: "run-s", timeoutMs: 60_000 });
    const asked = await requested(first, "run-s");
    // A graceful stop cuts the wait (the turn's message goes back to the mailbox unacked).
    await first.stopNode();
    // Nobody hosts the agent now; the decision goes straight into the bucket, as any node's endpoint would write it.
    const store = await NatsApprovalStore.open({ js: first.client.js, cluster });
    await store.decide("run-s", asked.data.approvalId, { approved: true, by: "carol" });
    await using second = await startAgentNode(nats.url, cluster, { toml: base, tools: [deploy.tool], dir: first.dir });
    const result = await pending;
    expect(result).toMatchObject({ status: "completed", output: 'tool said: {"done":"prod"}' });
    expect(deploy.runs).toEqual([{ target: "prod" }]);
    // The model was not asked again for the recorded response, and the approval was asked once.
    expect(model.requests).toHaveLength(2);
    const all = [...first.eventsOf("run-s"), ...second.eventsOf("run-s")];
    expect(new Set(all.filter((e) => e.type === "approval_requested").map((e) => JSON.stringify(e.data)))).toHaveProperty("size", 1);
    expect(all.find((e) => e.type === "approval_granted")!.data).toMatchObject({ by: "carol" });
    expect((await store.get("run-s", asked.data.approvalId))!.expiresAt).toBe(asked.data.expiresAt);
  }, 90_000);

  it("interrupt - kova signal <agent> interrupt ends a run that waits for approval cancelled; the call never runs and the agent takes its next message", async () => {
    const deploy = countingTool("deploy");
    await using model = await oneCallModel("deploy");
    await using rig = await startAgentNode(nats.url, uniqueCluster("api"), {
      toml: agentToml(model.url, `tools = ["deploy"]\napproval = ["deploy"]`),
      tools: [deploy.tool],
      ready: ["ops"],
    });
    const pending = askAgent(rig.client, "ops", "ship it", { runId: "run-i", timeoutMs: 30_000 });
    await requested(rig, "run-i");
    await controlRequest(rig.client.nc, nodeSubject(rig.cluster, "n1", "signal"), { actorId: "ops", signal: "interrupt" });
    expect(await pending).toMatchObject({ status: "cancelled", runId: "run-i" });
    expect(deploy.runs).toEqual([]);
    expect(rig.eventsOf("run-i").map((e) => e.type)).toContain("run_cancelled");
    // The agent is free again: the next run asks for its own approval.
    const next = askAgent(rig.client, "ops", "ship it again", { runId: "run-i2", timeoutMs: 30_000 });
    const asked = await requested(rig, "run-i2");
    await decide(rig, { runId: "run-i2", approvalId: asked.data.approvalId, approved: true });
    expect(await next).toMatchObject({ status: "completed" });
    expect(deploy.runs).toHaveLength(1);
  }, 60_000);

  // The interrupt test's flake: an interrupt sent right after approval_requested reached the
  // node while its wait created the key watch, went unheard, and the run waited an hour.
  it("wait - an interrupt that comes while the wait still sets up its key watch ends the wait", async () => {
    const cluster = uniqueCluster("apw");
    await using client = await connectBus(nats.url, cluster);
    const store = await NatsApprovalStore.open({ js: client.js, cluster });
    const now = Date.now();
    const record: ApprovalRecord = {
      v: 1,
      runId: "run-w",
      approvalId: "ap-0123456789ab",
      sessionId: "run-w",
      agentId: "ops",
      callId: "call-1",
      tool: "deploy",
      args: {},
      requestedAt: now,
      expiresAt: now + 3_600_000,
      status: "pending",
    };
    await store.request(record);
    const interrupt = new AbortController();
    const reason = new Error("interrupted");
    const waiting = store.waitForDecision("run-w", record.approvalId, interrupt.signal);
    // Synchronously after the call: the wait is past its first check, creating its watch.
    interrupt.abort(reason);
    // Bounded, so that a wait that missed the abort fails here and not at the test's timeout.
    let timer: NodeJS.Timeout | undefined;
    const stillWaiting = new Promise((resolve) => (timer = setTimeout(resolve, 10_000, "still waiting after 10 s")));
    expect(await Promise.race([waiting.catch((err: unknown) => err), stillWaiting])).toBe(reason);
    clearTimeout(timer);
    expect(await store.get("run-w", record.approvalId)).toMatchObject({ status: "pending" });
  });

  it("deadline - an approval never outlives the task's deadline: the wait ends with it, the call does not run, the run fails on the deadline", async () => {
    const deploy = countingTool("deploy");
    await using model = await oneCallModel("deploy");
    await using rig = await startAgentNode(nats.url, uniqueCluster("apd"), {
      toml: agentToml(model.url, `tools = ["deploy"]\napproval = ["deploy"]`),
      tools: [deploy.tool],
      ready: ["ops"],
    });
    const result = await askAgent(rig.client, "ops", "ship it", { runId: "run-d", timeoutMs: 30_000, constraints: { deadline: "1500ms" } });
    expect(result).toMatchObject({ status: "failed", error: { code: "RUN_LIMIT_EXCEEDED" } });
    expect(deploy.runs).toEqual([]);
    const asked = await requested(rig, "run-d");
    const started = rig.eventsOf("run-d").find((e) => e.type === "run_started")!;
    expect(asked.data.expiresAt - started.ts).toBeLessThanOrEqual(1600);
    expect(rig.eventsOf("run-d").find((e) => e.type === "approval_rejected")!.data).toMatchObject({ timedOut: true });
  }, 60_000);
});
