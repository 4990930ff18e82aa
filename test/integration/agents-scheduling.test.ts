import { describe, expect, it } from "vitest";
import { askAgent, type AgentResult, type TaskConstraints } from "../../src/agents/index.js";
import type { ModelSlotStats, SchedulePolicy } from "../../src/agents/model/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedModelServer } from "../../src/testing/index.js";
import { startAgentNode, type AgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { requestMany } from "../fixtures/deploy/micro-responses.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

/**
 * Model-call scheduling through real agents (KovaNode in process, agent templates from TOML,
 * the scripted model over HTTP): each task is one agent run making one model call, so the
 * order the scripted server sees requests in is the order the node's scheduler granted slots.
 * Every instance is activated before the load, so activation time does not blur the order.
 */
async function schedulingNode(model: ScriptedModelServer, policy: SchedulePolicy, maxConcurrency: number, templates: string[]): Promise<AgentNode> {
  const toml = [
    `[models.main]`,
    `base_url = "${model.url}"`,
    `model = "scripted"`,
    `max_concurrency = ${maxConcurrency}`,
    `scheduling = "${policy}"`,
    ...templates,
  ].join("\n");
  return startAgentNode(nats.url, uniqueCluster("asch"), { toml });
}

function template(name: string, extra: string[] = []): string[] {
  return [`[[agent_templates]]`, `name = "${name}"`, `model = "main"`, `idle_after = 0`, ...extra];
}

async function activate(rig: AgentNode, ids: string[]): Promise<void> {
  await Promise.all(ids.map((id) => rig.client.activate(id)));
  await poll(
    () => {
      const hosted = new Set(rig.node.agents().map((a) => a.id));
      return ids.every((id) => hosted.has(id));
    },
    { timeoutMs: 60_000, what: () => `${ids.length} instances hosted (have ${rig.node.agents().length})` },
  );
}

/** Sends one task per id and records when each result came back. */
function askAll(rig: AgentNode, ids: string[], constraints?: TaskConstraints) {
  return Promise.all(
    ids.map(async (id) => {
      const result: AgentResult = await askAgent(rig.client, id, "go", { timeoutMs: 120_000, ...(constraints ? { constraints } : {}) });
      return { id, result, at: performance.now() };
    }),
  );
}

const lane = (rig: AgentNode) => rig.node.modelScheduler.stats().find((m) => m.model === "main")!;
const range = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
/** The agent of each model request, in arrival order. */
const requestAgents = (model: ScriptedModelServer) => model.requests.map((r) => r.headers["x-kova-agent"] ?? "?");

/** Resolves once a `schedule_blocked` event was seen for every one of `ids` (their calls are queued). */
function queuedCalls(rig: AgentNode, ids: string[]) {
  const blocked = () => rig.events.filter((e) => e.type === "schedule_blocked" && ids.includes((e.data as { agentId: string }).agentId));
  return poll(() => blocked().length >= ids.length && blocked(), {
    timeoutMs: 60_000,
    what: () => `${ids.length} calls queued (have ${blocked().length}; scheduler ${JSON.stringify(lane(rig))})`,
  });
}

/** `$SRV.STATS` of this cluster's node, as `nats micro stats kova-node` reads it. */
async function srvStats(rig: AgentNode): Promise<ModelSlotStats> {
  const replies = await requestMany(rig.client.nc, "$SRV.STATS.kova-node", 10, 1_000);
  const mine = replies.find((r) => r.metadata?.cluster === rig.cluster);
  expect(mine, "this cluster's node answered $SRV.STATS").toBeDefined();
  const status = (mine.endpoints as Array<{ name: string; data?: { models: ModelSlotStats[] } }>).find((e) => e.name === "status")!;
  return status.data!.models.find((m) => m.model === "main")!;
}

describe("model-call scheduling through real agents", () => {
  it("priority - under scheduling = \"priority\" and max_concurrency = 1, queued calls go highest first: a task's constraints.priority over its agent's priority over the default; $SRV.STATS shows the queue and the wait per class", async () => {
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("ok"), latencyMs: 100 });
    await using rig = await schedulingNode(model, "priority", 1, [...template("bulk", ["priority = 1"]), ...template("vip", ["priority = 5"])]);
    const backlog = range("bulk--", 30);
    const vip = range("vip--", 3);
    const urgent = range("bulk--hi-", 3);
    const demoted = ["vip--low"];
    await activate(rig, [...backlog, ...vip, ...urgent, ...demoted]);
    const expected = (id: string) => (urgent.includes(id) ? 9 : vip.includes(id) ? 5 : demoted.includes(id) ? 0 : 1);

    const backlogDone = askAll(rig, backlog);
    await poll(() => lane(rig).queued >= 20, { timeoutMs: 60_000, what: () => `the backlog queued (${JSON.stringify(lane(rig))})` });
    const late = Promise.all([askAll(rig, vip), askAll(rig, urgent, { priority: 9 }), askAll(rig, demoted, { priority: 0 })]);
    const blocked = await queuedCalls(rig, [...vip, ...urgent, ...demoted]);
    const mark = model.requests.length;
    // Each call waits in its priority's class.
    for (const e of blocked) {
      const d = e.data as { agentId: string; statsClass: string; policy: string };
      expect(d).toMatchObject({ policy: "priority", statsClass: `priority_${expected(d.agentId)}` });
    }
    // The node's stats while they wait: per class, what is queued.
    const during = await srvStats(rig);
    expect(during).toMatchObject({ policy: "priority", maxConcurrency: 1, inFlight: 1 });
    expect(during.classes.priority_0!.queued).toBe(1);
    expect(during.classes.priority_1!.queued).toBeGreaterThanOrEqual(10);
    expect(Object.values(during.classes).reduce((n, c) => n + c.queued, 0)).toBe(during.queued);

    const results = [...(await backlogDone), ...(await late).flat()];
    expect(results.map((r) => r.result.status)).toEqual(results.map(() => "completed"));
    // From the moment all of them waited, every grant went to the highest priority waiting.
    const after = requestAgents(model).slice(mark).map(expected);
    expect(after.filter((p) => p === 1).length, "backlog calls still waited after the late ones queued").toBeGreaterThanOrEqual(5);
    expect(after).toEqual([...after].sort((a, b) => b - a));
    const end = await srvStats(rig);
    expect(end.queued).toBe(0);
    expect(end.classes).toMatchObject({
      priority_9: { queued: 0, granted: 3 },
      priority_5: { queued: 0, granted: 3 },
      priority_1: { queued: 0, granted: 30 },
      priority_0: { queued: 0, granted: 1 },
    });
    // The demoted call waited behind the whole backlog; the urgent ones behind at most the call in flight and each other.
    expect(end.classes.priority_0!.waitMs.max).toBeGreaterThan(end.classes.priority_9!.waitMs.max + 500);
  }, 180_000);

  it("fair share - one user's 200 tasks (constraints.user) do not starve another's 5: the second user's calls are served in turn with the first's backlog, and finish long before it drains", async () => {
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("ok"), latencyMs: 100 });
    await using rig = await schedulingNode(model, "fair_share", 4, template("job"));
    const alice = range("job--a-", 200);
    const bob = range("job--b-", 5);
    await activate(rig, [...alice, ...bob]);

    const aliceDone = askAll(rig, alice, { user: "alice" });
    await poll(() => lane(rig).queued >= 100, { timeoutMs: 60_000, what: () => `alice's calls queued (${JSON.stringify(lane(rig))})` });
    const bobDone = askAll(rig, bob, { user: "bob" });
    await queuedCalls(rig, bob);
    const mark = model.requests.length;
    const bobResults = await bobDone;
    const aliceResults = await aliceDone;
    expect([...aliceResults, ...bobResults].every((r) => r.result.status === "completed")).toBe(true);

    // After bob's calls queued, the scheduler alternated between the two users: at most one
    // of alice's calls (plus one for arrival jitter) went between two of bob's.
    const after = requestAgents(model).slice(mark);
    const bobLastIndex = Math.max(...bob.map((id) => after.indexOf(id)));
    const aliceBefore = after.slice(0, bobLastIndex + 1).filter((id) => id.startsWith("job--a-")).length;
    expect(aliceBefore).toBeLessThanOrEqual(6);
    expect(after.length - bobLastIndex - 1, "alice's queue was still long when bob was done").toBeGreaterThanOrEqual(50);
    const bobLast = Math.max(...bobResults.map((r) => r.at));
    const aliceLast = Math.max(...aliceResults.map((r) => r.at));
    expect(aliceLast - bobLast).toBeGreaterThan(1000);
    expect(lane(rig)).toMatchObject({ policy: "fair_share", queued: 0, granted: 205 });
  }, 180_000);

  it("deadline - tasks with constraints.deadline go before a backlog without one, and meet it", async () => {
    await using model = await startScriptedModelServer({ handler: () => scriptedReply.text("ok"), latencyMs: 100 });
    await using rig = await schedulingNode(model, "deadline", 2, template("job"));
    const backlog = range("job--n-", 40);
    const urgent = range("job--d-", 4);
    await activate(rig, [...backlog, ...urgent]);

    const backlogDone = askAll(rig, backlog);
    await poll(() => lane(rig).queued >= 25, { timeoutMs: 60_000, what: () => `the backlog queued (${JSON.stringify(lane(rig))})` });
    const sentAt = performance.now();
    const urgentDone = askAll(rig, urgent, { deadline: "10s" });
    const blocked = await queuedCalls(rig, urgent);
    expect(blocked.every((e) => (e.data as { statsClass: string }).statsClass === "deadline")).toBe(true);
    const mark = model.requests.length;
    const urgentResults = await urgentDone;
    const backlogResults = await backlogDone;
    // A run past its deadline fails RUN_LIMIT_EXCEEDED: completed means in time.
    expect(urgentResults.map((r) => r.result.status)).toEqual(["completed", "completed", "completed", "completed"]);
    expect(Math.max(...urgentResults.map((r) => r.at)) - sentAt).toBeLessThan(10_000);
    expect(backlogResults.every((r) => r.result.status === "completed")).toBe(true);
    // Once they waited, no call without a deadline was granted before the last of them.
    const after = requestAgents(model).slice(mark);
    const lastUrgent = Math.max(...urgent.map((id) => after.indexOf(id)));
    expect(after.slice(0, lastUrgent + 1).filter((id) => backlog.includes(id))).toEqual([]);
    expect(after.length - lastUrgent - 1, "backlog calls still waited after the urgent ones").toBeGreaterThanOrEqual(10);
    const classes = lane(rig).classes;
    expect(classes.deadline!.granted).toBe(4);
    expect(classes.no_deadline!.granted).toBe(40);
  }, 180_000);
});
