import { describe, expect, it } from "vitest";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const AGENT = [`[[agents]]`, `id = "worker"`, `model = "main"`, `tools = ["calculator"]`, `approval = ["calculator"]`].join("\n");

describe("tool-call approval across a SIGKILL (node processes, scripted model over HTTP, the CLI)", () => {
  it("approval - kova tools ls shows the call needs approval; the agent's node is SIGKILLed while a call waits; kova approve is recorded by the other node; the restarted run finds the decision and runs the call once", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) => {
        const result = req.messages.find((m) => m.role === "tool");
        if (!result) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "6*7" } }]);
        return scriptedReply.text(`The answer is ${(JSON.parse(String(result.content)) as { result: number }).result}.`);
      },
    });
    await using tc = await TestCluster.create({ nodes: ["n1", "n2"], extraToml: [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, AGENT].join("\n") });
    const host = await poll(async () => (await tc.agents()).get("worker")?.node ?? undefined, { timeoutMs: 20_000, what: "worker hosted" });
    // Asked from the CLI, which waits through the kill and prints how to approve.
    const asking = tc.cli(["ask", "worker", "What", "is", "6*7?", "--session", "appr-s"]);
    const asked = await poll(() => tc.events.find((e) => e.sessionId === "appr-s" && e.type === "approval_requested"), { timeoutMs: 20_000, what: "approval_requested" });
    const { approvalId } = asked.data as { approvalId: string };
    const runId = asked.runId;
    expect(asked.data).toMatchObject({ tool: "calculator", args: { expression: "6*7" } });
    expect((await tc.info<{ state: string }>("worker")).state).toBe("waiting_approval");

    // kova tools ls: what the agent can call, asked of its host while the run waits.
    const ls = await tc.cli(["tools", "ls", "worker"]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^TOOL\s+ARGUMENTS\s+IDEMPOTENCY\s+APPROVAL\s+SOURCE\s+DESCRIPTION$/m);
    expect(ls.stdout).toMatch(/^calculator\s+\{expression: string\}\s+idempotent\s+required\s+code\s+\S/m);
    const lsJson = JSON.parse((await tc.cli(["tools", "ls", "worker", "--json"])).stdout) as { node: string; tools: Array<{ name: string; parameters: { type: string } }> };
    expect(lsJson).toMatchObject({ node: host, agent: "worker", tools: [{ name: "calculator", parameters: { type: "object" } }] });
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
    expect(result.stderr).toContain(`[calculator {"expression":"6*7"} waits for approval: kova approve ${runId} ${approvalId}  |  kova reject ${runId} ${approvalId}]`);
    expect(result.stderr).toContain("[calculator approved by ann]");
    expect(result.stderr).toContain(`[completed · run ${runId}`);
    // No model call repeated, the approval asked once, the call run once after the decision.
    expect(model.requests).toHaveLength(2);
    const events = tc.events.filter((e) => e.runId === runId);
    expect(events.filter((e) => e.type === "approval_requested")).toHaveLength(1);
    expect(events.filter((e) => e.type === "tool_call")).toHaveLength(1);
    expect(events.find((e) => e.type === "approval_granted")?.data).toMatchObject({ approvalId, by: "ann", comment: "fine" });
    // A second decision is refused with its reason, through the same command.
    const again = await tc.cli(["reject", runId, approvalId]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("APPROVAL_ALREADY_DECIDED");
  }, 120_000);
});
