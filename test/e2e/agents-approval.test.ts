import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const AGENT = [`[[agents]]`, `id = "worker"`, `model = "main"`, `tools = ["calculator", "deploy"]`, `approval = ["calculator"]`].join("\n");
// Exports the tool `deploy` (defineTool, requiresApproval): a config module's tools reach the node's registry.
const TOOLS_MODULE = join(import.meta.dirname, "../fixtures/agents/tools-module.mjs");

describe("tool-call approval across a SIGKILL (node processes, scripted model over HTTP, the CLI)", () => {
  it("approval - kova tools ls shows the call needs approval; the agent's node is SIGKILLed while a call waits; kova approve is recorded by the other node; the restarted run finds the decision and runs the call once", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) => {
        const result = req.messages.find((m) => m.role === "tool");
        if (!result) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "6*7" } }]);
        return scriptedReply.text(`The answer is ${(JSON.parse(String(result.content)) as { result: number }).result}.`);
      },
    });
    await using tc = await TestCluster.create({
      nodes: ["n1", "n2"],
      modules: [TOOLS_MODULE],
      extraToml: [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, AGENT].join("\n"),
    });
    const host = await poll(async () => (await tc.agents()).get("worker")?.node ?? undefined, { timeoutMs: 20_000, what: "worker hosted" });
    // Asked from the CLI, which waits through the kill and prints how to approve.
    const asking = tc.cli(["ask", "worker", "What", "is", "6*7?", "--session", "appr-s"]);
    const asked = await poll(() => tc.events.find((e) => e.sessionId === "appr-s" && e.type === "approval_requested"), {
      timeoutMs: 20_000,
      what: "approval_requested",
    });
    const { approvalId } = asked.data as { approvalId: string };
    const runId = asked.runId;
    expect(asked.data).toMatchObject({ tool: "calculator", args: { expression: "6*7" } });
    expect((await tc.info<{ state: string }>("worker")).state).toBe("waiting_approval");

    // kova tools ls: what the agent can call, asked of its host while the run waits.
    const ls = await tc.cli(["tools", "ls", "worker"]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^TOOL\s+ARGUMENTS\s+IDEMPOTENCY\s+APPROVAL\s+SOURCE\s+DESCRIPTION$/m);
    expect(ls.stdout).toMatch(/^calculator\s+\{expression: string\}\s+idempotent\s+required\s+code\s+\S/m);
    expect(ls.stdout).toMatch(/^deploy\s+\{service: string, env: "staging"\|"prod"\}\s+not_idempotent\s+required\s+code\s+Deploys a service/m);
    const lsJson = JSON.parse((await tc.cli(["tools", "ls", "worker", "--json"])).stdout) as {
      node: string;
      tools: Array<{ name: string; parameters: { type: string } }>;
    };
    expect(lsJson).toMatchObject({
      node: host,
      agent: "worker",
      tools: [
        { name: "calculator", parameters: { type: "object" } },
        { name: "deploy", requiresApproval: true },
      ],
    });
    const registry = await tc.cli(["tools", "ls"]);
    expect(registry.stdout).toMatch(/^clock_now\s/m);
    expect(registry.stdout).toMatch(/^agent:worker\s+\{task: string\}\s+idempotent\s+-\s+agents/m);

    tc.kill(host);
    await tc.procs.get(host)!.exited;
    // The agent's node is down: the other node records the decision.
    const approve = await tc.cli(["approve", runId, approvalId, "--by", "ann", "--comment", "fine"]);
    expect(approve.code, approve.stderr).toBe(0);
    expect(approve.stdout).toContain(`approved ${approvalId} of ${runId} (agent worker, tool calculator)`);
    await tc.startNode(host);

    const result = await asking;
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain("The answer is 42.");
    expect(result.stderr).toContain(
      `[calculator {"expression":"6*7"} waits for approval: kova approve ${runId} ${approvalId}  |  kova reject ${runId} ${approvalId}]`,
    );
    expect(result.stderr).toContain("[calculator approved by ann]");
    expect(result.stderr).toContain(`[completed · run ${runId}`);
    // No model call repeated, one approval id, the call run once after the decision.
    expect(model.requests).toHaveLength(2);
    const events = tc.events.filter((e) => e.runId === runId);
    // The kill may land after the request was published but before its step was recorded:
    // the new host then asks again, under the same approval id (derived from the step), so
    // the decision already given answers it.
    const requested = events.filter((e) => e.type === "approval_requested");
    expect(requested.length).toBeGreaterThanOrEqual(1);
    expect(new Set(requested.map((e) => (e.data as { approvalId: string }).approvalId))).toEqual(new Set([approvalId]));
    expect(events.filter((e) => e.type === "tool_call")).toHaveLength(1);
    expect(events.find((e) => e.type === "approval_granted")?.data).toMatchObject({ approvalId, by: "ann", comment: "fine" });
    // A second decision is refused with its reason, through the same command.
    const again = await tc.cli(["reject", runId, approvalId]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("APPROVAL_ALREADY_DECIDED");
    // Ids that are neither an agent's approval nor a workflow run's: one clear error.
    const none = await tc.cli(["approve", "no-such-run", "ap-000000000000"]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no approval ap-000000000000 of run no-such-run: .*and as a workflow run: .*\[APPROVAL_NOT_FOUND\]/);
  }, 120_000);

  it("approval - takeover: the agent's node is SIGKILLed while a call waits and never returns; the node that takes the agent over finds the decision and runs the call once", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) =>
        req.messages.some((m) => m.role === "tool")
          ? scriptedReply.text("done")
          : scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "1+1" } }]),
    });
    await using tc = await TestCluster.create({
      nodes: ["n1", "n2"],
      modules: [TOOLS_MODULE],
      extraToml: [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, AGENT].join("\n"),
    });
    const host = await poll(async () => (await tc.agents()).get("worker")?.node ?? undefined, { timeoutMs: 20_000, what: "worker hosted" });
    const asking = tc.cli(["ask", "worker", "add", "--session", "take-s"]);
    const asked = await poll(() => tc.events.find((e) => e.sessionId === "take-s" && e.type === "approval_requested"), {
      timeoutMs: 20_000,
      what: "approval_requested",
    });
    const { approvalId } = asked.data as { approvalId: string };
    tc.kill(host);
    const approve = await tc.cli(["approve", asked.runId, approvalId]);
    expect(approve.code, approve.stderr).toBe(0);
    const result = await asking;
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain("done");
    const moved = (await tc.agents()).get("worker")?.node;
    expect(moved).not.toBe(host);
    expect(model.requests).toHaveLength(2);
    const events = tc.events.filter((e) => e.runId === asked.runId);
    // The kill may land after the request was published but before its step was recorded:
    // the new host then asks again, under the same approval id (derived from the step), so
    // the decision already given answers it.
    const requested = events.filter((e) => e.type === "approval_requested");
    expect(requested.length).toBeGreaterThanOrEqual(1);
    expect(new Set(requested.map((e) => (e.data as { approvalId: string }).approvalId))).toEqual(new Set([approvalId]));
    expect(events.filter((e) => e.type === "tool_call")).toHaveLength(1);
  }, 120_000);
});
