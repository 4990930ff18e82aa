import { describe, expect, it } from "vitest";
import { askAgent, NatsGroupLedger } from "../../src/agents/index.js";
import { runSwarm } from "../../src/swarm/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { startAgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { isPlanRequest, swarmModel } from "../fixtures/swarm/helpers.js";
import { poll } from "../fixtures/poll.js";
import { DYNAMIC, EVERYTHING } from "../fixtures/mcp/helpers.js";
import { kovaCli } from "../fixtures/kova-cli.js";
import { controlRequest, nodeSubject, type ToolsReply } from "../../src/cluster/control.js";
import { defineTool } from "../../src/tools/define-tool.js";
import { isKovaError } from "../../src/core/errors.js";

const nats = fileServer();

describe("agent services of a node (KovaNode in process, real NATS, scripted model over HTTP)", () => {
  it("scheduler - one model's max_concurrency holds across the node's agents and its swarm coordinator", async () => {
    let maxOthers = 0;
    let arrivals = 0;
    const answer = swarmModel({
      plan: [
        { task: "half one", capability: "math" },
        { task: "half two", capability: "math" },
      ],
      latencyMs: 500,
    });
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

  it("agent tool - tools = [\"agent:critic\"] resolves on the node: the call is a child run in the caller's session, linked by child_run_linked, charged to the caller's budget group", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) => {
        if (req.headers["x-kova-agent"] === "critic") return scriptedReply.text("Too long; cut it.", { usage: { inputTokens: 30, outputTokens: 5 } });
        const result = req.messages.find((m) => m.role === "tool");
        if (!result)
          return scriptedReply.toolCalls([{ id: "call-c", name: "agent_critic", arguments: { task: "Review: a long draft" } }], {
            usage: { inputTokens: 100, outputTokens: 10 },
          });
        return scriptedReply.text(`critic says ${(JSON.parse(String(result.content)) as { output: string }).output}`, {
          usage: { inputTokens: 120, outputTokens: 8 },
        });
      },
    });
    const toml = [
      `[models.main]`,
      `base_url = "${model.url}"`,
      `model = "gpt-4o-mini"`,
      `[budget_groups.team]`,
      `max_tokens = 100000`,
      `[[agents]]`,
      `id = "lead"`,
      `model = "main"`,
      `tools = ["agent:critic"]`,
      `budget = { group = "team" }`,
      `[[agents]]`,
      `id = "critic"`,
      `model = "main"`,
    ].join("\n");
    await using rig = await startAgentNode(nats.url, uniqueCluster("at"), { toml, ready: ["lead", "critic"] });
    const result = await askAgent(rig.client, "lead", "Write and check", { runId: "lead-run", sessionId: "s-lead", timeoutMs: 30_000 });
    expect(result).toMatchObject({ status: "completed", output: "critic says Too long; cut it." });
    expect(model.requests[0]!.tools.map((t) => t.function.name)).toEqual(["agent_critic"]);
    const link = rig.eventsOf("lead-run").find((e) => e.type === "child_run_linked")!;
    expect(link.data).toMatchObject({ callId: "call-c", agentId: "critic" });
    const childRunId = (link.data as { childRunId: string }).childRunId;
    const child = await poll(() => rig.events.find((e) => e.runId === childRunId && e.type === "run_completed"), {
      timeoutMs: 10_000,
      what: "the child's run_completed",
    });
    expect(child).toMatchObject({ sessionId: "s-lead", parentRunId: "lead-run" });
    expect(rig.events.find((e) => e.runId === childRunId && e.type === "run_started")!.data).toMatchObject({
      agentId: "critic",
      input: "Review: a long draft",
    });
    // The group holds the lead's two calls and the critic's one.
    const ledger = await NatsGroupLedger.open({ js: rig.client.js, cluster: rig.cluster });
    expect(await ledger.used("group.team")).toBe(100 + 10 + 120 + 8 + 30 + 5);
  }, 60_000);

  it("agent tool - an agent naming itself as a tool fails the node's start with the key at fault", async () => {
    const toml = [
      `[models.main]`,
      `base_url = "http://127.0.0.1:9/v1"`,
      `model = "m"`,
      `[[agents]]`,
      `id = "loop"`,
      `model = "main"`,
      `tools = ["calculator", "agent:loop"]`,
    ].join("\n");
    const err = await startAgentNode(nats.url, uniqueCluster("ats"), { toml }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "INVALID_CONFIG", key: "agents[0].tools[1]" });
    expect((err as Error).message).toContain("cannot call itself");
  }, 30_000);

  it("tools ls - the node's tools endpoint lists what an agent can call (built-in, code, MCP <server>/<tool>, agent:<id>) with schema, idempotency, approval and source; without an agent, the whole registry", async () => {
    const deploy = defineTool<{ target: string }>({
      name: "deploy",
      description: "Deploys a target",
      idempotent: false,
      requiresApproval: true,
      parameters: { type: "object", properties: { target: { type: "string" } }, required: ["target"] },
      run: () => "ok",
    });
    const toml = [
      `[models.main]`,
      `base_url = "http://127.0.0.1:9/v1"`,
      `model = "m"`,
      `[[mcp.servers]]`,
      `name = "everything"`,
      `command = ${JSON.stringify(process.execPath)}`,
      `args = [${JSON.stringify(EVERYTHING)}, "stdio"]`,
      `[[agents]]`,
      `id = "ops"`,
      `model = "main"`,
      `tools = ["calculator", "everything/echo", "agent:*", "deploy"]`,
      `approval = ["everything/*"]`,
      `[[agents]]`,
      `id = "critic"`,
      `model = "main"`,
    ].join("\n");
    await using rig = await startAgentNode(nats.url, uniqueCluster("tl"), { toml, tools: [deploy], ready: ["ops"] });
    const ls = (body: object) => controlRequest<ToolsReply>(rig.client.nc, nodeSubject(rig.cluster, "n1", "tools"), body, 30_000);
    const ops = await ls({ agent: "ops" });
    expect(ops.node).toBe("n1");
    const view = Object.fromEntries(ops.tools.map((t) => [t.name, t]));
    expect(Object.keys(view)).toEqual(["calculator", "everything/echo", "agent:critic", "deploy"]);
    expect(view.calculator).toMatchObject({
      idempotency: "idempotent",
      requiresApproval: false,
      source: "code",
      parameters: { type: "object", required: ["expression"] },
    });
    expect(view["everything/echo"]).toMatchObject({
      requiresApproval: true,
      source: "mcp:everything",
      parameters: { properties: { message: expect.any(Object) } },
    });
    expect(view["agent:critic"]).toMatchObject({ idempotency: "idempotent", requiresApproval: false, source: "agents", parameters: { required: ["task"] } });
    expect(view.deploy).toMatchObject({ idempotency: "not_idempotent", requiresApproval: true, source: "code" });
    const all = await ls({});
    const names = all.tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(["clock_now", "calculator", "deploy", "agent:ops", "agent:critic", "everything/echo"]));
    // The whole registry shows tools' own approval flags; agents' lists apply per agent.
    expect(all.tools.find((t) => t.name === "everything/echo")!.requiresApproval).toBe(false);
    const unknown = await ls({ agent: "nobody" }).catch((e: unknown) => e);
    expect(isKovaError(unknown, "UNKNOWN_AGENT")).toBe(true);
  }, 60_000);

  it("mcp broken schema - a server's tool whose inputSchema does not compile is not offered, so a model calling it gets TOOL_UNKNOWN and the run completes; kova tools ls says which tools are not offered and why", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) =>
        req.messages.some((m) => m.role === "tool")
          ? scriptedReply.text("that tool is not there")
          : scriptedReply.toolCalls([{ id: "c-bad", name: "fixture__bad-type", arguments: { x: 1 } }]),
    });
    const toml = [
      `[models.main]`,
      `base_url = "${model.url}"`,
      `model = "gpt-4o-mini"`,
      `[[mcp.servers]]`,
      `name = "fixture"`,
      `command = ${JSON.stringify(process.execPath)}`,
      `args = [${JSON.stringify(DYNAMIC)}]`,
      `env = { FIXTURE_BAD_SCHEMAS = "1" }`,
      `[[agents]]`,
      `id = "ops"`,
      `model = "main"`,
      `tools = ["fixture/*"]`,
      `[[agents]]`,
      `id = "calc"`,
      `model = "main"`,
      `tools = ["calculator"]`,
    ].join("\n");
    const cluster = uniqueCluster("tb");
    await using rig = await startAgentNode(nats.url, cluster, { toml, ready: ["ops"] });
    const result = await askAgent(rig.client, "ops", "call the broken tool", { runId: "bad-run", timeoutMs: 30_000 });
    expect(result).toMatchObject({ status: "completed", output: "that tool is not there" });
    const refusal = JSON.parse(String(model.requests[1]!.messages.find((m) => m.role === "tool")!.content)) as { error: { code: string } };
    expect(refusal.error.code).toBe("TOOL_UNKNOWN");
    expect(model.requests[0]!.tools!.map((t) => t.function.name)).not.toContain("fixture__bad-type");

    const ls = (body: object) => controlRequest<ToolsReply>(rig.client.nc, nodeSubject(cluster, "n1", "tools"), body, 30_000);
    const ops = await ls({ agent: "ops" });
    expect(ops.tools.map((t) => t.name)).toEqual(expect.arrayContaining(["fixture/plain", "fixture/slow"]));
    expect(ops.tools.map((t) => t.name)).not.toContain("fixture/bad-type");
    expect(ops.skipped?.map((t) => [t.name, t.source])).toEqual([
      ["fixture/bad-type", "mcp:fixture"],
      ["fixture/bad-ref", "mcp:fixture"],
    ]);
    expect(ops.skipped![0]!.reason).toMatch(/^inputSchema is not a valid JSON Schema: /);
    // An agent whose list names no such tool hears nothing of them; the whole registry lists them all.
    expect((await ls({ agent: "calc" })).skipped).toBeUndefined();
    expect((await ls({})).skipped).toHaveLength(2);
    const cli = await kovaCli(nats.url, cluster, ["tools", "ls", "ops"]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/^fixture\/plain\s/m);
    expect(cli.stdout).toMatch(/^not offered: fixture\/bad-type \(mcp:fixture\): inputSchema is not a valid JSON Schema: \S/m);
    expect(cli.stdout).toMatch(/^not offered: fixture\/bad-ref \(mcp:fixture\): inputSchema is not a valid JSON Schema: \S/m);
  }, 60_000);
});
