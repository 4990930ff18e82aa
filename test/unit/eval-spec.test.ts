import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { cellCount, cellIndex, cellRef, defineExperiment, parseExperimentText, specDigest } from "../../src/eval/index.js";
import { configError } from "../fixtures/config-error.js";

const dir = mkdtempSync(join(tmpdir(), "kova-eval-spec-"));
writeFileSync(
  join(dir, "qa.jsonl"),
  ['{"id": "q1", "input": "2+2?", "expected": "4"}', "", '{"input": "3+3?", "expected": 6, "metadata": {"level": 1}}'].join("\n"),
);
writeFileSync(join(dir, "bad.jsonl"), '{"id": "q1", "input": "2+2?"}\n{"input": 5}\n');
writeFileSync(join(dir, "answer.schema.json"), JSON.stringify({ type: "object", required: ["n"] }));
writeFileSync(join(dir, "verify.mjs"), "export default () => 1;\n");

const TOML = `
[experiment]
name = "prompt-v2"
repetitions = 3
concurrency = 4
per_subject = 2
timeout = "30s"
dataset = "./qa.jsonl"

[budget]
max_tokens = 10000
max_cost_usd = 0.5
max_wall_time = "1h"

[[subjects]]
id = "base"
agent = "helper"

[[subjects]]
id = "terse"
agent = "helper"
system = "Be terse."
model = "small"
temperature = 0
tools = ["calculator"]
max_output_tokens = 64

[[subjects]]
id = "gpt"
openai = { base_url = "https://api.example.com/v1", model = "gpt-x", api_key_env = "EXAMPLE_KEY", price = { input_per_mtok = 1, output_per_mtok = 2 } }
system = "Answer with a number."

[[subjects]]
id = "remote"
a2a = "https://agents.example.com/a2a/helper"
headers_env = { Authorization = "A2A_TOKEN" }

[[subjects]]
id = "swarm"
actor = "planner"

[[tasks]]
id = "inline"
input = "What is 10 / 4?"
expected = "2.5"

[[verifiers]]
type = "numeric"
tolerance = 0.01

[[verifiers]]
type = "json_schema"
schema_file = "./answer.schema.json"
weight = 0.5

[[verifiers]]
type = "judge"
agent = "grader"
rubric = "Correct number."

[[verifiers]]
type = "code"
module = "./verify.mjs"
`;

/** A valid spec with one field replaced (or removed with undefined), for the error cases. */
function withField(path: string, value: unknown): Record<string, unknown> {
  const raw: Record<string, unknown> = {
    experiment: { name: "e1", repetitions: 1 },
    subjects: [{ id: "base", agent: "helper" }],
    tasks: [{ id: "t1", input: "2+2?", expected: "4" }],
    verifiers: [{ type: "exact" }],
  };
  const keys = path.split(".");
  let at: Record<string, unknown> = raw;
  for (const k of keys.slice(0, -1)) {
    const m = /^(\w+)\[(\d+)\]$/.exec(k);
    at = (m ? (at[m[1]!] as Record<string, unknown>[])[Number(m[2])] : (at[k] ??= {})) as Record<string, unknown>;
  }
  const last = keys.at(-1)!;
  if (value === undefined) delete at[last];
  else at[last] = value;
  return raw;
}

describe("experiment spec", () => {
  it("eval - a TOML spec is fully expanded: dataset tasks then inline ones, files read, paths absolute, defaults filled in", () => {
    const spec = parseExperimentText(TOML, join(dir, "exp.toml"), { baseDir: dir });
    expect(spec).toMatchObject({ name: "prompt-v2", repetitions: 3, concurrency: 4, perSubject: 2, timeoutMs: 30_000, maxAttempts: 3 });
    expect(spec.budget).toEqual({ maxTokens: 10_000, maxCostUsd: 0.5, maxWallTimeMs: 3_600_000 });
    expect(spec.tasks).toEqual([
      { id: "q1", input: "2+2?", expected: "4" },
      { id: "t3", input: "3+3?", expected: 6, metadata: { level: 1 } },
      { id: "inline", input: "What is 10 / 4?", expected: "2.5" },
    ]);
    expect(spec.subjects.map((s) => s.kind)).toEqual(["agent", "agent", "openai", "a2a", "actor"]);
    expect(spec.subjects[1]).toEqual({
      id: "terse",
      kind: "agent",
      agent: "helper",
      overrides: { model: "small", system: "Be terse.", tools: ["calculator"], temperature: 0, maxOutputTokens: 64 },
    });
    expect(spec.subjects[2]).toMatchObject({
      kind: "openai",
      openai: { base_url: "https://api.example.com/v1", api_key_env: "EXAMPLE_KEY" },
      system: "Answer with a number.",
    });
    expect(spec.subjects[3]).toEqual({ id: "remote", kind: "a2a", url: "https://agents.example.com/a2a/helper", headersEnv: { Authorization: "A2A_TOKEN" } });
    expect(spec.verifiers.map((v) => `${v.id}:${v.type}:${v.weight}:${v.passScore}`)).toEqual([
      "numeric:numeric:1:1",
      "json_schema-1:json_schema:0.5:1",
      "judge-2:judge:1:0.5",
      "code-3:code:1:0.5",
    ]);
    expect(spec.verifiers[1]).toMatchObject({ schema: { type: "object", required: ["n"] } });
    expect(spec.verifiers[3]).toMatchObject({ module: join(dir, "verify.mjs"), export: "default" });
    expect(cellCount(spec)).toBe(5 * 3 * 3);
    // the same text gives the same spec, byte for byte
    expect(specDigest(parseExperimentText(TOML, join(dir, "exp.toml"), { baseDir: dir }))).toBe(specDigest(spec));
  });

  it("eval - cells are numbered subject by subject, repetition-major within a subject, and back", () => {
    const spec = { tasks: [1, 2, 3], repetitions: 2 } as unknown as Parameters<typeof cellRef>[0];
    const refs = Array.from({ length: 12 }, (_, i) => cellRef(spec, i));
    expect(refs.slice(0, 7).map((r) => `${r.subject}/${r.repetition}/${r.task}`)).toEqual(["0/0/0", "0/0/1", "0/0/2", "0/1/0", "0/1/1", "0/1/2", "1/0/0"]);
    for (const r of refs) expect(cellIndex(spec, r.subject, r.task, r.repetition)).toBe(r.index);
  });

  it("eval - a JSON spec and defineExperiment take the same shape", () => {
    const raw = {
      experiment: { name: "j" },
      subjects: [{ id: "a", agent: "x" }],
      tasks: [{ input: "hi", expected: ["hello", "hi"] }],
      verifiers: [{ type: "contains", ignore_case: true }],
    };
    const fromJson = parseExperimentText(JSON.stringify(raw), "e.json");
    expect(fromJson).toEqual(defineExperiment(raw));
    expect(fromJson).toMatchObject({
      repetitions: 1,
      concurrency: 8,
      perSubject: 8,
      timeoutMs: 600_000,
      tasks: [{ id: "t1" }],
      verifiers: [{ ignoreCase: true }],
    });
  });

  // One case per field: the error names the field as written and says the fix.
  const cases: Array<[string, () => unknown, string, RegExp]> = [
    ["toml syntax", () => parseExperimentText("[experiment\nname=1", "bad.toml"), "bad.toml", /invalid TOML at line 1/],
    ["unknown top key", () => defineExperiment({ ...withField("experiment.name", "x"), verifier: [] }), "verifier", /did you mean verifiers/],
    ["name missing", () => defineExperiment(withField("experiment.name", undefined)), "experiment.name", /is required/],
    ["name not a token", () => defineExperiment(withField("experiment.name", "a b")), "experiment.name", /\[A-Za-z0-9_-\]/],
    ["unknown experiment key", () => defineExperiment(withField("experiment.repetition", 2)), "experiment.repetition", /did you mean experiment.repetitions/],
    ["repetitions", () => defineExperiment(withField("experiment.repetitions", 0)), "experiment.repetitions", /integer from 1 to 100/],
    ["concurrency", () => defineExperiment(withField("experiment.concurrency", 1.5)), "experiment.concurrency", /integer from 1 to 1000/],
    ["per_subject over concurrency", () => defineExperiment(withField("experiment.per_subject", 9)), "experiment.per_subject", /more than concurrency \(8\)/],
    ["timeout", () => defineExperiment(withField("experiment.timeout", "soon")), "experiment.timeout", /must be a duration/],
    ["max_attempts", () => defineExperiment(withField("experiment.max_attempts", 11)), "experiment.max_attempts", /from 1 to 10/],
    [
      "dataset missing",
      () => defineExperiment(withField("experiment.dataset", "./nope.jsonl"), { baseDir: dir }),
      "experiment.dataset",
      /cannot read .*nope\.jsonl \(ENOENT\)/,
    ],
    [
      "dataset line",
      () => defineExperiment(withField("experiment.dataset", "./bad.jsonl"), { baseDir: dir }),
      "./bad.jsonl:2.input",
      /is required: the task as text/,
    ],
    ["budget key", () => defineExperiment(withField("budget.max_cost", 1)), "budget.max_cost", /allowed here: max_tokens, max_cost_usd, max_wall_time/],
    ["budget tokens", () => defineExperiment(withField("budget.max_tokens", -1)), "budget.max_tokens", /integer from 1/],
    ["budget cost", () => defineExperiment(withField("budget.max_cost_usd", 0)), "budget.max_cost_usd", /number above 0/],
    ["budget wall time", () => defineExperiment(withField("budget.max_wall_time", "1 week")), "budget.max_wall_time", /must be a duration/],
    ["no subjects", () => defineExperiment(withField("subjects", [])), "subjects", /at least one subject/],
    ["subject without kind", () => defineExperiment(withField("subjects", [{ id: "a" }])), "subjects[0]", /names no subject/],
    ["subject of two kinds", () => defineExperiment(withField("subjects", [{ id: "a", agent: "x", actor: "y" }])), "subjects[0]", /names agent and actor/],
    ["subject id", () => defineExperiment(withField("subjects[0].id", "a.b")), "subjects[0].id", /\[A-Za-z0-9_-\]/],
    [
      "subject id twice",
      () =>
        defineExperiment(
          withField("subjects", [
            { id: "a", agent: "x" },
            { id: "a", agent: "y" },
          ]),
        ),
      "subjects[1].id",
      /also subjects\[0\]'s/,
    ],
    ["subject agent", () => defineExperiment(withField("subjects[0].agent", "a b")), "subjects[0].agent", /must be an id/],
    ["subject key typo", () => defineExperiment(withField("subjects[0].temprature", 1)), "subjects[0].temprature", /did you mean subjects\[0\].temperature/],
    ["subject temperature", () => defineExperiment(withField("subjects[0].temperature", 3)), "subjects[0].temperature", /from 0 to 2/],
    ["subject system", () => defineExperiment(withField("subjects[0].system", 5)), "subjects[0].system", /must be a string/],
    ["subject tools", () => defineExperiment(withField("subjects[0].tools", "calculator")), "subjects[0].tools", /array of strings/],
    ["subject model", () => defineExperiment(withField("subjects[0].model", "x y")), "subjects[0].model", /must be an id/],
    ["subject max_output_tokens", () => defineExperiment(withField("subjects[0].max_output_tokens", 0)), "subjects[0].max_output_tokens", /integer from 1/],
    ["actor with overrides", () => defineExperiment(withField("subjects", [{ id: "a", actor: "x", system: "s" }])), "subjects[0].system", /unknown key/],
    [
      "openai without model",
      () => defineExperiment(withField("subjects", [{ id: "a", openai: { base_url: "http://127.0.0.1:1/v1" } }])),
      "subjects[0].openai.model",
      /is required/,
    ],
    [
      "openai bad url",
      () => defineExperiment(withField("subjects", [{ id: "a", openai: { base_url: "nope", model: "m" } }])),
      "subjects[0].openai.base_url",
      /./,
    ],
    [
      "openai key file",
      () => defineExperiment(withField("subjects", [{ id: "a", openai: { model: "m", api_key_file: "/k" } }])),
      "subjects[0].openai.api_key_file",
      /use api_key_env/,
    ],
    ["a2a url", () => defineExperiment(withField("subjects", [{ id: "a", a2a: "ftp://x" }])), "subjects[0].a2a", /http\(s\) URL/],
    [
      "a2a header env",
      () => defineExperiment(withField("subjects", [{ id: "a", a2a: "http://x", headers_env: { Authorization: "the token" } }])),
      "subjects[0].headers_env.Authorization",
      /environment variable/,
    ],
    ["no tasks", () => defineExperiment(withField("tasks", [])), "tasks", /needs tasks/],
    ["task input", () => defineExperiment(withField("tasks[0].input", "  ")), "tasks[0].input", /is required/],
    [
      "task id twice",
      () =>
        defineExperiment(
          withField("tasks", [
            { id: "t", input: "a", expected: "1" },
            { id: "t", input: "b", expected: "2" },
          ]),
        ),
      "tasks[1].id",
      /also tasks\[0\]'s/,
    ],
    ["task key typo", () => defineExperiment(withField("tasks[0].expect", "4")), "tasks[0].expect", /did you mean tasks\[0\].expected/],
    ["task metadata", () => defineExperiment(withField("tasks[0].metadata", "x")), "tasks[0].metadata", /must be a table/],
    ["task expected missing", () => defineExperiment(withField("tasks[0].expected", undefined)), "tasks[0].expected", /is required by verifier exact/],
    [
      "task expected not a number",
      () => defineExperiment({ ...withField("verifiers", [{ type: "numeric" }]), tasks: [{ input: "a", expected: "four" }] }),
      "tasks[0].expected",
      /needs a number/,
    ],
    ["no verifiers", () => defineExperiment(withField("verifiers", [])), "verifiers", /at least one verifier/],
    ["verifier type", () => defineExperiment(withField("verifiers", [{ type: "exakt" }])), "verifiers[0].type", /did you mean exact/],
    ["verifier key", () => defineExperiment(withField("verifiers", [{ type: "exact", value: "x" }])), "verifiers[0].value", /unknown key/],
    ["verifier weight", () => defineExperiment(withField("verifiers", [{ type: "exact", weight: 0 }])), "verifiers[0].weight", /number above 0/],
    ["verifier pass_score", () => defineExperiment(withField("verifiers", [{ type: "exact", pass_score: 2 }])), "verifiers[0].pass_score", /from 0 to 1/],
    [
      "regex pattern",
      () => defineExperiment(withField("verifiers", [{ type: "regex", pattern: "(" }])),
      "verifiers[0].pattern",
      /not a valid regular expression/,
    ],
    ["regex flags", () => defineExperiment(withField("verifiers", [{ type: "regex", pattern: "a", flags: "g" }])), "verifiers[0].flags", /any of i, m, s, u/],
    [
      "json schema both",
      () => defineExperiment(withField("verifiers", [{ type: "json_schema", schema: {}, schema_file: "x" }])),
      "verifiers[0].schema",
      /one of them/,
    ],
    [
      "json schema invalid",
      () => defineExperiment(withField("verifiers", [{ type: "json_schema", schema: { type: 12 } }])),
      "verifiers[0].schema",
      /not a valid JSON Schema/,
    ],
    ["numeric tolerance", () => defineExperiment(withField("verifiers", [{ type: "numeric", tolerance: -1 }])), "verifiers[0].tolerance", /number from 0/],
    ["judge rubric", () => defineExperiment(withField("verifiers", [{ type: "judge", agent: "g" }])), "verifiers[0].rubric", /is required/],
    ["judge agent", () => defineExperiment(withField("verifiers", [{ type: "judge", rubric: "r" }])), "verifiers[0].agent", /must be an id/],
    [
      "code module",
      () => defineExperiment(withField("verifiers", [{ type: "code", module: "./missing.mjs" }]), { baseDir: dir }),
      "verifiers[0].module",
      /does not exist/,
    ],
    [
      "too many cells",
      () =>
        defineExperiment({ ...withField("experiment.repetitions", 100), tasks: Array.from({ length: 201 }, (_, i) => ({ input: `q${i}`, expected: "1" })) }),
      "experiment",
      /more than 20000/,
    ],
  ];
  for (const [what, run, key, message] of cases) {
    it(`eval - a bad spec names the field: ${what}`, () => {
      const err = configError(run);
      expect(err.key).toBe(key);
      expect(err.code).toBe("INVALID_CONFIG");
      expect(err.message).toMatch(message);
    });
  }
});
