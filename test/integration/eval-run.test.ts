import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cancelExperiment,
  defineExperiment,
  evalStore,
  followExperiment,
  readReport,
  resumeExperiment,
  runExperiment,
  startExperiment,
  type AttemptRecord,
  type ExperimentProgress,
} from "../../src/eval/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { Kvm } from "@nats-io/kv";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startAgentNode, type AgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { kovaCli } from "../fixtures/kova-cli.js";
import { defer } from "../fixtures/disposable.js";

const nats = fileServer();

/** Task i asks for i + i; the answer is 2i. */
const tasks = (n: number) => Array.from({ length: n }, (_, i) => ({ id: `t${i}`, input: `q${i}: what is ${i} + ${i}?`, expected: String(2 * i) }));
const taskOf = (req: ScriptedRequest) => Number(/^q(\d+):/.exec(String(req.messages.at(-1)?.content))?.[1] ?? -1);
const systemOf = (req: ScriptedRequest) => String(req.messages.find((m) => m.role === "system")?.content ?? "");
const usage = { inputTokens: 10, outputTokens: 2 };

/** How often each input reached the model, per system prompt: the n-th request of an input is told apart. */
const seen = new Map<string, number>();
function nth(req: ScriptedRequest): number {
  const key = `${systemOf(req)}|${req.body?.model}|${String(req.messages.at(-1)?.content)}`;
  const n = (seen.get(key) ?? 0) + 1;
  seen.set(key, n);
  return n;
}

/**
 * The scripted model: subject A (system "You are A.") always right; subject B right on tasks
 * 0-9, right on its first request only for 10-14, wrong on 15-19; model `flaky-model` fails
 * with a 500 on its first two requests for q0 and always for q1; the judge grades by the
 * answer it is shown; `slow-model` answers after 4 s; `stall-model` answers an input's first
 * request after 10 minutes (it is cancelled long before) and any later one at once.
 */
function answer(req: ScriptedRequest) {
  const n = nth(req);
  const system = systemOf(req);
  const model = String(req.body?.model);
  const last = String(req.messages.at(-1)?.content);
  if (last.startsWith("You grade")) {
    const graded = /Answer to grade:\n(.*)\n/.exec(last)?.[1] ?? "";
    const ref = /Reference answer:\n(.*)\n/.exec(last)?.[1] ?? "";
    return scriptedReply.text(graded === ref ? '{"score": 1, "reason": "right"}' : graded === "" ? "no idea" : '{"score": 0.25, "reason": "wrong"}', {
      usage: { inputTokens: 50, outputTokens: 5 },
    });
  }
  const i = taskOf(req);
  if (model === "flaky-model" && (i === 1 || (i === 0 && n <= 2)))
    return scriptedReply.error(500, { body: { error: { message: "upstream down", type: "server_error" } } });
  if (model === "slow-model") return scriptedReply.text(String(2 * i), { usage, latencyMs: 4000 });
  if (model === "stall-model") return scriptedReply.text(String(2 * i), { usage, latencyMs: n === 1 ? 600_000 : 0 });
  if (model === "external-model") return scriptedReply.text(i % 2 === 0 ? String(2 * i) : "dunno", { usage: { inputTokens: 20, outputTokens: 4 } });
  if (system === "You are B.") {
    const right = i < 10 || (i < 15 && n === 1);
    return scriptedReply.text(right ? String(2 * i) : String(2 * i + 1), { usage });
  }
  return scriptedReply.text(String(2 * i), { usage });
}

let model: ScriptedModelServer;
let rig: AgentNode;
/** An A2A endpoint the node may send EVAL_TEST_A2A_TOKEN to: each test that uses it sets what it answers. */
let a2aServer: Server;
let a2aUrl: string;
let a2aHandler: (req: IncomingMessage, body: string, res: ServerResponse) => void = (_req, _body, res) => void res.writeHead(503).end();
/** The directory the node imports code verifiers from ([eval] verifier_dirs), and one it does not. */
let verifierDir: string;
let otherDir: string;

beforeAll(async () => {
  model = await startScriptedModelServer({ handler: answer });
  a2aServer = createServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => a2aHandler(req, body, res));
  });
  await new Promise<void>((r) => a2aServer.listen(0, "127.0.0.1", r));
  a2aUrl = `http://127.0.0.1:${(a2aServer.address() as AddressInfo).port}/a2a`;
  verifierDir = await mkdtemp(join(tmpdir(), "kova-eval-verifiers-"));
  otherDir = await mkdtemp(join(tmpdir(), "kova-eval-elsewhere-"));
  const verifier = "export default ({ output, expected }) => ({ score: output.trim() === String(expected) ? 1 : 0, reason: `checked ${output.trim()}` });";
  await writeFile(join(verifierDir, "same.mjs"), verifier);
  await writeFile(join(otherDir, "same.mjs"), verifier);
  const toml = [
    `[models.main]`,
    `base_url = "${model.url}"`,
    `model = "gpt-4o-mini"`,
    `max_concurrency = 64`,
    `price = { input_per_mtok = 1, output_per_mtok = 2 }`,
    `[models.flaky]`,
    `base_url = "${model.url}"`,
    `model = "flaky-model"`,
    `max_retries = 0`,
    `[models.slow]`,
    `base_url = "${model.url}"`,
    `model = "slow-model"`,
    `[models.stall]`,
    `base_url = "${model.url}"`,
    `model = "stall-model"`,
    `[[agents]]`,
    `id = "helper"`,
    `model = "main"`,
    `system = "You are A."`,
    `[[agents]]`,
    `id = "grader"`,
    `model = "main"`,
    // What experiments may read of the node: two variables, each for one endpoint, and one verifier directory.
    `[eval]`,
    `verifier_dirs = [${JSON.stringify(verifierDir)}]`,
    // The mock model and A2A servers listen on 127.0.0.1, an address experiments reach only when the node allows it.
    `allow_private_endpoints = true`,
    `[eval.env]`,
    `EVAL_TEST_OPENAI_KEY = "${model.url}"`,
    `EVAL_TEST_A2A_TOKEN = "${a2aUrl}"`,
  ].join("\n");
  rig = await startAgentNode(nats.url, uniqueCluster("eval"), { toml, ready: ["helper"] });
}, 60_000);

afterAll(async () => {
  await rig?.[Symbol.asyncDispose]();
  await model?.close();
  await new Promise((r) => (a2aServer ? a2aServer.close(r) : r(undefined)));
  await Promise.all([verifierDir, otherDir].map((d) => d && rm(d, { recursive: true, force: true })));
});

function requestsOf(runIdPrefix: string): ScriptedRequest[] {
  return model.requests.filter((r) => String(r.headers["x-kova-run"] ?? "").startsWith(`${runIdPrefix}-`));
}

describe("experiments on a node (KovaNode in process, scripted model)", () => {
  it("eval - 2 subjects × 20 tasks × 3 repetitions with known answers give the expected scores exactly, one model request per cell", async () => {
    const spec = defineExperiment({
      experiment: { name: "known", repetitions: 3, concurrency: 12, per_subject: 6 },
      subjects: [
        { id: "a", agent: "helper" },
        { id: "b", agent: "helper", system: "You are B." },
      ],
      tasks: tasks(20),
      verifiers: [{ type: "exact" }],
    });
    const progress: ExperimentProgress[] = [];
    const report = await runExperiment(rig.client, spec, { onProgress: (p) => progress.push(p) });
    expect(report.status).toBe("completed");
    const [a, b] = report.subjects;
    expect(a).toMatchObject({ subject: "a", cells: 60, scored: 60, errors: 0, unfinished: 0, meanScore: 1, passRate: 1, attempts: 60, failures: {} });
    expect(a!.passAtK).toEqual({ "1": 1, "2": 1, "3": 1 });
    expect(a!.ci95).toEqual([1, 1]);
    expect(b).toMatchObject({ subject: "b", scored: 60, meanScore: 0.583333, passRate: 0.583333, failures: {} });
    expect(b!.passAtK).toEqual({ "1": 0.583333, "2": 0.666667, "3": 0.75 });
    expect(b!.ci95![0]).toBeLessThan(0.583333);
    expect(b!.ci95![1]).toBeGreaterThan(0.583333);
    expect(a!.usage).toEqual({ inputTokens: 600, outputTokens: 120, costUsd: 0.00084 });
    expect(report.perTask.find((t) => t.task === "t12")!.scores).toEqual({ a: 1, b: 0.333333 });
    expect(report.perTask.find((t) => t.task === "t17")!.scores).toEqual({ a: 1, b: 0 });
    expect(a!.latencyMs!.p95).toBeGreaterThanOrEqual(a!.latencyMs!.p50);
    // one model request per cell, each under its cell's run id
    const runs = requestsOf(report.experimentId).map((r) => String(r.headers["x-kova-run"]));
    expect(runs).toHaveLength(120);
    expect(new Set(runs).size).toBe(120);
    // progress: every cell once, ending at 120 of 120
    const attempts = progress.filter((p) => p.type === "eval_attempt");
    expect(attempts).toHaveLength(120);
    expect(progress.at(-1)).toMatchObject({ type: "eval_ended", done: 120, total: 120 });
    expect(progress.at(-1)!.spent.inputTokens).toBe(1200);
  });

  it("eval - an agent subject's overrides reach the model: system prompt, model, temperature, output limit and tools", async () => {
    const report = await runExperiment(
      rig.client,
      defineExperiment({
        experiment: { name: "overrides" },
        subjects: [{ id: "o", agent: "helper", model: "main", system: "You are O.", temperature: 0.3, max_output_tokens: 64, tools: ["calculator"] }],
        tasks: tasks(1),
        verifiers: [{ type: "exact" }],
      }),
    );
    expect(report.subjects[0]).toMatchObject({ scored: 1, meanScore: 1 });
    const [req, ...more] = requestsOf(report.experimentId);
    expect(more).toEqual([]);
    expect(req!.body).toMatchObject({ model: "gpt-4o-mini", temperature: 0.3, max_tokens: 64 });
    expect(req!.messages[0]).toEqual({ role: "system", content: "You are O." });
    expect((req!.body!.tools as Array<{ function: { name: string } }>).map((t) => t.function.name)).toContain("calculator");
  });

  it("eval - a subject failing with 5xx gets replacement attempts; the first valid one counts, a cell that never gets one ends in error", async () => {
    const spec = defineExperiment({
      experiment: { name: "flaky", max_attempts: 3, concurrency: 4 },
      subjects: [{ id: "f", agent: "helper", model: "flaky" }],
      tasks: tasks(3),
      verifiers: [{ type: "exact" }],
    });
    const report = await runExperiment(rig.client, spec);
    const records = await (await evalStore(rig.client)).attempts(report.experimentId);
    const shape = (r: AttemptRecord) => `${r.task}#${r.attempt}:${r.status}:${r.reason?.code ?? ""}`;
    expect(records.map(shape)).toEqual([
      "t0#1:infra_error:MODEL_CALL_FAILED",
      "t0#2:infra_error:MODEL_CALL_FAILED",
      "t0#3:completed:",
      "t1#1:infra_error:MODEL_CALL_FAILED",
      "t1#2:infra_error:MODEL_CALL_FAILED",
      "t1#3:infra_error:MODEL_CALL_FAILED",
      "t2#1:completed:",
    ]);
    expect(records.filter((r) => r.valid).map((r) => `${r.task}#${r.attempt}`)).toEqual(["t0#3", "t2#1"]);
    expect(report.subjects[0]).toMatchObject({ scored: 2, errors: 1, unfinished: 0, meanScore: 1, attempts: 7, failures: { MODEL_CALL_FAILED: 5 } });
    // each attempt made its own model request, under its own run id
    expect(requestsOf(report.experimentId).map((r) => String(r.headers["x-kova-run"]).replace(`${report.experimentId}-`, ""))).toHaveLength(7);
  });

  it("eval - a budget stops the experiment with what it has, marked so; resume with a larger budget finishes it", async () => {
    const spec = defineExperiment({
      experiment: { name: "budget", concurrency: 1 },
      budget: { max_tokens: 50 },
      subjects: [{ id: "a", agent: "helper" }],
      tasks: tasks(10),
      verifiers: [{ type: "exact" }],
    });
    const stopped = await runExperiment(rig.client, spec);
    expect(stopped.status).toBe("budget_exhausted");
    expect(stopped.stopReason).toMatchObject({ code: "EVAL_BUDGET_EXHAUSTED", message: "max_tokens: 60 tokens used of 50" });
    expect(stopped.subjects[0]).toMatchObject({ scored: 5, unfinished: 5, meanScore: 1 });
    const resumed = await resumeExperiment(rig.client, stopped.experimentId, { maxTokens: 1000 });
    expect(resumed).toMatchObject({ status: "running", round: 2 });
    for await (const _ of followExperiment(rig.client, stopped.experimentId, { round: 2 })) void _;
    const done = await readReport(rig.client, stopped.experimentId);
    expect(done.status).toBe("completed");
    expect(done.subjects[0]).toMatchObject({ scored: 10, unfinished: 0, attempts: 10 });
  });

  it("eval - a cost budget and a wall-time budget stop it too; its status and records read with a plain NATS KV client, keyed as documented", async () => {
    // $0.000014 a cell (10 input and 2 output tokens at $1 and $2 per million): the third reaches $0.00004
    const costly = await runExperiment(
      rig.client,
      defineExperiment({
        experiment: { name: "costly", concurrency: 1 },
        budget: { max_cost_usd: 0.00004 },
        subjects: [{ id: "a", agent: "helper" }],
        tasks: tasks(6),
        verifiers: [{ type: "exact" }],
      }),
    );
    expect(costly).toMatchObject({ status: "budget_exhausted", stopReason: { code: "EVAL_BUDGET_EXHAUSTED" } });
    expect(costly.stopReason?.message).toMatch(/^max_cost_usd: \$0\.000042\d* spent of \$0\.00004$/);
    expect(costly.subjects[0]).toMatchObject({ scored: 3, unfinished: 3, meanScore: 1 });
    // the slow model answers after 4 s: the wall time runs out first, and the cells in flight are cut
    const late = await runExperiment(
      rig.client,
      defineExperiment({
        experiment: { name: "late", concurrency: 2 },
        budget: { max_wall_time: "1s" },
        subjects: [{ id: "s", agent: "helper", model: "slow" }],
        tasks: tasks(3),
        verifiers: [{ type: "exact" }],
      }),
    );
    expect(late).toMatchObject({ status: "budget_exhausted", stopReason: { code: "EVAL_BUDGET_EXHAUSTED" } });
    expect(late.stopReason?.message).toMatch(/^max_wall_time: ran \d+ ms of 1000$/);
    expect(late.subjects[0]).toMatchObject({ scored: 0, unfinished: 3, failures: { EVAL_BUDGET_EXHAUSTED: 2 } });

    // docs/evals.md, "Results": bucket kova_<c>_evals, keys <experiment>.status and <experiment>.attempt.<subject>.<task>.<repetition>.<attempt>
    const kv = await new Kvm(rig.client.nc).open(`kova_${rig.cluster}_evals`);
    const status = (await kv.get(`${costly.experimentId}.status`))!.json<Record<string, unknown>>();
    expect(status).toMatchObject({ v: 1, experimentId: costly.experimentId, name: "costly", status: "budget_exhausted", cells: 6, subjects: ["a"] });
    const keys: string[] = [];
    for await (const k of await kv.keys(`${costly.experimentId}.attempt.>`)) keys.push(k);
    expect(keys.sort()).toEqual(["t0", "t1", "t2"].map((t) => `${costly.experimentId}.attempt.a.${t}.0.1`));
    const record = (await kv.get(keys[0]!))!.json<Record<string, unknown>>();
    expect(record).toMatchObject({
      v: 1,
      cell: 0,
      subject: "a",
      task: "t0",
      repetition: 0,
      attempt: 1,
      status: "completed",
      valid: true,
      score: 1,
      output: "0",
    });
    expect(record.runId).toBe(`${costly.experimentId}-c0-a1`);
  });

  it("eval - a judge verifier scores with its rubric through an agent; its usage is counted apart", async () => {
    const spec = defineExperiment({
      experiment: { name: "judged", concurrency: 4 },
      subjects: [
        { id: "a", agent: "helper" },
        { id: "b", agent: "helper", system: "You are B." },
      ],
      tasks: [9, 16, 17, 18].map((i) => tasks(20)[i]!),
      verifiers: [
        { type: "exact", weight: 1 },
        { type: "judge", agent: "grader", rubric: "The exact sum, nothing else.", weight: 1 },
      ],
    });
    const report = await runExperiment(rig.client, spec);
    const [a, b] = report.subjects;
    // a: right everywhere (1, 1); b: right on t9, wrong on t16-18 (0 and 0.25 → 0.125)
    expect(a).toMatchObject({ meanScore: 1, passRate: 1 });
    expect(b).toMatchObject({ meanScore: round((1 + 3 * 0.125) / 4), passRate: 0.25 });
    expect(a!.judgeUsage).toEqual({ inputTokens: 200, outputTokens: 20, costUsd: 0.00024 });
    expect(a!.usage).toEqual({ inputTokens: 40, outputTokens: 8, costUsd: 0.000056 });
    const records = await (await evalStore(rig.client)).attempts(report.experimentId);
    const wrong = records.find((r) => r.subject === "b" && r.task === "t16")!;
    expect(wrong.verifiers.map((v) => `${v.id}:${v.score}:${v.pass}:${v.reason}`)).toEqual(['exact:0:false:"33" is not "32"', "judge-1:0.25:false:wrong"]);
  });

  it("eval - an external OpenAI-compatible subject is called from the cluster and priced by its own table", async () => {
    const spec = defineExperiment({
      experiment: { name: "external", concurrency: 4 },
      subjects: [
        { id: "ext", openai: { base_url: model.url, model: "external-model", price: { input_per_mtok: 2, output_per_mtok: 4 } }, system: "Be brief." },
      ],
      tasks: tasks(4),
      verifiers: [{ type: "numeric" }],
    });
    const report = await runExperiment(rig.client, spec);
    expect(report.subjects[0]).toMatchObject({ kind: "openai", scored: 4, meanScore: 0.5, usage: { inputTokens: 80, outputTokens: 16, costUsd: 0.000224 } });
    const reqs = requestsOf(report.experimentId);
    expect(reqs.map((r) => r.body?.model)).toEqual(["external-model", "external-model", "external-model", "external-model"]);
    expect(reqs[0]!.messages[0]).toEqual({ role: "system", content: "Be brief." });
    // the subject's runs are child runs of the experiment, with the agent protocol's events
    const ends = rig.events.filter((e) => e.parentRunId === report.experimentId && e.type === "run_completed");
    expect(ends).toHaveLength(4);
  });

  it("eval - an A2A subject by URL: message/send, a task polled with tasks/get until it ends, a 5xx replaced", async () => {
    // A2A JSON-RPC (v0.3 method names): q0 answers with a message, q1 with a task finished on
    // its second tasks/get, q2 with a 503 the first time.
    const calls: string[] = [];
    const polls = new Map<string, number>();
    let failedOnce = false;
    a2aHandler = (req, body, res) => {
      const rpc = JSON.parse(body) as { id: string; method: string; params: { id?: string; message?: { parts: Array<{ text: string }> } } };
      calls.push(`${rpc.method}${req.headers.authorization === "Bearer t0ken" ? " authorized" : ""}`);
      const reply = (result: unknown) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: rpc.id, result }));
      if (rpc.method === "tasks/get") {
        const n = (polls.get(rpc.params.id!) ?? 0) + 1;
        polls.set(rpc.params.id!, n);
        const done = n >= 2;
        return reply({
          kind: "task",
          id: rpc.params.id,
          status: { state: done ? "completed" : "working" },
          artifacts: done ? [{ parts: [{ kind: "text", text: "2" }] }] : [],
          metadata: { kova: { usage: { inputTokens: 7, outputTokens: 1 } } },
        });
      }
      const i = taskOf({ messages: [{ role: "user", content: rpc.params.message!.parts[0]!.text }] } as ScriptedRequest);
      if (i === 0) return reply({ kind: "message", parts: [{ kind: "text", text: "0" }] });
      if (i === 1) return reply({ kind: "task", id: "task-1", status: { state: "submitted" } });
      if (!failedOnce) {
        failedOnce = true;
        return res.writeHead(503).end("busy");
      }
      return reply({ kind: "message", parts: [{ kind: "text", text: "4" }] });
    };
    process.env.EVAL_TEST_A2A_TOKEN = "Bearer t0ken";
    await using _env = defer(() => delete process.env.EVAL_TEST_A2A_TOKEN);
    const spec = defineExperiment({
      experiment: { name: "a2a", concurrency: 1 },
      subjects: [{ id: "remote", a2a: a2aUrl, headers_env: { Authorization: "EVAL_TEST_A2A_TOKEN" } }],
      tasks: tasks(3),
      verifiers: [{ type: "exact" }],
    });
    const report = await runExperiment(rig.client, spec);
    expect(report.subjects[0]).toMatchObject({
      kind: "a2a",
      scored: 3,
      meanScore: 1,
      failures: { EVAL_EXTERNAL_FAILED: 1 },
      usage: { inputTokens: 7, outputTokens: 1 },
    });
    expect(calls).toEqual([
      "message/send authorized",
      "message/send authorized",
      "tasks/get authorized",
      "tasks/get authorized",
      "message/send authorized",
      "message/send authorized",
    ]);
  });

  it("eval - an attempt past its timeout is interrupted and replaced; cancel stops what is in flight", async () => {
    const spec = defineExperiment({
      experiment: { name: "slow", timeout: "1s", max_attempts: 2, concurrency: 2 },
      subjects: [{ id: "s", agent: "helper", model: "slow" }],
      tasks: tasks(1),
      verifiers: [{ type: "exact" }],
    });
    const timedOut = await runExperiment(rig.client, spec);
    expect(timedOut.subjects[0]).toMatchObject({ scored: 0, errors: 1, failures: { EVAL_ATTEMPT_TIMEOUT: 2 } });
    const cancelSpec = defineExperiment({
      experiment: { name: "cancelled", concurrency: 2 },
      subjects: [{ id: "s", agent: "helper", model: "slow" }],
      tasks: tasks(4),
      verifiers: [{ type: "exact" }],
    });
    const { experimentId } = await startExperiment(rig.client, cancelSpec);
    await expect(cancelExperiment(rig.client, experimentId, "enough")).resolves.toMatchObject({ status: "cancelled" });
    const report = await readReport(rig.client, experimentId);
    expect(report).toMatchObject({ status: "cancelled", stopReason: { code: "EVAL_CANCELLED" } });
    expect(report.subjects[0]).toMatchObject({ scored: 0, unfinished: 4, failures: { EVAL_CANCELLED: 2 } });
  });

  it("eval - a spec naming what the cluster lacks is refused at start, naming the field", async () => {
    const bad = (subjects: unknown[], verifiers: unknown[] = [{ type: "exact" }]) =>
      startExperiment(rig.client, defineExperiment({ experiment: { name: "bad" }, subjects, tasks: tasks(1), verifiers }));
    await expect(bad([{ id: "x", agent: "helpr" }])).rejects.toThrow('subjects[0].agent: no agent "helpr" in this cluster (did you mean helper?)');
    await expect(bad([{ id: "x", agent: "helper", model: "mian" }])).rejects.toThrow(/subjects\[0\]\.model: no model "mian" .*\(did you mean main\?\)/);
    await expect(bad([{ id: "x", agent: "helper", tools: ["calculater"] }])).rejects.toThrow(/subjects\[0\]\.tools/);
    await expect(bad([{ id: "x", actor: "nobody" }])).rejects.toThrow(/subjects\[0\]\.actor: /);
    await expect(bad([{ id: "x", agent: "helper" }], [{ type: "judge", agent: "gradr", rubric: "r" }])).rejects.toThrow(
      /verifiers\[0\]\.agent: no agent "gradr"/,
    );
  });

  it("eval - an experiment's spec is written once: an id taken by another spec is refused and the first runs on as it was", async () => {
    const spec = (expected: string) =>
      defineExperiment({
        experiment: { name: "once" },
        subjects: [{ id: "s", agent: "helper" }],
        tasks: [{ id: "t", input: "q0", expected }],
        verifiers: [{ type: "exact" }],
      });
    const first = await startExperiment(rig.client, spec("a"), { experimentId: "once-0123abcd" });
    await expect(startExperiment(rig.client, spec("b"), { experimentId: first.experimentId })).rejects.toMatchObject({ code: "EXPERIMENT_STATE" });
    expect((await (await evalStore(rig.client)).getSpec(first.experimentId))?.spec.tasks[0]?.expected).toBe("a");
  });

  it("eval - a node reads only what its [eval] allows: a key goes to its endpoint; another variable, endpoint, a key file or a code verifier elsewhere is refused at start, naming the field", async () => {
    // A secret of the node (as NATS credentials or a provider key of its agents would be) and the key [eval.env] lists.
    process.env.EVAL_TEST_NODE_SECRET = "node-secret-0";
    process.env.EVAL_TEST_OPENAI_KEY = "sk-eval-1";
    await using _env = defer(() => {
      delete process.env.EVAL_TEST_NODE_SECRET;
      delete process.env.EVAL_TEST_OPENAI_KEY;
    });
    // Whoever starts an experiment may name any URL: this one stands for theirs, and must hear nothing.
    const heard: string[] = [];
    const theirs = createServer((req, res) => {
      heard.push(`${req.method} ${req.url} ${req.headers.authorization ?? ""}`);
      res.writeHead(500).end();
    });
    await new Promise<void>((r) => theirs.listen(0, "127.0.0.1", r));
    await using _theirs = defer(() => new Promise((r) => theirs.close(r)));
    const theirUrl = `http://127.0.0.1:${(theirs.address() as AddressInfo).port}/v1`;
    const one = (subject: Record<string, unknown>, verifiers: unknown[] = [{ type: "numeric" }]) =>
      defineExperiment({ experiment: { name: "trust", concurrency: 2 }, subjects: [subject], tasks: tasks(2), verifiers });
    const start = (spec: ReturnType<typeof one>) => startExperiment(rig.client, spec);
    const ext = (openai: Record<string, unknown>) => ({ id: "ext", openai: { model: "external-model", ...openai } });

    await expect(start(one(ext({ base_url: theirUrl, api_key_env: "EVAL_TEST_NODE_SECRET" })))).rejects.toThrow(
      /subjects\[0\]\.openai\.api_key_env: "EVAL_TEST_NODE_SECRET" is not a variable this node lets experiments read: .*\[eval\.env\]/,
    );
    await expect(start(one(ext({ base_url: theirUrl, api_key_env: "EVAL_TEST_OPENAI_KEY" })))).rejects.toThrow(
      `subjects[0].openai.base_url: ${theirUrl} is not an endpoint [eval.env] lets EVAL_TEST_OPENAI_KEY go to (it allows ${model.url}`,
    );
    await expect(start(one({ id: "remote", a2a: `${theirUrl}/a2a`, headers_env: { Authorization: "EVAL_TEST_NODE_SECRET" } }))).rejects.toThrow(
      /subjects\[0\]\.headers_env\.Authorization: "EVAL_TEST_NODE_SECRET" is not a variable this node lets experiments read/,
    );
    // a spec stored by hand (defineExperiment refuses it) that names a file of the node
    const withFile = one(ext({ base_url: theirUrl }));
    (withFile.subjects[0] as { openai: Record<string, unknown> }).openai.api_key_file = "/etc/hostname";
    await expect(start(withFile)).rejects.toThrow(/subjects\[0\]\.openai\.api_key_file: a spec may not name a file of the node/);
    await expect(start(one({ id: "a", agent: "helper" }, [{ type: "code", module: join(otherDir, "same.mjs") }]))).rejects.toThrow(
      /verifiers\[0\]\.module: .*same\.mjs is not under a directory this node imports code verifiers from/,
    );
    expect(heard).toEqual([]);

    // the allowed path: the listed key reaches the listed endpoint, and a verifier from the listed directory scores
    const report = await runExperiment(rig.client, one(ext({ base_url: model.url, api_key_env: "EVAL_TEST_OPENAI_KEY" })));
    expect(report.subjects[0]).toMatchObject({ scored: 2, meanScore: 0.5 });
    expect(requestsOf(report.experimentId).map((r) => r.headers.authorization)).toEqual(["Bearer sk-eval-1", "Bearer sk-eval-1"]);
    const coded = await runExperiment(rig.client, one({ id: "a", agent: "helper" }, [{ type: "code", module: join(verifierDir, "same.mjs") }]));
    expect(coded.subjects[0]).toMatchObject({ scored: 2, meanScore: 1, passRate: 1 });
    // no request anywhere carried the node's secret
    expect(model.requests.filter((r) => JSON.stringify(r.headers).includes("node-secret-0"))).toEqual([]);
  });

  it("eval - starting an experiment that exists answers with it: again while it runs, twice at once, runExperiment again after it ended", async () => {
    const spec = defineExperiment({
      experiment: { name: "again", concurrency: 2 },
      subjects: [{ id: "a", agent: "helper" }],
      tasks: tasks(6),
      verifiers: [{ type: "exact" }],
    });
    // The bound only turns a start that is never answered into a failure; it measures nothing.
    const within = { timeoutMs: 25_000 };
    const first = await startExperiment(rig.client, spec, { experimentId: "again-0123abcd", ...within });
    expect(first).toMatchObject({ existing: false, summary: { status: "running", cells: 6 } });
    const second = await startExperiment(rig.client, spec, { experimentId: first.experimentId, ...within });
    expect(second).toMatchObject({ experimentId: first.experimentId, existing: true, summary: { cells: 6 } });
    // runExperiment again (a caller that crashed and came back) follows the same run to its end
    const report = await runExperiment(rig.client, spec, { experimentId: first.experimentId, ...within });
    expect(report).toMatchObject({ experimentId: first.experimentId, status: "completed" });
    expect(report.subjects[0]).toMatchObject({ scored: 6, meanScore: 1, attempts: 6 });
    const again = await runExperiment(rig.client, spec, { experimentId: first.experimentId, ...within });
    expect(again.subjects).toEqual(report.subjects);
    // two callers at once: one starts it, the other gets it as it is
    const both = await Promise.all([1, 2].map(() => startExperiment(rig.client, spec, { experimentId: "again-4567abcd", ...within })));
    expect(both.map((b) => b.existing).sort()).toEqual([false, true]);
    for await (const _ of followExperiment(rig.client, "again-4567abcd")) void _;
    // every cell ran once in each experiment, however often it was started
    for (const id of [first.experimentId, "again-4567abcd"]) {
      const runs = requestsOf(id).map((r) => String(r.headers["x-kova-run"]));
      expect(runs).toHaveLength(6);
      expect(new Set(runs).size).toBe(6);
    }
  });
});

// Runs bin/kova.js from dist/: run `npm run build` first.
describe("kova eval (the CLI against a node in process)", () => {
  it("eval - run shows progress on stderr and ends with the table per subject; ls, show, compare and --json read the same experiment", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-eval-cli-"));
    const file = join(dir, "ab.toml");
    await writeFile(
      file,
      [
        "[experiment]",
        'name = "cli"',
        "repetitions = 2",
        "concurrency = 4",
        "[[subjects]]",
        'id = "a"',
        'agent = "helper"',
        "[[subjects]]",
        'id = "b"',
        'agent = "helper"',
        'system = "You are B."',
        ...tasks(20)
          .slice(16, 20)
          .flatMap((t) => ["[[tasks]]", `id = "${t.id}"`, `input = "${t.input}"`, `expected = "${t.expected}"`]),
        "[[verifiers]]",
        'type = "exact"',
      ].join("\n"),
    );
    const kova = (...args: string[]) => kovaCli(nats.url, rig.cluster, args);
    const plan = await kova("eval", "run", file, "--plan");
    expect(plan.stdout.split("\n")[0]).toBe("experiment cli: 2 subjects × 4 tasks × 2 repetitions = 16 cells");
    const run = await kova("eval", "run", file);
    expect(run.code, run.stderr).toBe(0);
    const id = /^started experiment (\S+): 16 cells$/m.exec(run.stderr)![1]!;
    expect(run.stderr).toMatch(/^16\/16 cells · 192 tokens · \$0\.00022\d* · /m);
    const lines = run.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(new RegExp(`^experiment ${id} completed in .*: 2 subjects × 4 tasks × 2 repetitions = 16 cells$`));
    expect(lines[1]).toMatch(/^subject\s+score \[95% CI\]\s+pass\s+pass@1\s+pass@2\s+cells/);
    expect(lines[2]).toMatch(/^a\s+1\.000 \[1\.000, 1\.000\]\s+1\.000\s+1\.000\s+1\.000\s+8\/8\s+80\/16/);
    expect(lines[3]).toMatch(/^b\s+0\.000 \[0\.000, 0\.000\]\s+0\.000/);

    const ls = JSON.parse((await kova("eval", "ls", "--json")).stdout) as Array<{ experimentId: string; status: string }>;
    expect(ls.find((x) => x.experimentId === id)).toMatchObject({ status: "completed" });
    const shown = JSON.parse((await kova("eval", "show", id, "--json")).stdout) as { subjects: Array<{ subject: string; meanScore: number }> };
    expect(shown.subjects.map((x) => [x.subject, x.meanScore])).toEqual([
      ["a", 1],
      ["b", 0],
    ]);
    const tasksShown = await kova("eval", "show", id, "--tasks");
    expect(tasksShown.stdout).toMatch(/^t17\s+1\.000\s+0\.000$/m);
    const cmp = await kova("eval", "compare", `${id}:a`, `${id}:b`);
    expect(cmp.stdout.trim()).toBe(`${id}:b − ${id}:a: -1.000 [-1.000, -1.000] over 4 paired tasks (B better on 0, worse on 4, equal on 0); A 1.000, B 0.000`);
    const noSubject = await kova("eval", "compare", id, `${id}:b`);
    expect(noSubject.code).toBe(1);
    expect(noSubject.stderr).toContain(`A: experiment ${id} has 2 subjects: name one as ${id}:<subject> (it has a, b)`);
  });

  it("eval - run --detach returns the id; cancel stops it and resume with a budget finishes it; a bad spec names its field", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-eval-cli-"));
    const file = join(dir, "slow.toml");
    const body = (extra: string) =>
      [
        "[experiment]",
        'name = "detached"',
        "concurrency = 1",
        extra,
        "[[subjects]]",
        'id = "s"',
        'agent = "helper"',
        // its first request waits until the cancel (which may take a while to come on a loaded machine), the resumed one is answered
        'model = "stall"',
        "[[tasks]]",
        'input = "q3: what is 3 + 3?"',
        'expected = "6"',
        "[[verifiers]]",
        'type = "exact"',
      ].join("\n");
    await writeFile(file, body(""));
    const kova = (...args: string[]) => kovaCli(nats.url, rig.cluster, args);
    const started = await kova("eval", "run", file, "--detach", "--json");
    expect(started.code, started.stderr).toBe(0);
    const { experimentId } = JSON.parse(started.stdout) as { experimentId: string };
    const cancelled = await kova("eval", "cancel", experimentId, "--reason", "later");
    expect(cancelled.stdout.trim()).toBe(`experiment ${experimentId} cancelled after 0/1 cells`);
    const again = await kova("eval", "cancel", experimentId);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`experiment ${experimentId} is cancelled: only a running experiment can be cancelled [EXPERIMENT_STATE]`);
    const resumed = await kova("eval", "resume", experimentId, "--max-wall-time", "1h", "--json");
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout)).toMatchObject({ status: "completed", subjects: [{ scored: 1, meanScore: 1, failures: { EVAL_CANCELLED: 1 } }] });

    // run again with the id of one that exists: no second start, its report (an ended experiment's) at once
    const twice = await kova("eval", "run", file, "--id", experimentId, "--json");
    expect(twice.code, twice.stderr).toBe(0);
    expect(twice.stderr).toContain(`experiment ${experimentId} exists (completed, 1/1 cells): its report follows`);
    expect(JSON.parse(twice.stdout)).toMatchObject({ experimentId, status: "completed", subjects: [{ scored: 1, attempts: 2 }] });

    await writeFile(file, body("repetitions = 0"));
    const bad = await kova("eval", "run", file);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe("kova: experiment.repetitions: must be an integer from 1 to 100, not number 0 [INVALID_CONFIG]\n");
  });
});

function round(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}
