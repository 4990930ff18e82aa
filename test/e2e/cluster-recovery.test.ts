import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster, waitUntil, type ProbeState } from "../fixtures/node/cluster-harness.js";

let tc: TestCluster;

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["solo"], actors: 2, ackWaitMs: 2000, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await waitUntil(async () => {
    const a = await tc.agents();
    return a.size === 2 && [...a.values()].every((r) => r.state === "Idle");
  }, 20_000, "initial placement");
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

describe("node restart after SIGKILL", () => {
  it("cluster - a node restarted after SIGKILL finishes the interrupted turn of an actor it still owns, once", async () => {
    const actor = "p-0";
    const first = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: {} });
    await tc.bus.send(first);
    await waitUntil(async () => ((await tc.info<ProbeState>(actor)).count === 1 ? true : undefined), 5000, "first message");
    const slow = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: { sleepMs: 1500 } });
    await tc.bus.send(slow);
    await waitUntil(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === slow.id), 5000, "slow turn started");
    tc.kill("solo");
    await tc.procs.get("solo")!.exited;

    await tc.startNode("solo");
    const status = await tc.status("solo");
    expect(status.recovery.finished).toEqual([actor]);
    expect(status.recovery.abandoned).toEqual([]);
    const state = await waitUntil(async () => {
      const s = await tc.info<ProbeState>(actor);
      return s.count === 2 ? s : undefined;
    }, 10_000, "interrupted turn finished");
    expect(state.ids).toEqual([first.id, slow.id]);
    // the redelivered copy of the slow message (ack_wait 2 s) must not start another turn
    await new Promise((r) => setTimeout(r, 2500));
    const after = await tc.info<ProbeState>(actor);
    expect(after.ids).toEqual([first.id, slow.id]);
    expect(after.dupHandled).toBe(0);
    const rec = (await tc.agents()).get(actor);
    expect(rec?.node).toBe("solo");
    expect(rec?.state).toBe("Idle");
  }, 60000);

  it("cluster - a second SIGTERM during a graceful stop exits at once; the restarted node finishes the cut turn", async () => {
    const actor = "p-1";
    const long = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: { sleepMs: 4000 } });
    await tc.bus.send(long);
    await waitUntil(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === long.id), 5000, "long turn started");
    const proc = tc.procs.get("solo")!;
    const t0 = performance.now();
    proc.child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 100));
    proc.child.kill("SIGTERM");
    const exit = await proc.exited;
    expect(exit.code).toBe(130);
    expect(performance.now() - t0).toBeLessThan(1500);

    await tc.startNode("solo");
    const s = await waitUntil(async () => {
      const st = await tc.info<ProbeState>(actor);
      return st.ids.includes(long.id) ? st : undefined;
    }, 20_000, "cut turn finished after the restart");
    expect(s.ids.filter((id) => id === long.id)).toHaveLength(1);
    expect(s.dupHandled).toBe(0);
  }, 60000);
});
