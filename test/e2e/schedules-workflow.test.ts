import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import { TEST_AGENTS_MODULE, WORKFLOW_FIXTURES, type AgentCounts } from "../fixtures/workflow/rig.js";

// A workflow schedule on three node processes: every 2 s one run of scheduled.toml (one
// agent step to `researcher`, a test agent that records every task it handles).
const EVERY = 2000;
const WORKFLOW = join(WORKFLOW_FIXTURES, "scheduled.toml");
const RUN = /^sched-digest-(\d+)$/;

interface Fired {
  tick: number;
  runId?: string;
  node: string;
}

function fired(tc: TestCluster, schedule: string): Fired[] {
  return tc.events.filter((e) => e.type === "schedule_fired" && e.runId === schedule).map((e) => e.data as Fired);
}

/** Distinct fired ticks, in order (a tick reclaimed from a dead node may be reported twice). */
function ticks(tc: TestCluster, schedule: string): number[] {
  return [...new Set(fired(tc, schedule).map((f) => f.tick))].sort((a, b) => a - b);
}

function completedRuns(tc: TestCluster): Set<string> {
  return new Set(tc.events.filter((e) => e.type === "run_completed" && RUN.test(e.runId)).map((e) => e.runId));
}

// Spawns node processes from dist/: run `npm run build` first.
describe("workflow schedules across three node processes", () => {
  it("schedules - a workflow schedule starts exactly one run per tick with three nodes up and across a SIGKILL of the node that fired last; kova schedules add --workflow starts runs too", async () => {
    await using tc = await TestCluster.create({
      nodes: ["w1", "w2", "w3"],
      modules: [TEST_AGENTS_MODULE],
      logLevel: "warn",
      extraToml: [
        `[[actors]]`,
        `id = "researcher"`,
        `type = "wf-agent"`,
        `[[schedules]]`,
        `id = "digest"`,
        `every = ${EVERY}`,
        `workflow = ${JSON.stringify(WORKFLOW)}`,
        `input = { topic = "nats" }`,
      ].join("\n"),
    });
    await poll(() => completedRuns(tc).size >= 3, { timeoutMs: 40_000, what: () => `3 scheduled runs completed (fired ${ticks(tc, "digest").length})` });
    // Kill the node that fired the latest tick: the next claim may well be its own.
    const victim = fired(tc, "digest").at(-1)!.node;
    const before = ticks(tc, "digest").length;
    tc.kill(victim);
    await tc.procs.get(victim)!.exited;
    // A claim the victim held when it died is sent by a peer after the reclaim wait (5 s).
    await poll(() => ticks(tc, "digest").length >= before + 5, {
      timeoutMs: 60_000,
      what: () => `5 more ticks after the kill (have ${ticks(tc, "digest").length - before})`,
    });

    // Up to the newest tick reported fired: every tick has its run, and there is no other.
    const all = ticks(tc, "digest");
    const newest = all.at(-1)!;
    for (let i = 1; i < all.length; i++) expect(all[i]! - all[i - 1]!, `ticks: ${all.join(",")}`).toBe(EVERY);
    expect(fired(tc, "digest").every((f) => f.runId === `sched-digest-${f.tick}`)).toBe(true);
    const expected = all.map((t) => `sched-digest-${t}`);
    const registered = [...(await tc.agents()).keys()].filter((id) => RUN.test(id) && Number(RUN.exec(id)![1]) <= newest).sort();
    expect(registered).toEqual([...expected].sort());
    // Each run ran its one step once: one task per run reached the agent, none twice.
    await poll(() => expected.every((r) => completedRuns(tc).has(r)), {
      timeoutMs: 40_000,
      what: () => `every fired tick's run completed (missing ${expected.filter((r) => !completedRuns(tc).has(r)).join(", ")})`,
    });
    const counts = await poll(() => tc.bus.request<AgentCounts>("researcher", "info_request", {}, { timeoutMs: 1000 }), {
      timeoutMs: 20_000,
      retryErrors: true,
      what: "researcher's counts",
    });
    const tasks = counts.ids.filter((id) => expected.some((r) => id.startsWith(`${r}-`)));
    expect(new Set(tasks).size).toBe(tasks.length);
    expect(tasks.map((id) => id.slice(0, id.lastIndexOf("-t"))).sort()).toEqual([...expected].sort());

    // The CLI form: the file is read by the CLI and stored with the schedule.
    const add = await tc.cli(["schedules", "add", "cli", "--every", "1s", "--workflow", WORKFLOW, "--input", "topic=cli"]);
    expect(add.stderr).toBe("");
    const ls = JSON.parse((await tc.cli(["schedules", "ls", "--json"])).stdout) as Array<{ spec: { id: string; workflow?: { id: string; input: unknown } } }>;
    expect(ls.find((s) => s.spec.id === "cli")?.spec.workflow).toMatchObject({ id: "digest", input: { topic: "cli" } });
    const cliRun = await poll(() => fired(tc, "cli")[0]?.runId, { timeoutMs: 20_000, what: "a tick of the cli schedule" });
    await poll(() => tc.events.some((e) => e.type === "run_completed" && e.runId === cliRun), { timeoutMs: 30_000, what: `run ${cliRun} completed` });
    expect((await tc.cli(["schedules", "rm", "cli"])).code).toBe(0);
  }, 180_000);
});
