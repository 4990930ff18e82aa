import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { AgentRecord } from "../../src/node/registry.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import { TEST_AGENTS_MODULE, WORKFLOW_FIXTURES, type AgentCounts } from "../fixtures/workflow/rig.js";

const AGENTS = ["researcher", "writer", "critic"];
const agentsToml = AGENTS.map((id) => `[[actors]]\nid = "${id}"\ntype = "wf-agent"`).join("\n");

async function counts(tc: TestCluster, id: string): Promise<AgentCounts> {
  return poll(() => tc.bus.request<AgentCounts>(id, "info_request", {}, { timeoutMs: 1000 }), { timeoutMs: 20_000, retryErrors: true, what: `${id}'s counts` });
}

async function hostOf(tc: TestCluster, id: string): Promise<string> {
  return poll(async () => (await tc.agents()).get(id)?.node ?? undefined, { timeoutMs: 10_000, what: `a node hosting ${id}` });
}

function runEnded(tc: TestCluster, runId: string, timeoutMs: number): Promise<string> {
  return poll(
    () => {
      const e = tc.events.find((x) => x.runId === runId && x.type === "run_stream_end");
      return e ? String((e.data as { status: string }).status) : undefined;
    },
    {
      timeoutMs,
      what: () =>
        `run ${runId} to end; its events: ${tc.events
          .filter((x) => x.runId === runId)
          .map((x) => x.type)
          .join(", ")}`,
    },
  );
}

// Spawns node processes from dist/: run `npm run build` first.
describe("workflows across node processes", () => {
  it("workflow - SIGKILL of the node running a workflow mid-run: the run finishes on a peer and no finished step runs again", async () => {
    await using tc = await TestCluster.create({ nodes: ["n1", "n2"], modules: [TEST_AGENTS_MODULE], extraToml: agentsToml });
    for (const a of AGENTS) await hostOf(tc, a);
    const start = await tc.cli(["workflow", "run", join(WORKFLOW_FIXTURES, "slow-middle.toml"), "--input", "topic=nats", "--json"]);
    expect(start.code, start.stderr).toBe(0);
    const { runId } = JSON.parse(start.stdout) as { runId: string };
    // research done, write under way: kill the node that runs the workflow
    await poll(() => tc.events.some((e) => e.runId === runId && e.type === "step_completed" && (e.data as { stepId: string }).stepId === "research"), {
      timeoutMs: 20_000,
      what: "the research step to finish",
    });
    await poll(() => tc.events.some((e) => e.parentRunId === runId && e.type === "run_started" && (e.data as { agentId: string }).agentId === "writer"), {
      timeoutMs: 20_000,
      what: "the writer to start",
    });
    const victim = await hostOf(tc, runId);
    tc.kill(victim);
    const killedAt = performance.now();

    expect(await runEnded(tc, runId, 40_000)).toBe("completed");
    const endedAfterMs = performance.now() - killedAt;
    const survivor = victim === "n1" ? "n2" : "n1";
    // retired from placement after it ended (a later turn, from its retire timer)
    await poll(async () => ((await tc.agents()).get(runId) as AgentRecord | undefined)?.desired === "killed", {
      timeoutMs: 10_000,
      what: "the run to be retired",
    });
    const done = tc.events.find((e) => e.runId === runId && e.type === "run_completed")!;
    expect((done.data as { output: string }).output).toBe("critic(review writer(write from researcher(research nats)))");
    // every agent handled exactly one task_delegate: no finished step was started again
    for (const a of AGENTS) {
      const c = await counts(tc, a);
      expect(c.ids, `${a}'s task_delegates`).toHaveLength(1);
    }
    // the run's events come from both nodes' turns, the step after the kill from the survivor
    const status = await tc.cli(["workflow", "status", runId, "--json"]);
    const summary = JSON.parse(status.stdout) as { status: string; steps: Array<{ key: string; status: string; attempts: number }> };
    expect(summary.status).toBe("completed");
    expect(summary.steps.map((s) => `${s.key}:${s.status}:${s.attempts}`)).toEqual(["research:completed:1", "write:completed:1", "review:completed:1"]);
    process.stderr.write(`workflow sigkill: ${victim} killed, run finished on ${survivor} ${(endedAfterMs / 1000).toFixed(1)} s later\n`);
  }, 90_000);

  it("workflow - an approval wait survives a restart of its node and resumes on kova approve; the tree renders the runs", async () => {
    await using tc = await TestCluster.create({ nodes: ["n1"], modules: [TEST_AGENTS_MODULE], extraToml: agentsToml });
    for (const a of AGENTS) await hostOf(tc, a);
    const start = await tc.cli(["workflow", "run", join(WORKFLOW_FIXTURES, "approval.toml"), "--input", "topic=nats", "--json"]);
    expect(start.code, start.stderr).toBe(0);
    const { runId } = JSON.parse(start.stdout) as { runId: string };
    await poll(() => tc.events.some((e) => e.runId === runId && e.type === "approval_requested"), { timeoutMs: 20_000, what: "the approval request" });

    tc.kill("n1");
    await tc.procs.get("n1")!.exited;
    await tc.startNode("n1");
    const status = await poll(
      async () => {
        const r = await tc.cli(["workflow", "status", runId]);
        return r.code === 0 && r.stdout.includes("waiting for approval approve") ? r.stdout : undefined;
      },
      { timeoutMs: 20_000, what: "the restarted run to show its open approval" },
    );
    expect(status).toContain(`kova approve ${runId} approve`);

    const approve = await tc.cli(["approve", runId, "approve", "--by", "ann", "--comment", "ship it"]);
    expect(approve.code, approve.stderr).toBe(0);
    expect(approve.stdout).toContain(`approved approve of ${runId}`);
    expect(await runEnded(tc, runId, 30_000)).toBe("completed");
    expect((await counts(tc, "writer")).ids).toHaveLength(1);
    expect((await counts(tc, "critic")).inputs).toEqual(["publish writer(draft nats)"]);

    const tree = await tc.cli(["events", "tail", "--session", runId, "--tree", "--until-done"]);
    expect(tree.code, tree.stderr).toBe(0);
    const last = tree.stdout.trim().split("\n\n").at(-1)!.split("\n");
    expect(last[0]).toMatch(new RegExp(`^workflow:approval  ${runId}  completed  \\d+\\.\\ds  tokens \\d+/14  \\$0\\.0020$`));
    expect(last.slice(1)).toEqual([
      expect.stringMatching(/^├─ draft → writer {2}\S+-t0r {2}completed/),
      expect.stringMatching(/^└─ publish\.then → critic {2}\S+r {2}completed/),
    ]);
  }, 90_000);
});
