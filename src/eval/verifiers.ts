import { pathToFileURL } from "node:url";
import { ConfigError, KovaError } from "../core/index.js";
import { validateAgainstSchema } from "../tools/index.js";
import { EvalErrorCode } from "./errors.js";
import { trustedVerifierModule, type EvalTrust } from "./node-trust.js";
import { compileRegex, type SubjectSpec, type TaskSpec, type VerifierSpec } from "./spec.js";

/**
 * Verifiers (docs/evals.md, "Verifiers"): each turns an answer into a score in [0, 1], pass
 * or fail, and a reason. The deterministic ones are pure functions of the answer and the
 * task; a judge is an agent's run; a code verifier is a function a module exports.
 */
export interface Verdict {
  id: string;
  type: string;
  score: number;
  pass: boolean;
  reason: string;
}

/** What a code verifier gets. */
export interface CodeVerifierInput {
  output: string;
  expected: unknown;
  input: string;
  metadata: Record<string, unknown>;
  task: string;
  subject: string;
}

/** What a code verifier may return: a score, a verdict, or pass/fail. */
export type CodeVerifierResult = number | boolean | { score: number; pass?: boolean; reason?: string };
export type CodeVerifier = (input: CodeVerifierInput) => CodeVerifierResult | Promise<CodeVerifierResult>;

/** How a reason quotes an answer or expectation: short enough for a table. */
function quote(s: string, max = 60): string {
  const one = s.replace(/\s+/g, " ").trim();
  return JSON.stringify(one.length > max ? `${one.slice(0, max - 1)}…` : one);
}

/** Lower case, NFKC, punctuation dropped, whitespace collapsed: how `normalized` compares. */
export function normalizeAnswer(s: string): string {
  return s
    .normalize("NFKC")
    .toLowerCase()
    .replace(/[\p{P}\p{S}]+/gu, " ")
    .replace(/\s+/g, " ")
    .trim();
}

const NUMBER = /[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?/g;

/** The number an answer gives: the whole answer when it is one, else its last number (thousands separators allowed). */
export function answerNumber(output: string): number | undefined {
  const whole = Number(output.trim().replace(/(\d),(?=\d{3}\b)/g, "$1"));
  if (output.trim() !== "" && Number.isFinite(whole)) return whole;
  const all = output.match(NUMBER);
  if (!all) return undefined;
  const n = Number(all.at(-1)!.replace(/,/g, ""));
  return Number.isFinite(n) ? n : undefined;
}

/** The JSON an answer holds: the whole answer, or its first fenced ```json block. */
function answerJson(answer: string): { ok: true; value: unknown } | { ok: false; why: string } {
  const fenced = /```(?:json)?\s*\n([\s\S]*?)```/i.exec(answer);
  const text = (fenced ? fenced[1]! : answer).trim();
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (err) {
    return { ok: false, why: `the answer is not JSON (${(err as Error).message})` };
  }
}

function expectedList(task: TaskSpec): string[] {
  const e = task.expected;
  return (Array.isArray(e) ? e : [e]).map((x) => String(x));
}

function verdict(v: VerifierSpec, score: number, reason: string, pass?: boolean): Verdict {
  const s = Math.min(1, Math.max(0, score));
  return { id: v.id, type: v.type, score: s, pass: pass ?? s >= v.passScore, reason };
}

/** True for the verifiers this module scores by itself (everything but `judge` and `code`). */
export function isDeterministic(v: VerifierSpec): boolean {
  return v.type !== "judge" && v.type !== "code";
}

/**
 * Scores an answer with a deterministic verifier.
 * @throws KovaError INTERNAL for a judge or code verifier (they run elsewhere)
 */
export function verifyAnswer(v: VerifierSpec, output: string, task: TaskSpec): Verdict {
  switch (v.type) {
    case "exact": {
      const want = expectedList(task);
      const hit = want.find((w) => w.trim() === output.trim());
      return verdict(v, hit === undefined ? 0 : 1, hit === undefined ? `${quote(output)} is not ${want.map((w) => quote(w)).join(" or ")}` : "equal");
    }
    case "normalized": {
      const want = expectedList(task);
      const got = normalizeAnswer(output);
      const hit = want.find((w) => normalizeAnswer(w) === got);
      return verdict(
        v,
        hit === undefined ? 0 : 1,
        hit === undefined ? `${quote(output)} is not ${want.map((w) => quote(w)).join(" or ")} after normalization` : "equal after normalization",
      );
    }
    case "contains": {
      const want = v.value ?? expectedList(task);
      const hay = v.ignoreCase ? output.toLowerCase() : output;
      const missing = want.filter((w) => !hay.includes(v.ignoreCase ? w.toLowerCase() : w));
      return verdict(
        v,
        missing.length === 0 ? 1 : 0,
        missing.length === 0 ? `contains ${want.map((w) => quote(w, 30)).join(", ")}` : `lacks ${missing.map((w) => quote(w, 30)).join(", ")}`,
      );
    }
    case "regex": {
      const patterns = v.pattern === undefined ? expectedList(task) : [v.pattern];
      const hit = patterns.find((p) => compileRegex(p, v.flags, `verifier ${v.id}`).test(output));
      return verdict(v, hit === undefined ? 0 : 1, hit === undefined ? `${quote(output)} does not match /${patterns.join("/ or /")}/` : `matches /${hit}/`);
    }
    case "json_schema": {
      const parsed = answerJson(output);
      if (!parsed.ok) return verdict(v, 0, parsed.why);
      const check = validateAgainstSchema(v.schema, parsed.value, `verifier ${v.id}`);
      if (check.ok) return verdict(v, 1, "valid against the schema");
      const first = check.issues[0]!;
      return verdict(
        v,
        0,
        `${first.path}: expected ${first.expected}, got ${first.given}${check.issues.length > 1 ? ` (and ${check.issues.length - 1} more)` : ""}`,
      );
    }
    case "numeric": {
      const want = typeof task.expected === "number" ? task.expected : Number(String(task.expected).trim());
      const got = answerNumber(output);
      if (got === undefined) return verdict(v, 0, `no number in ${quote(output)}`);
      const allowed = Math.max(v.tolerance, v.relative === undefined ? 0 : Math.abs(want) * v.relative);
      const off = Math.abs(got - want);
      return verdict(
        v,
        off <= allowed ? 1 : 0,
        off <= allowed ? `${got} is within ${allowed} of ${want}` : `${got} is ${off} from ${want} (tolerance ${allowed})`,
      );
    }
    default:
      throw new KovaError("INTERNAL", `verifier ${v.id} (${v.type}) is not scored by verifyAnswer`);
  }
}

/** A cell's score and pass from its verdicts: the weighted mean, and every verifier passed. */
export function combineVerdicts(verifiers: readonly VerifierSpec[], verdicts: readonly Verdict[]): { score: number; pass: boolean } {
  let total = 0;
  let weights = 0;
  for (const d of verdicts) {
    const w = verifiers.find((v) => v.id === d.id)?.weight ?? 1;
    total += d.score * w;
    weights += w;
  }
  return { score: weights === 0 ? 0 : round(total / weights), pass: verdicts.every((d) => d.pass) };
}

function round(x: number): number {
  return Math.round(x * 1e9) / 1e9;
}

/** What the judge agent is asked: the rubric, the task, the reference answer and the answer to grade. */
export function judgePrompt(v: Extract<VerifierSpec, { type: "judge" }>, task: TaskSpec, output: string): string {
  const expected =
    task.expected === undefined ? "" : `\n\nReference answer:\n${typeof task.expected === "string" ? task.expected : JSON.stringify(task.expected)}`;
  return [
    "You grade an answer against a rubric.",
    `\nRubric:\n${v.rubric}`,
    `\nTask:\n${task.input}${expected}`,
    `\nAnswer to grade:\n${output}`,
    '\nReply with only a JSON object: {"score": <a number from 0 to 1>, "pass": <true or false>, "reason": "<one sentence>"}',
  ].join("\n");
}

/**
 * Reads the judge's reply: the last JSON object in it with a numeric `score` in [0, 1].
 * @returns undefined when there is none (the verdict is unreadable)
 */
export function readJudgeReply(v: Extract<VerifierSpec, { type: "judge" }>, reply: string): Verdict | undefined {
  const candidates = reply.match(/\{[^{}]*\}/g) ?? [];
  for (const text of candidates.reverse()) {
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(text) as Record<string, unknown>;
    } catch {
      continue;
    }
    const score = typeof o.score === "number" ? o.score : typeof o.score === "string" ? Number(o.score) : Number.NaN;
    if (!Number.isFinite(score) || score < 0 || score > 1) continue;
    const reason = typeof o.reason === "string" && o.reason.trim() ? o.reason.trim() : `judged ${score}`;
    return verdict(v, score, reason, typeof o.pass === "boolean" ? o.pass : undefined);
  }
  return undefined;
}

const loaded = new Map<string, Promise<CodeVerifier>>();

/**
 * Imports a code verifier's function (once per module and export in this process), from
 * under the directories this node imports code verifiers from (`[eval] verifier_dirs`): the
 * spec names the module, the node runs it with its own powers.
 * @throws ConfigError naming the verifier's field when the module is not under those
 *   directories, cannot be imported, or its export is not a function
 */
export function loadCodeVerifier(v: Extract<VerifierSpec, { type: "code" }>, trust: EvalTrust, key = `verifier ${v.id}`): Promise<CodeVerifier> {
  let path: string;
  try {
    path = trustedVerifierModule(trust, v.module, `${key}.module`);
  } catch (err) {
    return Promise.reject(err);
  }
  const id = `${path}#${v.export}`;
  let p = loaded.get(id);
  if (!p) {
    p = import(pathToFileURL(path).href).then(
      (mod: Record<string, unknown>) => {
        const fn = mod[v.export];
        if (typeof fn !== "function") {
          throw new ConfigError(
            `${key}.export`,
            `${v.module} has no function export ${JSON.stringify(v.export)} (it exports ${Object.keys(mod).join(", ") || "nothing"})`,
          );
        }
        return fn as CodeVerifier;
      },
      (err: unknown) => {
        throw new ConfigError(`${key}.module`, `cannot import ${v.module} on this node: ${(err as Error).message}`, { cause: err });
      },
    );
    p.catch(() => loaded.delete(id));
    loaded.set(id, p);
  }
  return p;
}

/**
 * Runs a code verifier on one answer. What it throws or returns wrongly becomes a failed
 * verdict with code EVAL_VERIFIER_FAILED in its reason: the subject answered, the
 * verifier could not score it.
 * @throws ConfigError when this node may not or cannot import the module (the node's
 *   trouble, not the subject's: the experiment's start checked it on the node that started it)
 */
export async function runCodeVerifier(
  v: Extract<VerifierSpec, { type: "code" }>,
  output: string,
  task: TaskSpec,
  subject: SubjectSpec,
  trust: EvalTrust,
): Promise<Verdict> {
  const fn = await loadCodeVerifier(v, trust);
  let r: CodeVerifierResult;
  try {
    r = await fn({ output, expected: task.expected ?? null, input: task.input, metadata: task.metadata ?? {}, task: task.id, subject: subject.id });
  } catch (err) {
    return verdict(v, 0, `${EvalErrorCode.EVAL_VERIFIER_FAILED}: the verifier threw: ${(err as Error).message}`, false);
  }
  if (typeof r === "boolean") return verdict(v, r ? 1 : 0, r ? "passed" : "failed", r);
  if (typeof r === "number" && Number.isFinite(r) && r >= 0 && r <= 1) return verdict(v, r, `scored ${r}`);
  if (typeof r === "object" && r !== null && typeof r.score === "number" && Number.isFinite(r.score) && r.score >= 0 && r.score <= 1) {
    return verdict(v, r.score, typeof r.reason === "string" && r.reason ? r.reason : `scored ${r.score}`, typeof r.pass === "boolean" ? r.pass : undefined);
  }
  return verdict(
    v,
    0,
    `${EvalErrorCode.EVAL_VERIFIER_FAILED}: the verifier returned ${JSON.stringify(r)}, not a score from 0 to 1, a boolean or { score, pass?, reason? }`,
    false,
  );
}
