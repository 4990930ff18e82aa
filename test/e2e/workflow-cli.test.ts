import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import { AGENT_IDS, TEST_AGENTS_MODULE, WORKFLOW_FIXTURES, type AgentCounts } from "../fixtures/workflow/rig.js";

/**
 * `kova workflow run` as a user types it: `--input '{json}'` and `--follow`. One node
 * process hosting the test agents (docs/workflows.md); the tests share it, because starting
 * it is the slow part, and use inputs of their own (the agents count tasks by their text).
 */
let tc: TestCluster;
const FILE = join(WORKFLOW_FIXTURES, "cli-inputs.toml");

beforeAll(async () => {
  const toml = AGENT_IDS.map((id) => `[[actors]]\nid = "${id}"\ntype = "wf-agent"`).join("\n");
  tc = await TestCluster.create({ nodes: ["n1"], modules: [TEST_AGENTS_MODULE], extraToml: toml, logLevel: "warn" });
  await poll(
    async () => {
      const agents = await tc.agents();
      return AGENT_IDS.every((id) => agents.get(id)?.node);
    },
    { timeoutMs: 20_000, what: "the test agents hosted" },
  );
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

function counts(id: string): Promise<AgentCounts> {
  return poll(() => tc.bus.request<AgentCounts>(id, "info_request", {}, { timeoutMs: 1000 }), { timeoutMs: 10_000, retryErrors: true, what: `${id}'s counts` });
}

/** Workflow runs the cluster knows (`kova workflow ls --json`). */
async function runIds(): Promise<string[]> {
  const ls = await tc.cli(["workflow", "ls", "--json"]);
  expect(ls.code, ls.stderr).toBe(0);
  return (JSON.parse(ls.stdout) as Array<{ runId: string }>).map((r) => r.runId);
}

describe("kova workflow run", () => {
  it("workflow run - --input '{json}' gives typed inputs (number, array, object) and --follow prints each step's progress until the run ends", async () => {
    const input = JSON.stringify({ topic: "nats", rounds: 2, tags: ["a", "b"], opts: { deep: true } });
    const r = await tc.cli(["workflow", "run", FILE, "--input", input, "--follow"]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    const runId = /^started cli-inputs run (\S+) \(session \1\)$/.exec(lines[0]!)?.[1];
    expect(runId, lines[0]).toBeDefined();
    const output = 'critic(publish writer(draft 1 with {"deep":true}) on researcher(research nats tagged b))';
    expect(lines.at(-1)).toBe(`run ${runId} completed: ${output}`);
    // The progress of every step type, in the order the run went: the retried agent step,
    // each loop iteration, the branch and its arm.
    const expected = [
      `run ${runId} started (workflow:cli-inputs)`,
      "  research: started",
      /^ {2}research: asked researcher \(child run \S+\)$/,
      /^ {2}research: attempt 1 failed \(agent researcher failed: researcher was told to fail \(delivery 1\)\); retrying in 50 ms$/,
      "  research: started (attempt 2)",
      /^ {2}research: completed in \d+\.\ds$/,
      "  drafts: iteration 0",
      /^ {2}draft@0: asked writer /,
      "  drafts: iteration 1",
      /^ {2}draft@1: asked writer /,
      /^ {2}drafts: completed in /,
      "  publish: took then",
      /^ {2}publish\.then: asked critic /,
      /^ {2}publish: completed in /,
      `run ${runId} completed: ${output}`,
    ];
    let at = 0;
    for (const want of expected) {
      const i = lines.findIndex((l, j) => j >= at && (typeof want === "string" ? l === want : want.test(l)));
      expect(i, `a line ${String(want)} after line ${at} of:\n${r.stdout}`).toBeGreaterThanOrEqual(at);
      at = i + 1;
    }
    // The writer saw the object input as JSON, one task per iteration of `while loop.iteration < input.rounds`.
    expect((await counts("writer")).inputs).toEqual(['draft 0 with {"deep":true}', 'draft 1 with {"deep":true}']);

    // Read as soon as --follow ended: the end it printed is the committed state's, and each
    // step shows its status, attempts and output.
    const status = await tc.cli(["workflow", "status", runId!, "--json"]);
    const summary = JSON.parse(status.stdout) as { steps: Array<{ key: string; status: string; attempts: number; output?: unknown }> };
    expect(summary).toMatchObject({ status: "completed", input: { topic: "nats", rounds: 2, tags: ["a", "b"], opts: { deep: true } } });
    expect(Object.fromEntries(summary.steps.map((st) => [st.key, [st.status, st.attempts, st.output]]))).toEqual({
      research: ["completed", 2, "researcher(research nats tagged b)"],
      "draft@0": ["completed", 1, 'writer(draft 0 with {"deep":true})'],
      "draft@1": ["completed", 1, 'writer(draft 1 with {"deep":true})'],
      drafts: ["completed", 1, 'writer(draft 1 with {"deep":true})'],
      "publish.then": ["completed", 1, output],
      publish: ["completed", 1, output],
    });
  }, 60_000);

  it("workflow run - --follow exits 1 when the run fails, after printing why", async () => {
    const input = JSON.stringify({ topic: "shallow", rounds: 0, tags: ["x", "y"], opts: { deep: false } });
    const r = await tc.cli(["workflow", "run", FILE, "--input", input, "--follow"]);
    expect(r.code, r.stdout).toBe(1);
    const lines = r.stdout.trimEnd().split("\n");
    const runId = /^started cli-inputs run (\S+) /.exec(lines[0]!)?.[1];
    expect(lines).toContain("  publish: took else");
    expect(lines.at(-1)).toBe(`run ${runId} failed: not deep`);
    // `while` was false from the start: no draft was asked for.
    expect(lines.some((l) => l.includes("draft@"))).toBe(false);
  }, 60_000);

  it("workflow run - --run-id of a run that exists starts nothing: it says so and how the run ended, with its exit code", async () => {
    const input = JSON.stringify({ topic: "again", rounds: 0, tags: ["x", "y"], opts: { deep: false } });
    const first = await tc.cli(["workflow", "run", FILE, "--input", input, "--run-id", "wf-cli-again", "--follow"]);
    expect(first.code, first.stdout).toBe(1);
    expect(first.stdout.trimEnd().split("\n").at(-1)).toBe("run wf-cli-again failed: not deep");
    const asked = (await counts("researcher")).inputs.filter((i) => i.includes("again"));
    expect(asked.length).toBeGreaterThan(0);
    const again = await tc.cli(["workflow", "run", FILE, "--input", input, "--run-id", "wf-cli-again", "--follow"]);
    expect(again.code, again.stdout).toBe(1);
    expect(again.stdout.trimEnd().split("\n")).toEqual([
      "run wf-cli-again of cli-inputs exists (failed, session wf-cli-again): it was not started again",
      "run wf-cli-again failed: not deep: kova workflow status wf-cli-again",
    ]);
    // the run's steps were not asked for again
    expect((await counts("researcher")).inputs.filter((i) => i.includes("again"))).toEqual(asked);
  }, 60_000);

  it("workflow run - an --input that is not a JSON object, or a JSON value of the wrong type, fails before anything starts", async () => {
    const before = await runIds();
    const broken = await tc.cli(["workflow", "run", FILE, "--input", '{"topic": "nats", rounds: 2}', "--follow"]);
    expect(broken.code).toBe(1);
    expect(broken.stderr).toContain("--input");
    expect(broken.stderr).toContain("is not a JSON object");
    expect(broken.stderr).toContain(`--input '{"topic":"nats"}'`);

    const wrongType = await tc.cli(["workflow", "run", FILE, "--input", JSON.stringify({ topic: "nats", rounds: 2, tags: "a,b", opts: {} })]);
    expect(wrongType.code).toBe(1);
    expect(wrongType.stderr).toMatch(/input\.tags: must be an array, not/);

    // k=v and JSON combine; a text value cannot stand for an array
    const mixed = await tc.cli(["workflow", "run", FILE, "--input", "topic=nats", "--input", '{"rounds": 1, "opts": {}}', "--input", "tags=a"]);
    expect(mixed.code).toBe(1);
    expect(mixed.stderr).toMatch(/input\.tags: must be an array, not/);
    expect(await runIds()).toEqual(before);
  }, 60_000);
});
