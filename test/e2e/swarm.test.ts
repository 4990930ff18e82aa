import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KovaEvent } from "../../src/bus/index.js";
import { runSwarm } from "../../src/swarm/index.js";
import { startScriptedModelServer, type ScriptedModelServer } from "../../src/testing/index.js";
import type { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import type { ContractAgentState } from "../fixtures/swarm/contract-agent-defs.mjs";
import { isPlanRequest, swarmModel, type ScriptedSubtask } from "../fixtures/swarm/helpers.js";
import { sessionEvents, startSwarmCluster } from "../fixtures/swarm/swarm-cluster.js";

/**
 * Swarms on 3 node processes (issue 12): a coordinator `planner` ([[swarms]]) and contract
 * agents spread by placement, a scripted model server for the coordinator. The tests share
 * one cluster because starting three processes is the slow part; the SIGKILL runs last.
 */
let model: ScriptedModelServer;
let tc: TestCluster & { agentIds: string[] };
let plan: ScriptedSubtask[] = [];

beforeAll(async () => {
  model = await startScriptedModelServer({ handler: swarmModel({ plan: () => plan }) });
  tc = await startSwarmCluster({ model, researchers: 6, writers: 3, swarm: [`deadline = "60s"`] });
}, 90_000);
afterAll(async () => {
  await tc?.stop();
  await model?.close();
});

async function counts(): Promise<Map<string, ContractAgentState>> {
  const out = new Map<string, ContractAgentState>();
  for (const id of tc.agentIds) out.set(id, await tc.info<ContractAgentState>(id));
  return out;
}

/** Every delegation message id any agent ran a turn for, once all `n` are committed. */
async function delegatedMessages(n: number): Promise<string[]> {
  return poll(
    async () => {
      const all = [...(await counts()).values()].flatMap((s) => s.messages);
      return all.length >= n ? all : undefined;
    },
    { timeoutMs: 15_000, what: `${n} delegations committed by the agents`, everyMs: 200, retryErrors: true },
  );
}

/** The delegations committed so far, once no new one has come for 1.5 s. */
async function settledDelegations(): Promise<string[]> {
  let last: string[] = [];
  let since = Date.now();
  return poll(
    async () => {
      const all = [...(await counts()).values()].flatMap((s) => s.messages);
      if (all.length !== last.length) {
        last = all;
        since = Date.now();
        return undefined;
      }
      return Date.now() - since >= 1_500 ? all : undefined;
    },
    { timeoutMs: 30_000, what: "the agents' committed delegations to settle", everyMs: 250, retryErrors: true },
  );
}

async function coordinatorNode(): Promise<string> {
  return (await tc.agents()).get("planner")!.node!;
}

describe("swarm on 3 nodes", () => {
  it("swarm - 10 subtasks over agents on 3 nodes complete with one synthesized answer and a run tree of parent links", async () => {
    plan = Array.from({ length: 10 }, (_, i) => ({ task: `part ${i} [sleep 300]`, capability: i < 7 ? "research" : "write" }));
    const events: KovaEvent[] = [];
    const result = await runSwarm(tc.bus, "planner", "Compare the three biggest vector databases", { sessionId: "s-ten", onEvent: (e) => events.push(e) });
    expect(result.status).toBe("completed");
    expect(result.output).toBe("ANSWER from 10 results");
    expect(result.missing).toEqual([]);

    // One delegation per subtask, none twice; the subtasks ran on agents of all three nodes.
    const messages = await delegatedMessages(10);
    expect(messages).toHaveLength(10);
    expect(new Set(messages).size).toBe(10);
    const agents = await tc.agents();
    const started = events.filter((e) => e.type === "run_started" && e.runId !== result.runId);
    expect(started).toHaveLength(10);
    const nodes = new Set(started.map((e) => agents.get((e.data as { agentId: string }).agentId)!.node));
    expect(nodes.size).toBe(3);

    // The run tree: the swarm's run at the root, each child linked by child_run_linked and
    // carrying the swarm's run id as parentRunId on the session's subjects.
    await poll(() => sessionEvents(tc, "s-ten").filter((e) => e.type === "run_stream_end").length === 11, {
      timeoutMs: 10_000,
      what: "11 run_stream_end events",
    });
    const tree = sessionEvents(tc, "s-ten");
    const root = tree.filter((e) => e.runId === result.runId);
    expect(root.map((e) => e.type)).toEqual(expect.arrayContaining(["run_started", "swarm_planned", "model_response", "run_completed", "run_stream_end"]));
    expect(root.every((e) => e.parentRunId === undefined)).toBe(true);
    const linked = new Set(root.filter((e) => e.type === "child_run_linked").map((e) => (e.data as { childRunId: string }).childRunId));
    expect(linked.size).toBe(10);
    const children = tree.filter((e) => e.runId !== result.runId);
    expect(new Set(children.map((e) => e.runId))).toEqual(linked);
    expect(children.every((e) => e.parentRunId === result.runId)).toBe(true);
    expect(children.filter((e) => e.type === "run_completed")).toHaveLength(10);
  }, 60_000);

  it("swarm - a deadline with one slow agent: the answer names the missing subtask", async () => {
    plan = [
      { task: "fast one", capability: "write" },
      { task: "fast two", capability: "write" },
      { task: "slow one [sleep 20000]", capability: "research" },
    ];
    const t0 = Date.now();
    const result = await runSwarm(tc.bus, "planner", "Three quick views", { sessionId: "s-deadline", constraints: { deadline: "4s" } });
    // The 4 s deadline, not the slow agent's 20 s (with room for a loaded machine).
    expect(Date.now() - t0).toBeLessThan(4000 + 4000);
    expect(result.status).toBe("completed");
    expect(result.missing).toHaveLength(1);
    expect(result.missing[0]).toMatchObject({ index: 2, task: "slow one [sleep 20000]", reason: "no result before the deadline" });
    expect(result.output).toContain("ANSWER from 2 results");
    expect(result.output).toMatch(/Missing results \(1\):\n- subtask 3 \(agent r-\d\): slow one \[sleep 20000\] — no result before the deadline/);
    const partial = sessionEvents(tc, "s-deadline").find((e) => e.type === "swarm_partial");
    expect(partial?.data).toMatchObject({ missing: [{ index: 2 }] });
    // The slow child was interrupted at the cutoff through its node's signal endpoint: it
    // ends cancelled well before its 20 s of work would have.
    const slow = sessionEvents(tc, "s-deadline").find((e) => e.type === "child_run_linked" && (e.data as { stepId: string }).stepId === "subtask-2")!;
    const slowRun = (slow.data as { childRunId: string }).childRunId;
    const end = await poll(() => sessionEvents(tc, "s-deadline").find((e) => e.runId === slowRun && e.type === "run_stream_end"), {
      timeoutMs: 10_000,
      what: "the slow child's run to end",
    });
    expect(end.data).toEqual({ status: "cancelled" });
    expect(Date.now() - t0).toBeLessThan(14_000);
  }, 60_000);

  it("cli - kova swarm run --follow prints the run tree live, then the answer", async () => {
    const plan = JSON.stringify([
      { task: "first half", capability: "research" },
      { task: "second half", capability: "write" },
    ]);
    const r = await tc.cli(["swarm", "run", "Two halves", "--coordinator", "planner", "--follow", "--session", "s-cli", "--plan", plan]);
    expect(r.stderr).toMatch(/run \S+ \(session s-cli\)/);
    expect(r.code).toBe(0);
    // Piped, the live tree prints a snapshot per ended run; the last one is the whole tree.
    const [tree, answer] = [r.stdout.slice(0, r.stdout.lastIndexOf("\n\n")), r.stdout.slice(r.stdout.lastIndexOf("\n\n") + 2)];
    const last = tree.trim().split("\n\n").at(-1)!.split("\n");
    expect(last[0]).toMatch(/^planner {2}\S+ {2}completed {2}\d+\.\ds {2}tokens \d+\/\d+$/);
    expect(last.slice(1).sort()).toEqual([
      expect.stringMatching(/^[├└]─ subtask-\d → (r|w)-\d {2}\S+ {2}completed /),
      expect.stringMatching(/^[├└]─ subtask-\d → (r|w)-\d {2}\S+ {2}completed /),
    ]);
    expect(answer).toBe("ANSWER from 2 results\n");
  }, 60_000);

  it("swarm - SIGKILL of the coordinator's node mid-swarm: the takeover delegates nothing twice and the answer arrives", async () => {
    // Let the earlier tests' agents finish first (the slow one's cancelled turn included), so
    // every agent starts free: the committed delegations stop changing.
    const before = await settledDelegations();
    plan = Array.from({ length: 9 }, (_, i) => ({ task: `item ${i} [sleep 2500]`, capability: i % 3 === 0 ? "write" : "research" }));
    const victim = await coordinatorNode();
    const victimAgents = [...(await tc.agents()).values()].filter((r) => r.node === victim && r.id !== "planner").map((r) => r.id);
    const planRequests = model.requests.filter(isPlanRequest).length;
    const answer = runSwarm(tc.bus, "planner", "Nine items", { sessionId: "s-kill" });
    // Mid-swarm: the plan is out and the first children are linked, their agents at work.
    await poll(() => sessionEvents(tc, "s-kill").some((e) => e.type === "child_run_linked"), { timeoutMs: 15_000, what: "the first child linked" });
    tc.kill(victim);
    const result = await answer;
    expect(result.status).toBe("completed");
    expect(result.missing).toEqual([]);
    expect(result.output).toBe("ANSWER from 9 results");
    const taker = await coordinatorNode();
    expect(taker).not.toBe(victim);

    // Nothing delegated twice: every agent turn (counted by the agents themselves, on
    // every node) ran for a distinct message id, one per subtask; the takeover re-planned nothing.
    const after = await delegatedMessages(before.length + 9);
    const fresh = after.filter((m) => !before.includes(m));
    expect(fresh).toHaveLength(9);
    expect(new Set(fresh).size).toBe(9);
    // The killed node's agents had subtasks too: they moved and their runs finished elsewhere.
    const states = await counts();
    const movedWork = victimAgents.filter((id) => states.get(id)!.messages.some((m) => fresh.includes(m)));
    expect(movedWork.length).toBeGreaterThan(0);
    const now = await tc.agents();
    for (const id of movedWork) expect(now.get(id)!.node).not.toBe(victim);
    expect(model.requests.filter(isPlanRequest).length - planRequests).toBe(1);
    const root = sessionEvents(tc, "s-kill").filter((e) => e.runId === result.runId);
    expect(root.filter((e) => e.type === "swarm_planned")).toHaveLength(1);
    expect(new Set(root.filter((e) => e.type === "child_run_linked").map((e) => (e.data as { childRunId: string }).childRunId)).size).toBe(9);
  }, 90_000);
});
