import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/**
 * A node restarted with pending turns keeps serving: each recovered turn runs on its own
 * actor while the node places and serves the rest (docs/cluster.md).
 */
let tc: TestCluster;

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["solo"], actors: 6, ackWaitMs: 3000, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await poll(
    async () => {
      const a = await tc.agents();
      return a.size === 6 && [...a.values()].every((r) => r.state === "Idle");
    },
    { timeoutMs: 30_000, what: "initial placement", everyMs: 100, retryErrors: true },
  );
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

async function started(id: string): Promise<void> {
  await poll(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === id), {
    timeoutMs: 10_000,
    what: `turn ${id} started`,
    everyMs: 100,
    retryErrors: true,
  });
}

describe("node restart with pending turns", () => {
  it("cluster - a restart with a 60 s pending step: the node's other actors answer within 10 s, and a second recovered turn finishes beside it", async () => {
    const [hung, short, ...others] = tc.actorIds as [string, string, ...string[]];
    const long = createEnvelope({ from: "tester", to: hung, type: "task_delegate", payload: { sleepMs: 60_000 } });
    const brief = createEnvelope({ from: "tester", to: short, type: "task_delegate", payload: { sleepMs: 2_000 } });
    // The long turn's record comes first in the WAL: recovery used to replay it first, alone.
    await tc.bus.send(long);
    await started(long.id);
    await tc.bus.send(brief);
    await started(brief.id);
    tc.kill("solo");
    await tc.procs.get("solo")!.exited;

    const t0 = performance.now();
    await tc.startNode("solo", 15_000);
    // Every other actor takes a new message and answers for it: hosted and serving.
    const fresh = new Map(others.map((a) => [a, createEnvelope({ from: "tester", to: a, type: "task_delegate", payload: {} })]));
    await Promise.all([...fresh.values()].map((env) => tc.bus.send(env)));
    await poll(
      async () => {
        const states = await Promise.all(others.map((a) => tc.info<ProbeState>(a)));
        return states.every((s, i) => s.ids.includes(fresh.get(others[i]!)!.id)) ? true : undefined;
      },
      { timeoutMs: 10_000, what: "the node's other actors serving after the restart", everyMs: 100, retryErrors: true },
    );
    const servingMs = performance.now() - t0;

    // The short recovered turn finished although the long one, recovered too, still runs.
    const s = await poll(
      async () => {
        const st = await tc.info<ProbeState>(short);
        return st.ids.includes(brief.id) ? st : undefined;
      },
      { timeoutMs: 10_000, what: "the second recovered turn finished", everyMs: 100, retryErrors: true },
    );
    expect(s.ids.filter((id) => id === brief.id)).toHaveLength(1);
    // The report moves an actor to `finished` once its start returns, a moment after the
    // recovered turn's state (read above) changed: read it once it has.
    const status = await poll(
      async () => {
        const st = await tc.status("solo");
        return st.recovery.finished.includes(short) ? st : undefined;
      },
      { timeoutMs: 5_000, what: "the recovery report to list the short turn finished", everyMs: 100, retryErrors: true },
    );
    expect(status.recovery.recovering).toEqual([hung]);
    expect(status.recovery.finished).toEqual([short]);
    console.info(`restart with a 60 s pending step: other actors served after ${Math.round(servingMs)} ms`);
    expect(servingMs).toBeLessThan(10_000);
  }, 90_000);
});
