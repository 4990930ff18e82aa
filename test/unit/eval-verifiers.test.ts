import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  answerNumber,
  combineVerdicts,
  defineExperiment,
  evalTrustFrom,
  judgePrompt,
  normalizeAnswer,
  readJudgeReply,
  runCodeVerifier,
  verifyAnswer,
  type TaskSpec,
  type VerifierSpec,
} from "../../src/eval/index.js";

const dir = mkdtempSync(join(tmpdir(), "kova-eval-verifiers-"));
writeFileSync(
  join(dir, "verify.mjs"),
  [
    "export default ({ output, expected }) => ({ score: output.length <= Number(expected) ? 1 : 0.25, reason: `length ${output.length}` });",
    "export const bool = ({ output }) => output === 'yes';",
    "export const number = async () => 0.4;",
    "export const throws = () => { throw new Error('boom'); };",
    "export const wrong = () => 'nope';",
    "export const notAFunction = 3;",
  ].join("\n"),
);

/** One verifier of `type` from a spec, and a task with `expected`. */
function verifier(v: Record<string, unknown>, expected: unknown = "4"): { v: VerifierSpec; task: TaskSpec } {
  const spec = defineExperiment(
    { experiment: { name: "v" }, subjects: [{ id: "s", agent: "a" }], tasks: [{ id: "t", input: "q?", expected }], verifiers: [v] },
    { baseDir: dir },
  );
  return { v: spec.verifiers[0]!, task: spec.tasks[0]! };
}

function score(v: Record<string, unknown>, output: string, expected?: unknown): [number, boolean, string] {
  const { v: spec, task } = verifier(v, expected);
  const d = verifyAnswer(spec, output, task);
  return [d.score, d.pass, d.reason];
}

describe("verifiers", () => {
  it("eval - exact: the trimmed answer equals the expected one (or one of a list)", () => {
    expect(score({ type: "exact" }, " 4\n")).toEqual([1, true, "equal"]);
    expect(score({ type: "exact" }, "four")[0]).toBe(0);
    expect(score({ type: "exact" }, "4.0")[2]).toBe('"4.0" is not "4"');
    expect(score({ type: "exact" }, "b", ["a", "b"])[1]).toBe(true);
  });

  it("eval - normalized: case, punctuation and whitespace do not count", () => {
    expect(normalizeAnswer("  The  ANSWER: Paris!  ")).toBe("the answer paris");
    expect(score({ type: "normalized" }, "paris.", "Paris")[0]).toBe(1);
    expect(score({ type: "normalized" }, "London", "Paris")).toEqual([0, false, '"London" is not "Paris" after normalization']);
  });

  it("eval - contains: every value, case-insensitive on request", () => {
    expect(score({ type: "contains" }, "It is Paris, France", "Paris")[0]).toBe(1);
    expect(score({ type: "contains", value: ["paris", "france"], ignore_case: true }, "PARIS, FRANCE")[0]).toBe(1);
    expect(score({ type: "contains", value: ["paris", "spain"] }, "paris, france")).toEqual([0, false, 'lacks "spain"']);
  });

  it("eval - regex: the verifier's pattern or the expected one", () => {
    expect(score({ type: "regex", pattern: "^\\d+$" }, "42")[0]).toBe(1);
    expect(score({ type: "regex", pattern: "^yes$", flags: "i" }, "YES")[0]).toBe(1);
    expect(score({ type: "regex" }, "the colour", "colou?r")[0]).toBe(1);
    expect(score({ type: "regex", pattern: "^\\d+$" }, "42!")[1]).toBe(false);
  });

  it("eval - json_schema: the answer (or its fenced block) is JSON valid against the schema; the reason names the first issue", () => {
    const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
    expect(score({ type: "json_schema", schema }, '{"n": 3}')[0]).toBe(1);
    expect(score({ type: "json_schema", schema }, 'Here:\n```json\n{"n": 3}\n```\n')[0]).toBe(1);
    expect(score({ type: "json_schema", schema }, '{"n": "three"}')).toEqual([0, false, '$.n: expected integer, got "three" (string)']);
    expect(score({ type: "json_schema", schema }, "{n: 3}")[2]).toMatch(/^the answer is not JSON/);
  });

  it("eval - numeric: the whole answer or its last number, within an absolute or relative tolerance", () => {
    expect(answerNumber("1,234.5")).toBe(1234.5);
    expect(answerNumber("first 3, then the answer is -2.5e1.")).toBe(-25);
    expect(answerNumber("none")).toBeUndefined();
    expect(score({ type: "numeric" }, "The answer is 4.")[0]).toBe(1);
    expect(score({ type: "numeric", tolerance: 0.01 }, "3.995", 4)[0]).toBe(1);
    expect(score({ type: "numeric" }, "3.9", 4)).toEqual([0, false, "3.9 is 0.10000000000000009 from 4 (tolerance 1e-9)"]);
    expect(score({ type: "numeric", relative: 0.01 }, "1005", "1000")[0]).toBe(1);
    expect(score({ type: "numeric" }, "no idea")[2]).toBe('no number in "no idea"');
  });

  it("eval - a cell's score is the weighted mean of its verdicts and it passes when all pass", () => {
    const spec = defineExperiment({
      experiment: { name: "w" },
      subjects: [{ id: "s", agent: "a" }],
      tasks: [{ input: "q", expected: "4" }],
      verifiers: [{ type: "exact" }, { type: "contains", weight: 3 }],
    });
    const [exact, contains] = spec.verifiers;
    const verdicts = [verifyAnswer(exact!, "it is 4", spec.tasks[0]!), verifyAnswer(contains!, "it is 4", spec.tasks[0]!)];
    expect(combineVerdicts(spec.verifiers, verdicts)).toEqual({ score: 0.75, pass: false });
  });

  it("eval - judge: the prompt carries rubric, task, reference and answer; the last JSON score in [0,1] is read, anything else is unreadable", () => {
    const { v, task } = verifier({ type: "judge", agent: "grader", rubric: "Exactly the number.", pass_score: 0.7 });
    const judge = v as Extract<VerifierSpec, { type: "judge" }>;
    const prompt = judgePrompt(judge, task, "four");
    for (const part of ["Exactly the number.", "q?", "Reference answer:\n4", "Answer to grade:\nfour", '{"score"']) expect(prompt).toContain(part);
    expect(readJudgeReply(judge, 'Thinking... {"score": 0.2} no wait: {"score": 0.8, "reason": "close"}')).toMatchObject({
      score: 0.8,
      pass: true,
      reason: "close",
    });
    expect(readJudgeReply(judge, '{"score": 0.6}')).toMatchObject({ score: 0.6, pass: false, reason: "judged 0.6" });
    expect(readJudgeReply(judge, '{"score": 1, "pass": false, "reason": "format"}')).toMatchObject({ score: 1, pass: false });
    expect(readJudgeReply(judge, "9/10")).toBeUndefined();
    expect(readJudgeReply(judge, '{"score": 7}')).toBeUndefined();
  });

  it("eval - code: a module's function returns a verdict, a boolean or a number; a throw or a wrong value is a failed verdict naming EVAL_VERIFIER_FAILED", async () => {
    const subject = { id: "s", kind: "actor", actor: "x" } as const;
    const trust = evalTrustFrom({ verifier_dirs: [dir] }, "/");
    const run = async (exportName: string | undefined, output: string) => {
      const { v, task } = verifier({ type: "code", module: "./verify.mjs", ...(exportName ? { export: exportName } : {}) }, "5");
      return runCodeVerifier(v as Extract<VerifierSpec, { type: "code" }>, output, task, subject, trust);
    };
    expect(await run(undefined, "abc")).toMatchObject({ score: 1, pass: true, reason: "length 3" });
    expect(await run(undefined, "abcdefgh")).toMatchObject({ score: 0.25, pass: false });
    expect(await run("bool", "yes")).toMatchObject({ score: 1, pass: true });
    expect(await run("number", "x")).toMatchObject({ score: 0.4, pass: false, reason: "scored 0.4" });
    expect(await run("throws", "x")).toMatchObject({ score: 0, pass: false, reason: "EVAL_VERIFIER_FAILED: the verifier threw: boom" });
    expect((await run("wrong", "x")).reason).toMatch(/^EVAL_VERIFIER_FAILED: the verifier returned "nope"/);
    await expect(run("notAFunction", "x")).rejects.toThrow(/verifier code\.export: .*verify\.mjs has no function export "notAFunction"/);
  });

  it("eval - code: a node imports a verifier only from under its [eval] verifier_dirs, links resolved; none by default", async () => {
    const subject = { id: "s", kind: "actor", actor: "x" } as const;
    const inside = join(dir, "trusted");
    mkdirSync(inside, { recursive: true });
    writeFileSync(join(inside, "ok.mjs"), "export default () => 1;");
    symlinkSync(join(dir, "verify.mjs"), join(inside, "link.mjs"));
    const trust = evalTrustFrom({ verifier_dirs: ["./trusted"] }, dir);
    const run = (module: string, t = trust) => {
      const { v, task } = verifier({ type: "code", module }, "5");
      return runCodeVerifier(v as Extract<VerifierSpec, { type: "code" }>, "x", task, subject, t);
    };
    expect(await run("./trusted/ok.mjs")).toMatchObject({ score: 1, pass: true });
    await expect(run("./verify.mjs")).rejects.toThrow(
      `verifier code.module: ${join(dir, "verify.mjs")} is not under a directory this node imports code verifiers from ([eval] verifier_dirs: ${inside})`,
    );
    await expect(run("./trusted/link.mjs")).rejects.toThrow(/is not under a directory this node imports code verifiers from/);
    await expect(run("./trusted/ok.mjs", evalTrustFrom(undefined, dir))).rejects.toThrow(
      /^verifier code\.module: this node imports no code verifier: .*\[eval\] verifier_dirs/,
    );
  });
});
