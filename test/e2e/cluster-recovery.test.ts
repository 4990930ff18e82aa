import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile, writeFile } from "node:fs/promises";
import { createEnvelope } from "../../src/bus/index.js";
import { BusErrorCode } from "../../src/bus/errors.js";
import { isKovaError } from "../../src/core/errors.js";
import { waitForConsumer } from "../fixtures/bus/helpers.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

let tc: TestCluster;

beforeAll(async () => {
  // A drain long enough that the second SIGTERM of the graceful-stop test always lands while
  // the node still waits for its turn: with a 1 s drain, a slow machine could end the stop first.
  tc = await TestCluster.create({ nodes: ["solo"], actors: 2, ackWaitMs: 2000, drainTimeoutMs: 10_000, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await poll(
    async () => {
      const a = await tc.agents();
      return a.size === 2 && [...a.values()].every((r) => r.state === "Idle");
    },
    { timeoutMs: 20_000, what: "initial placement", everyMs: 100, retryErrors: true },
  );
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

describe("node restart after SIGKILL", () => {
  it("cluster - a node restarted after SIGKILL finishes the interrupted turn of an actor it still owns, once", async () => {
    const actor = "p-0";
    const first = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: {} });
    await tc.bus.send(first);
    await poll(async () => ((await tc.info<ProbeState>(actor)).count === 1 ? true : undefined), {
      timeoutMs: 5000,
      what: "first message",
      everyMs: 100,
      retryErrors: true,
    });
    const slow = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: { sleepMs: 1500 } });
    const slowSent = await tc.bus.send(slow);
    await poll(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === slow.id), {
      timeoutMs: 5000,
      what: "slow turn started",
      everyMs: 100,
      retryErrors: true,
    });
    tc.kill("solo");
    await tc.procs.get("solo")!.exited;

    await tc.startNode("solo");
    // The interrupted turn is finished in the background, on its own actor.
    const status = await poll(
      async () => {
        const st = await tc.status("solo");
        return st.recovery.recovering.length === 0 ? st : undefined;
      },
      { timeoutMs: 10_000, what: "recovery of the interrupted turn", everyMs: 100, retryErrors: true },
    );
    expect(status.recovery.finished).toEqual([actor]);
    expect(status.recovery.abandoned).toEqual([]);
    const state = await poll(
      async () => {
        const s = await tc.info<ProbeState>(actor);
        return s.count === 2 ? s : undefined;
      },
      { timeoutMs: 10_000, what: "interrupted turn finished", everyMs: 100, retryErrors: true },
    );
    expect(state.ids).toEqual([first.id, slow.id]);
    // the redelivered copy of the slow message must not start another turn: wait until the
    // server counts it acked by the restarted node, then look
    await waitForConsumer(tc.bus, actor, "to ack the slow message's redelivery", (ci) => ci.ack_floor.stream_seq >= slowSent.seq && ci.num_ack_pending === 0);
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
    await poll(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === long.id), {
      timeoutMs: 5000,
      what: "long turn started",
      everyMs: 100,
      retryErrors: true,
    });
    const proc = tc.procs.get("solo")!;
    proc.child.kill("SIGTERM");
    // the graceful stop is under way once the node no longer answers control requests
    await poll(
      () =>
        tc.status("solo", 500).then(
          () => false,
          (err: unknown) => isKovaError(err, BusErrorCode.NO_RESPONDERS),
        ),
      { timeoutMs: 3_000, what: "the node to stop answering status" },
    );
    proc.child.kill("SIGTERM");
    const exit = await proc.exited;
    // 130: cut short by the second signal. A graceful stop would have waited for the 4 s turn
    // (then exited 0) or for the 10 s drain.
    expect(exit.code).toBe(130);

    await tc.startNode("solo");
    const s = await poll(
      async () => {
        const st = await tc.info<ProbeState>(actor);
        return st.ids.includes(long.id) ? st : undefined;
      },
      { timeoutMs: 20_000, what: "cut turn finished after the restart", everyMs: 100, retryErrors: true },
    );
    expect(s.ids.filter((id) => id === long.id)).toHaveLength(1);
    expect(s.dupHandled).toBe(0);
  }, 60000);
  it("cluster - a second process started with a running node's id refuses to start, naming the node's pid, and the running node keeps its actors", async () => {
    const leasesBefore = await tc.leases();
    const config = (await readFile(tc.configPath("solo"), "utf8")).replace(/data_dir = "([^"]*)solo"/, 'data_dir = "$1solo-twin"');
    const path = tc.configPath("solo-twin");
    await writeFile(path, config);
    const twin = await tc.cli(["node", "start", "--config", path]);
    expect(twin.code, twin.stderr).toBe(1);
    expect(twin.stderr).toContain("node.id");
    expect(twin.stderr).toContain(`"solo" is in use by a running node`);
    expect(twin.stderr).toContain(`pid ${tc.procs.get("solo")!.child.pid}`);
    // Nothing of the running node's was touched: same leases (node and incarnation), still answering.
    expect(await tc.leases()).toEqual(leasesBefore);
    expect((await tc.status("solo")).nodeId).toBe("solo");
    const probe = createEnvelope({ from: "tester", to: "p-0", type: "task_delegate", payload: {} });
    await tc.bus.send(probe);
    await poll(async () => (await tc.info<ProbeState>("p-0")).ids.includes(probe.id), { timeoutMs: 10_000, what: "p-0 still served", retryErrors: true });
  }, 60000);
});
