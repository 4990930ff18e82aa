import { spawn } from "node:child_process";
import { join } from "node:path";
import { stripVTControlCharacters } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KovaEvent } from "../../src/bus/index.js";
import { runSwarm } from "../../src/swarm/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedHandler, type ScriptedModelServer } from "../../src/testing/index.js";
import { REPO, type TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import type { ContractAgentState } from "../fixtures/swarm/contract-agent-defs.mjs";
import { isPlanRequest, isSynthesisRequest, swarmModel, type ScriptedSubtask } from "../fixtures/swarm/helpers.js";
import { sessionEvents, startSwarmCluster } from "../fixtures/swarm/swarm-cluster.js";

/**
 * Swarms on 3 node processes (docs/swarm.md): a coordinator `planner` ([[swarms]]) and contract
 * agents spread by placement, a scripted model server for the coordinator and for the
 * agents' own call (one per run). The tests share one cluster because starting three
 * processes is the slow part; the SIGKILL runs last.
 */
let model: ScriptedModelServer;
let tc: TestCluster & { agentIds: string[] };
let plan: ScriptedSubtask[] = [];
const swarmHandler = swarmModel({ plan: () => plan });

beforeAll(async () => {
  model = await startScriptedModelServer({ handler: swarmHandler });
  tc = await startSwarmCluster({ model, researchers: 6, writers: 3, swarm: [`deadline = "60s"`], agentsCallModel: true });
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

/** Single-quoted for sh. */
const shellQuote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`;

/**
 * Runs the CLI on a pseudo-terminal (util-linux `script`), as a user at a terminal does:
 * its stdout is a TTY. Resolves with what the terminal showed (stdout and stderr), without
 * the cursor moves of a redraw and with plain newlines.
 */
function cliOnTerminal(args: string[]): Promise<{ code: number | null; screen: string }> {
  const command = [process.execPath, join(REPO, "bin/kova.js"), ...args].map(shellQuote).join(" ");
  return new Promise((res) => {
    const env = { ...process.env, NATS_URL: tc.server.url, KOVA_CLUSTER: tc.cluster };
    const child = spawn("script", ["-qec", command, "/dev/null"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", (code) => res({ code, screen: stripVTControlCharacters(out).replaceAll("\r\n", "\n") }));
  });
}

/** Each run's tree lines in a screen or snapshot: the coordinator's line, then its subtasks'. */
function treeLines(text: string): string[] {
  return text.split("\n").filter((l) => /^planner {2}\S+ {2}/.test(l) || /^[├└]─ subtask-\d → /.test(l));
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

  it("cli - kova swarm run follows the run tree by default on a terminal, prints only the answer with --no-follow or when piped", async () => {
    const plan = JSON.stringify([
      { task: "left half", capability: "research" },
      { task: "right half", capability: "write" },
    ]);
    const args = (session: string) => ["swarm", "run", "Two halves", "--coordinator", "planner", "--session", session, "--plan", plan];

    // On a terminal, no flag: the tree is drawn (and redrawn in place) before the answer.
    const tty = await cliOnTerminal(args("s-tty"));
    expect(tty.code, tty.screen).toBe(0);
    const drawn = treeLines(tty.screen);
    expect(drawn.at(-3), tty.screen).toMatch(/^planner {2}\S+ {2}completed {2}\d+\.\ds {2}tokens \d+\/\d+$/);
    expect(drawn.slice(-2).sort()).toEqual([
      expect.stringMatching(/^[├└]─ subtask-\d → (r|w)-\d {2}\S+ {2}completed /),
      expect.stringMatching(/^[├└]─ subtask-\d → (r|w)-\d {2}\S+ {2}completed /),
    ]);
    expect(tty.screen).toMatch(/\nANSWER from 2 results\n/);

    // On a terminal with --no-follow: the answer and the usage line, no tree.
    const quiet = await cliOnTerminal([...args("s-tty-quiet"), "--no-follow"]);
    expect(quiet.code, quiet.screen).toBe(0);
    expect(treeLines(quiet.screen)).toEqual([]);
    expect(quiet.screen).toMatch(/^ANSWER from 2 results\nrun \S+ \(session s-tty-quiet\): \d+ in \/ \d+ out tokens\n$/);

    // Piped, no flag: stdout is the answer alone, for a script.
    const piped = await tc.cli(args("s-piped"));
    expect(piped.code, piped.stderr).toBe(0);
    expect(piped.stdout).toBe("ANSWER from 2 results\n");
  }, 60_000);

  it("swarm - SIGKILL of the coordinator's node mid-swarm: the takeover delegates nothing twice, accepts the results that arrived while it was down, and the answer arrives", async () => {
    // Let the earlier tests' agents finish first (the slow one's cancelled turn included), so
    // every agent starts free: the committed delegations stop changing.
    const before = await settledDelegations();
    plan = Array.from({ length: 9 }, (_, i) => ({ task: `item ${i}`, capability: i % 3 === 0 ? "write" : "research" }));
    const victim = await coordinatorNode();
    const victimAgents = [...(await tc.agents()).values()].filter((r) => r.node === victim && r.id !== "planner").map((r) => r.id);
    const planRequests = model.requests.filter(isPlanRequest).length;

    // The children's own model call decides when they finish. Those on the other nodes are
    // held until the coordinator's node is dead: they finish while it is down, so their
    // result_notify goes to a dead inbox and only the run's events carry them. Those on the
    // victim node answer after 3 s: still at work when it dies, they move and resume.
    let released = false;
    let release!: () => void;
    const releasedNow = new Promise<void>((r) => (release = r));
    const held = new Set<string>();
    const hold: ScriptedHandler = async (req) => {
      const agent = req.headers["x-kova-agent"] ?? "";
      if (!tc.agentIds.includes(agent)) return swarmHandler(req);
      if (victimAgents.includes(agent)) return scriptedReply.text("ok", { latencyMs: 3000 });
      if (released) return scriptedReply.text("ok");
      held.add(agent);
      await releasedNow;
      return scriptedReply.text(`held until the kill (${agent})`);
    };
    model.setHandler(hold);
    try {
      const answer = runSwarm(tc.bus, "planner", "Nine items", { sessionId: "s-kill" });
      // Mid-swarm: a child on another node has asked its model (and waits for it).
      await poll(() => held.size > 0, { timeoutMs: 15_000, what: "a child on another node at work" });
      tc.kill(victim);
      await tc.procs.get(victim)!.exited;
      const killedAt = performance.now();
      released = true;
      release();

      const result = await answer;
      expect(result.status).toBe("completed");
      expect(result.missing).toEqual([]);
      expect(result.output).toBe("ANSWER from 9 results");
      const taker = await coordinatorNode();
      expect(taker).not.toBe(victim);

      // The held children finished after the kill and before the coordinator's turn resumed
      // on the taker (actor_turn_taken_over is published as the taken-over turn begins).
      const takenOver = await poll(() => tc.events.find((e) => e.runId === "planner" && e.type === "actor_turn_taken_over" && e.at > killedAt), {
        timeoutMs: 10_000,
        what: "the coordinator's turn taken over",
      });
      expect((takenOver.data as { nodeId: string }).nodeId).toBe(taker);
      const session = tc.events.filter((e) => e.sessionId === "s-kill");
      const heldRuns = session.filter((e) => e.type === "run_started" && held.has((e.data as { agentId: string }).agentId)).map((e) => e.runId);
      const heldEnds = session.filter((e) => e.type === "run_completed" && heldRuns.includes(e.runId));
      expect(heldEnds).toHaveLength(held.size);
      for (const e of heldEnds) expect(e.at).toBeGreaterThan(killedAt);
      const meanwhile = heldEnds.filter((e) => e.at < takenOver.at);
      expect(meanwhile.length, "children that finished while the coordinator was down").toBeGreaterThan(0);
      // ...and the answer was written from them: the synthesis prompt (on the taker) has their outputs.
      const synthesis = model.requests.filter(isSynthesisRequest).at(-1)!;
      const prompt = String(synthesis.messages.at(-1)?.content ?? "");
      for (const agent of held) expect(prompt).toContain(`held until the kill (${agent})`);

      // Nothing delegated twice: every agent turn (counted by the agents themselves, on
      // every node) ran for a distinct message id, one per subtask; the takeover re-planned nothing.
      const after = await delegatedMessages(before.length + 9);
      const fresh = after.filter((m) => !before.includes(m));
      expect(fresh).toHaveLength(9);
      expect(new Set(fresh).size).toBe(9);
      // The killed node's agents had subtasks too: they moved and their runs finished elsewhere.
      const states = await counts();
      const movedWork = victimAgents.filter((id) => states.get(id)!.messages.some((m) => fresh.includes(m)));
      if (victimAgents.length > 0) expect(movedWork.length).toBeGreaterThan(0);
      const now = await tc.agents();
      for (const id of movedWork) expect(now.get(id)!.node).not.toBe(victim);
      expect(model.requests.filter(isPlanRequest).length - planRequests).toBe(1);
      const root = sessionEvents(tc, "s-kill").filter((e) => e.runId === result.runId);
      expect(root.filter((e) => e.type === "swarm_planned")).toHaveLength(1);
      expect(new Set(root.filter((e) => e.type === "child_run_linked").map((e) => (e.data as { childRunId: string }).childRunId)).size).toBe(9);
      process.stderr.write(
        `swarm sigkill: ${victim} killed; ${meanwhile.length} of ${held.size} held children finished ` +
          `${((takenOver.at - Math.max(...meanwhile.map((e) => e.at))) / 1000).toFixed(2)} s before the takeover on ${taker}\n`,
      );
    } finally {
      release();
      model.setHandler(swarmHandler);
    }
  }, 90_000);
});
