import { describe, expect, it } from "vitest";
import { decodeEnvelope } from "../../src/bus/index.js";
import { silentLogger } from "../../src/core/logger.js";
import { parseSchedule } from "../../src/node/schedules/spec.js";
import { ScheduleService } from "../../src/node/schedules/service.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

describe("schedules on a node stalled by load", () => {
  it("schedules - a pass that comes 4 s late fires each of the three due ticks once, in order, as current ticks (none judged missed)", async () => {
    const cluster = uniqueCluster("sched");
    await using bus = await connectBus(nats.url, cluster);
    const sent: string[] = [];
    const sub = bus.nc.subscribe(bus.subjects.a2a("target"), {
      callback: (_e, m) => {
        sent.push(decodeEnvelope(m.data, m.headers).id);
      },
    });
    await using _sub = defer(() => sub.unsubscribe());
    const fired: Array<{ tick: number; missed: number }> = [];
    const skipped: number[] = [];
    // Passes are made by hand with a chosen `now`; the timer's own passes (real time, 1 s
    // apart, grace 5 s) find nothing due before the hand-made ones have run.
    const svc = await ScheduleService.start({
      nc: bus.nc,
      bus,
      cluster,
      replicas: 1,
      logger: silentLogger(),
      nodeId: "n1",
      checkMs: 1_000,
      onFired: (e) => fired.push({ tick: e.tick, missed: e.missed }),
      onSkipped: (e) => skipped.push(e.tick),
    });
    await using _svc = defer(() => svc.stop());
    await svc.upsert(parseSchedule({ id: "t", every: 2_000, to: "target", catch_up: "run_once" }, "s"), "api");
    const { anchor } = await poll(() => svc.list()[0], { timeoutMs: 5_000, what: "the schedule in the node's copy" });
    // The event loop was blocked from anchor + 1.9 s to anchor + 6.1 s.
    await svc.check(anchor + 6_100);
    const ticks = [anchor + 2_000, anchor + 4_000, anchor + 6_000];
    expect(fired).toEqual(ticks.map((tick) => ({ tick, missed: 0 })));
    expect(skipped).toEqual([]);
    await poll(() => sent.length >= 3, { timeoutMs: 5_000, what: "three messages on the wire" });
    expect(sent).toEqual(ticks.map((t) => `sched-t-${t}`));
    // Nothing left due at that time: a second pass sends nothing.
    await svc.check(anchor + 6_100);
    expect(fired).toHaveLength(3);
    // Stalled past the grace (5 s): the tick found 7.9 s late was missed, and run_once
    // sends one message for it; the tick 1.9 s old is current.
    await svc.check(anchor + 15_900);
    expect(fired.slice(3)).toEqual([
      { tick: anchor + 10_000, missed: 2 },
      { tick: anchor + 12_000, missed: 0 },
      { tick: anchor + 14_000, missed: 0 },
    ]);
  });

  it("schedules - a node that restarts while another runs leaves a tick due just before its start to the running node (so a rolling restart drops no tick)", async () => {
    const cluster = uniqueCluster("sched");
    await using bus = await connectBus(nats.url, cluster);
    const events: string[] = [];
    const start = (nodeId: string, checkMs: number) =>
      ScheduleService.start({
        nc: bus.nc,
        bus,
        cluster,
        replicas: 1,
        logger: silentLogger(),
        nodeId,
        checkMs,
        onFired: (e) => events.push(`${nodeId} fired ${e.id} ${e.tick} missed ${e.missed}`),
        onSkipped: (e) => events.push(`${nodeId} skipped ${e.id} ${e.tick} missed ${e.missed}`),
      });
    // Neither timer comes round in this test (passes by hand; the grace is then 3 × checkMs).
    const running = await start("running", 1_000_000);
    await using _running = defer(() => running.stop());
    await running.upsert(parseSchedule({ id: "t", every: 2_000, to: "target" }, "s"), "api");
    const { anchor } = await poll(() => running.list()[0], { timeoutMs: 5_000, what: "the schedule in the running node's copy" });
    const tick = anchor + 2_000;
    // The restarted node starts after the tick fell due, before anyone sent it.
    await new Promise((r) => setTimeout(r, tick + 100 - Date.now()));
    const restarted = await start("restarted", 1_000_000);
    await using _restarted = defer(() => restarted.stop());
    await poll(() => restarted.list()[0], { timeoutMs: 5_000, what: "the schedule in the restarted node's copy" });
    await restarted.check(tick + 1_000);
    expect(events).toEqual([]);
    await running.check(tick + 1_000);
    expect(events).toEqual([`running fired t ${tick} missed 0`]);
  });
});
