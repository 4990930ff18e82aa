import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeEnvelope } from "../../src/bus/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

// Two schedules on three node processes: "tick" (skip) to p-0 and "once" (run_once) to
// p-1, both every 2 s. Every publish to the targets' inboxes is recorded from a core
// subscription, so a tick sent twice would show even though the stream dedupes it.
const EVERY = 2000;
let tc: TestCluster;
const sent = new Map<string, number[]>(); // target -> ticks of each publish, in order

function ticks(target: string): number[] {
  return sent.get(target) ?? [];
}

beforeAll(async () => {
  tc = await TestCluster.create({
    nodes: ["s1", "s2", "s3"],
    actors: 2,
    logLevel: "warn",
    extraToml: [
      `[[schedules]]`,
      `id = "tick"`,
      `every = ${EVERY}`,
      `to = "p-0"`,
      `[[schedules]]`,
      `id = "once"`,
      `every = ${EVERY}`,
      `to = "p-1"`,
      `catch_up = "run_once"`,
    ].join("\n"),
  });
  for (const target of ["p-0", "p-1"]) {
    tc.nc.subscribe(tc.bus.subjects.a2a(target), {
      callback: (_err, msg) => {
        const env = decodeEnvelope(msg.data, msg.headers);
        const m = /^sched-(?:tick|once)-(\d+)$/.exec(env.id);
        if (m) sent.set(target, [...ticks(target), Number(m[1])]);
      },
    });
  }
}, 90_000);
afterAll(async () => {
  await tc?.stop();
});

/** Consecutive interval ticks, each published once. */
function expectEveryTickOnce(list: number[]): void {
  expect(new Set(list).size, `a tick was published twice: ${list.join(",")}`).toBe(list.length);
  const sorted = [...list].sort((a, b) => a - b);
  for (let i = 1; i < sorted.length; i++) expect(sorted[i]! - sorted[i - 1]!, `gap between ticks: ${sorted.join(",")}`).toBe(EVERY);
}

describe("schedules across three node processes", () => {
  it("schedules - each tick fires once with three nodes up, and keeps doing so across a SIGKILL of one node", async () => {
    await poll(() => ticks("p-0").length >= 4, { timeoutMs: 30_000, what: () => `4 ticks (have ${ticks("p-0").length})` });
    expectEveryTickOnce(ticks("p-0"));
    const before = ticks("p-0").length;
    tc.kill("s1");
    await tc.procs.get("s1")!.exited;
    // A claim s1 held when it died is sent by a peer after the reclaim wait (5 s).
    await poll(() => ticks("p-0").length >= before + 6, {
      timeoutMs: 40_000,
      what: () => `6 more ticks after the kill (have ${ticks("p-0").length - before})`,
    });
    expectEveryTickOnce(ticks("p-0"));
    expectEveryTickOnce(ticks("p-1"));
    // What was sent was stored and handled once per tick.
    const handled = await poll(
      async () => {
        const s = await tc.info("p-0");
        return s.count >= ticks("p-0").length ? s : undefined;
      },
      { timeoutMs: 20_000, retryErrors: true, what: "p-0 handled every tick" },
    );
    expect(handled.dupHandled).toBe(0);
  }, 120_000);

  it("schedules - after every node was down, skip sends nothing for the missed ticks and run_once sends one", async () => {
    // Every node down (s1 already is after the test above; killed here too when this test runs alone).
    for (const id of ["s1", "s2", "s3"]) tc.kill(id);
    await Promise.all(["s1", "s2", "s3"].map((id) => tc.procs.get(id)!.exited));
    const lastSkip = Math.max(...ticks("p-0"));
    const downAt = Date.now();
    // Down for at least three intervals: several ticks of each schedule go unwatched.
    await new Promise((r) => setTimeout(r, 3.5 * EVERY));
    const upAt = Date.now();
    await Promise.all(["s1", "s2", "s3"].map((id) => tc.startNode(id)));
    // The restarted nodes judge the outage once per schedule, as an event.
    const judged = (type: string, id: string) => tc.events.filter((e) => e.type === type && e.runId === id && e.ts > upAt);
    await poll(() => judged("schedule_skipped", "tick").length > 0 && judged("schedule_fired", "once").some((e) => (e.data as { missed: number }).missed > 0), {
      timeoutMs: 30_000,
      what: "the outage judged for both schedules",
    });
    await poll(() => ticks("p-0").some((t) => t > upAt) && ticks("p-1").filter((t) => t > downAt).length >= 2, {
      timeoutMs: 30_000,
      what: "ticks after the restart",
    });
    // skip: the missed ticks (three or more) pass without a message, and nothing is sent for
    // any tick that fell due while no node ran.
    expect((judged("schedule_skipped", "tick")[0]!.data as { missed: number }).missed).toBeGreaterThanOrEqual(2);
    expect(ticks("p-0").filter((t) => t > lastSkip && t > downAt + EVERY && t <= upAt)).toEqual([]);
    expect(judged("schedule_fired", "tick").every((e) => (e.data as { missed: number }).missed === 0)).toBe(true);
    // run_once: exactly one message stands for the whole outage, then ticks go on.
    const catchUps = judged("schedule_fired", "once").filter((e) => (e.data as { missed: number }).missed > 0);
    expect(catchUps).toHaveLength(1);
    // (A tick a dying node had claimed before downAt is sent late by a peer: it is not part
    // of the outage, so only ticks that fell due after every node was gone are counted.)
    const afterOutage = ticks("p-1")
      .filter((t) => t > downAt)
      .sort((a, b) => a - b);
    expect(afterOutage[0]).toBe((catchUps[0]!.data as { tick: number }).tick);
    expect(afterOutage[0]! - downAt).toBeGreaterThanOrEqual(EVERY);
    expectEveryTickOnce(ticks("p-0").filter((t) => t > upAt));
    expectEveryTickOnce(afterOutage);
  }, 120_000);

  it("schedules - kova schedules add/ls/rm through any node; ls shows the next fire times", async () => {
    let r = await tc.cli(["schedules", "add", "hourly", "--cron", "0 * * * *", "--tz", "Europe/Berlin", "--to", "p-0", "--input", "report"]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain("added schedule hourly");
    r = await tc.cli(["schedules", "ls", "--json"]);
    const list = JSON.parse(r.stdout) as Array<{ spec: { id: string; tz?: string }; next: number[] }>;
    const hourly = list.find((s) => s.spec.id === "hourly")!;
    expect(hourly.spec.tz).toBe("Europe/Berlin");
    expect(hourly.next).toHaveLength(3);
    expect(hourly.next[1]! - hourly.next[0]!).toBe(3_600_000);
    expect(list.map((s) => s.spec.id).sort()).toEqual(["hourly", "once", "tick"]);
    r = await tc.cli(["schedules", "rm", "hourly"]);
    expect(r.stdout).toContain("removed schedule hourly");
    r = await tc.cli(["schedules", "rm", "hourly"]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("no schedule hourly");
    r = await tc.cli(["schedules", "add", "bad", "--cron", "not a cron", "--to", "p-0"]);
    expect(r.stderr).toMatch(/schedule\.cron/);
  }, 60_000);
});
