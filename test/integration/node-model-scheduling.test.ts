import { describe, expect, it } from "vitest";
import { ActorTypeRegistry } from "../../src/actors/index.js";
import type { SchedulePolicy } from "../../src/agents/model/index.js";
import { KovaClient } from "../../src/bus/index.js";
import { startModelCallLoad } from "../../src/testing/index.js";
import { inProcessNode } from "../fixtures/node/in-process-node.js";
import { poll } from "../fixtures/poll.js";

interface Done {
  id: string;
  user: string;
  at: number;
  deadline?: number;
}

/**
 * A node whose `job` template instances each make one call to a scripted model through the
 * node's scheduler, the way an agent's model step does: the user is the fair-share key,
 * the task's deadline the deadline policy's.
 */
async function schedulingRig(policy: SchedulePolicy, maxConcurrency: number, latencyMs: number) {
  const done: Done[] = [];
  const load = await startModelCallLoad({
    policy,
    maxConcurrency,
    latencyMs,
    onDone: (id, task) => done.push({ id, user: task.user!, at: performance.now(), ...(task.deadline ? { deadline: task.deadline } : {}) }),
  });
  const rig = await inProcessNode({
    types: new ActorTypeRegistry([load.actor]),
    templates: [{ name: "job", type: "job", idleAfterMs: 0 }],
    modelScheduler: load.scheduler,
    cluster: ["max_actors_per_node = 1000"],
  });
  const client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
  return {
    rig,
    client,
    done,
    queued: () => load.scheduler.stats()[0]?.queued ?? 0,
    [Symbol.asyncDispose]: async () => {
      await client.close();
      await rig[Symbol.asyncDispose]();
      await load[Symbol.asyncDispose]();
    },
  };
}

/** One task to each of `count` instances (user "warm"), so they are active before the test's burst. */
async function warmUp(r: { client: KovaClient; done: Done[] }, prefix: string, count: number): Promise<void> {
  await Promise.all(Array.from({ length: count }, (_, i) => r.client.send(`${prefix}-${i}`, "task_delegate", { user: "warm" })));
  await poll(() => r.done.filter((d) => d.user === "warm").length === count, { timeoutMs: 30_000, what: "the warm-up tasks" });
  r.done.length = 0;
}

describe("model-call scheduling on a node", () => {
  it("fair share - one user's 200 tasks do not starve another's 5: they finish while most of the first user's queue still waits", async () => {
    await using r = await schedulingRig("fair_share", 4, 100);
    // Bob's instances are active before the backlog, so his tasks reach the scheduler as fast
    // as a mailbox delivers them however loaded the machine is: what is measured is the
    // scheduler's order, not how fast this machine activates five actors.
    await warmUp(r, "job--b", 5);
    await Promise.all(Array.from({ length: 200 }, (_, i) => r.client.send(`job--a-${i}`, "task_delegate", { user: "alice" })));
    // Alice's backlog is in the scheduler's queue before Bob sends anything.
    await poll(() => r.queued() >= 60, { timeoutMs: 30_000, what: () => `alice's calls queued (queued ${r.queued()}, done ${r.done.length})` });
    await Promise.all(Array.from({ length: 5 }, (_, i) => r.client.send(`job--b-${i}`, "task_delegate", { user: "bob" })));
    await poll(() => r.done.filter((d) => d.user === "bob").length === 5, { timeoutMs: 30_000, what: "bob's five tasks" });
    const aliceDoneWhenBobFinished = r.done.filter((d) => d.user === "alice").length;
    const aliceQueuedWhenBobFinished = r.queued();
    await poll(() => r.done.length === 205, { timeoutMs: 120_000, what: () => `all 205 tasks (done ${r.done.length})` });
    // Bob's five went ahead of alice's queue: it still held calls when his last one was done.
    expect(aliceDoneWhenBobFinished).toBeLessThan(200);
    expect(aliceQueuedWhenBobFinished).toBeGreaterThan(0);
    // The queues were visible in the node's status while they ran, and are empty now.
    const lane = r.rig.node.status().models.find((m) => m.model === "fast");
    expect(lane).toMatchObject({ policy: "fair_share", maxConcurrency: 4, queued: 0, granted: 210 });
    expect(lane!.classes.default!.waitMs.max).toBeGreaterThan(1000);
  });

  it("deadline - calls with a deadline go before a backlog without one and meet it", async () => {
    // 2 × 500 ms calls: the 40-call backlog takes 10 s, so the urgent calls' lead does not
    // depend on how fast this machine is; their instances are active beforehand.
    await using r = await schedulingRig("deadline", 2, 500);
    await warmUp(r, "job--d", 4);
    await Promise.all(Array.from({ length: 40 }, (_, i) => r.client.send(`job--n-${i}`, "task_delegate", { user: "batch" })));
    await poll(() => r.queued() >= 20, { timeoutMs: 30_000, what: () => `the backlog queued (queued ${r.queued()}, done ${r.done.length})` });
    const deadline = Date.now() + 8000;
    await Promise.all(Array.from({ length: 4 }, (_, i) => r.client.send(`job--d-${i}`, "task_delegate", { user: "urgent", deadline })));
    await poll(() => r.done.filter((d) => d.user === "urgent").length === 4, { timeoutMs: 30_000, what: "the four urgent tasks" });
    const wallDone = Date.now();
    const backlogLeft = 40 - r.done.filter((d) => d.user === "batch").length;
    expect(wallDone).toBeLessThanOrEqual(deadline);
    expect(backlogLeft).toBeGreaterThanOrEqual(10);
    const classes = r.rig.node.status().models[0]!.classes;
    expect(classes.deadline!.granted).toBe(4);
    expect(classes.no_deadline!.queued).toBeGreaterThan(0);
    await poll(() => r.done.length === 44, { timeoutMs: 60_000, what: () => `all 44 tasks (done ${r.done.length})` });
  });
});
