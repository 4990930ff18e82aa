import { describe, expect, it } from "vitest";
import {
  defineExperiment,
  evalStore,
  experimentActorId,
  followExperiment,
  readReport,
  runExperiment,
  startExperiment,
  type AttemptRecord,
} from "../../src/eval/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/** Answers by subject (its system prompt) and task: the same every time, so two runs can be compared cell by cell. */
function answer(req: ScriptedRequest) {
  const i = Number(/^q(\d+):/.exec(String(req.messages.at(-1)?.content))?.[1] ?? -1);
  const system = String(req.messages.find((m) => m.role === "system")?.content ?? "");
  const right = system === "You are A." || i < 12;
  return scriptedReply.text(String(right ? 2 * i : 2 * i + 1), { usage: { inputTokens: 10, outputTokens: 2 }, latencyMs: 150 });
}

const spec = defineExperiment({
  experiment: { name: "durable", repetitions: 3, concurrency: 8, per_subject: 4 },
  subjects: [
    { id: "a", agent: "helper" },
    { id: "b", agent: "helper", system: "You are B." },
  ],
  tasks: Array.from({ length: 20 }, (_, i) => ({ id: `t${i}`, input: `q${i}: what is ${i} + ${i}?`, expected: String(2 * i) })),
  verifiers: [{ type: "exact" }],
});

const cellKey = (r: AttemptRecord) => `${r.subject}/${r.task}/${r.repetition}`;

// Spawns node processes from dist/: run `npm run build` first.
describe("experiments across node processes", () => {
  it("eval - SIGKILL of the node hosting an experiment mid-run: every cell is done once (one attempt, no model request repeated but the one in flight) and the results equal an uninterrupted run's", async () => {
    await using model = await startScriptedModelServer({ handler: answer });
    const toml = [
      `[models.main]`,
      `base_url = "${model.url}"`,
      `model = "gpt-4o-mini"`,
      `max_concurrency = 16`,
      `[[agents]]`,
      `id = "helper"`,
      `model = "main"`,
      `system = "You are A."`,
    ].join("\n");
    await using tc = await TestCluster.create({ nodes: ["n1", "n2", "n3"], extraToml: toml, logLevel: "warn" });

    const calm = await runExperiment(tc.bus, spec);
    expect(calm.status).toBe("completed");
    const calmRecords = await (await evalStore(tc.bus)).attempts(calm.experimentId);
    expect(calmRecords).toHaveLength(120);
    // the cells ran across the nodes: the subjects' 8 runner instances are placed by rendezvous
    // hashing over the 3 nodes (all on one node has odds of 3 in 3^8, 1 in 2,187)
    expect(new Set(calmRecords.map((r) => r.node)).size).toBeGreaterThan(1);

    const { experimentId } = await startExperiment(tc.bus, spec);
    const attempts = () => tc.events.filter((e) => e.runId === experimentId && e.type === "eval_attempt").length;
    await poll(() => attempts() >= 30, { timeoutMs: 60_000, what: () => `30 cells of ${experimentId} to finish (${attempts()} so far)` });
    const victim = await tc.hostOf(experimentActorId(experimentId));
    tc.kill(victim);
    const killedAt = Date.now();
    const killedAtPerf = performance.now();
    const doneAtKill = attempts();

    for await (const _ of followExperiment(tc.bus, experimentId, { round: 1 })) void _;
    const report = await readReport(tc.bus, experimentId);
    expect(report.status).toBe("completed");
    const records = await (await evalStore(tc.bus)).attempts(experimentId);
    // every cell done once: one attempt each, none replaced, none repeated
    expect(records).toHaveLength(120);
    expect(records.every((r) => r.attempt === 1 && r.valid)).toBe(true);
    expect(new Set(records.map(cellKey)).size).toBe(120);
    // identical results, cell by cell, and the same report
    const byCell = (rs: AttemptRecord[]) => Object.fromEntries(rs.map((r) => [cellKey(r), `${r.score}:${r.pass}:${r.output}`]));
    expect(byCell(records)).toEqual(byCell(calmRecords));
    expect(report.subjects.map((s) => [s.subject, s.meanScore, s.passRate, s.passAtK])).toEqual(
      calm.subjects.map((s) => [s.subject, s.meanScore, s.passRate, s.passAtK]),
    );
    // model requests per cell: one, except a call whose run was under way on the killed node: its
    // agent's turn, resumed elsewhere, makes again the model call whose answer it had not yet
    // journaled (the same run, not a new attempt); a run that had ended is never run again
    const mine = model.requests.filter((r) => String(r.headers["x-kova-run"] ?? "").startsWith(`${experimentId}-`));
    const perRun = new Map<string, ScriptedRequest[]>();
    for (const r of mine) perRun.set(String(r.headers["x-kova-run"]), [...(perRun.get(String(r.headers["x-kova-run"])) ?? []), r]);
    expect(perRun.size).toBe(120);
    expect([...perRun.keys()].every((id) => id.endsWith("-a1"))).toBe(true);
    const repeated = [...perRun].filter(([, rs]) => rs.length > 1);
    for (const [run, rs] of repeated) {
      expect(rs, `${run} was asked again`).toHaveLength(2);
      // the first of the two went out before the kill, and its run had not ended by then
      expect(rs[0]!.at, run).toBeLessThanOrEqual(killedAt + 50);
      expect(
        tc.events.filter((e) => e.runId === run && e.type === "run_completed" && e.at < killedAtPerf),
        `${run} had ended before the kill`,
      ).toEqual([]);
    }
    expect(repeated.length).toBeLessThanOrEqual(8);
    process.stderr.write(
      `eval sigkill: ${victim} killed after ${doneAtKill}/120 cells; ${repeated.length} call(s) in flight made again; the experiment finished on ${await tc.hostOf(experimentActorId(experimentId)).catch(() => "?")}\n`,
    );
  }, 180_000);
});
