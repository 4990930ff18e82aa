import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, extname, isAbsolute, resolve } from "node:path";
import {
  ConfigError,
  isScoped,
  closeMatches,
  parseTomlText,
  describeValue,
  durationMs,
  intValue,
  rejectUnknown,
  stringList,
  stringValue,
  tableAt,
  tablesAt,
  type ConfigTable,
} from "../core/index.js";
import { parseModelsConfig } from "../agents/index.js";
import { compileArgumentSchema, type JsonSchema } from "../tools/index.js";

/**
 * The experiment spec (docs/evals.md, "Spec"): TOML, JSON or `defineExperiment`, all in the
 * shape of the file (snake_case keys). It is expanded here, before anything runs — datasets
 * read, schema files read, paths made absolute, defaults filled in — and what runs is the
 * expanded spec, stored with the experiment. Every error is a ConfigError naming the key as
 * written (`subjects[1].temperature`, `qa.jsonl:17.expected`) and the fix.
 */

/** Format version of a stored expanded spec. */
export const EXPERIMENT_SPEC_VERSION = 1;

/** A name, subject id, task id or verifier id: one KV key token. */
const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
/** An experiment name: the experiment id is `<name>-<8 hex>` and must leave room for cell run ids. */
const NAME = /^[A-Za-z0-9_-]{1,48}$/;
/** Most cells one experiment may have: its scheduler's state holds a few bytes per cell in every checkpoint. */
export const MAX_CELLS = 20_000;
export const DEFAULT_CONCURRENCY = 8;
export const DEFAULT_TIMEOUT_MS = 600_000;
export const DEFAULT_MAX_ATTEMPTS = 3;

export interface ExperimentBudget {
  /** Input + output tokens of every attempt, subjects and judges. */
  maxTokens?: number;
  maxCostUsd?: number;
  /** From the start (or a resume) to the stop. */
  maxWallTimeMs?: number;
}

/** What an agent subject changes of the agent's definition. */
export interface AgentOverrides {
  model?: string;
  system?: string;
  tools?: string[];
  temperature?: number;
  maxOutputTokens?: number;
}

/** A declared agent (or agent template), run as instances of its definition with the overrides. */
export interface AgentSubject {
  id: string;
  kind: "agent";
  agent: string;
  overrides: AgentOverrides;
}

/** Any actor speaking the agent protocol (a swarm coordinator), delegated to as it is. */
export interface ActorSubject {
  id: string;
  kind: "actor";
  actor: string;
}

/** An OpenAI-compatible endpoint. `openai` is the table as written (a `[models.<name>]` table), read again on the node that calls it. */
export interface OpenAiSubject {
  id: string;
  kind: "openai";
  openai: ConfigTable;
  system?: string;
  temperature?: number;
  maxOutputTokens?: number;
}

/** An A2A agent by URL (its JSON-RPC endpoint). */
export interface A2aSubject {
  id: string;
  kind: "a2a";
  url: string;
  /** Header name → environment variable holding its value (read on the node that calls). */
  headersEnv?: Record<string, string>;
}

export type SubjectSpec = AgentSubject | ActorSubject | OpenAiSubject | A2aSubject;

export interface TaskSpec {
  id: string;
  input: string;
  expected?: unknown;
  metadata?: Record<string, unknown>;
}

interface VerifierBase {
  id: string;
  weight: number;
  /** The score from which the verifier passes. */
  passScore: number;
}
export type VerifierSpec = VerifierBase &
  (
    | { type: "exact" }
    | { type: "normalized" }
    | { type: "contains"; value?: string[]; ignoreCase: boolean }
    | { type: "regex"; pattern?: string; flags: string }
    | { type: "json_schema"; schema: JsonSchema }
    | { type: "numeric"; tolerance: number; relative?: number }
    | { type: "judge"; agent: string; rubric: string; model?: string }
    | { type: "code"; module: string; export: string }
  );
export type VerifierType = VerifierSpec["type"];
export const VERIFIER_TYPES: readonly VerifierType[] = ["exact", "normalized", "contains", "regex", "json_schema", "numeric", "judge", "code"];

/** An experiment spec, expanded: what runs and what is stored. */
export interface ExperimentSpec {
  v: number;
  name: string;
  description?: string;
  repetitions: number;
  /** Cells in flight across the cluster. */
  concurrency: number;
  /** Cells in flight per subject. */
  perSubject: number;
  /** Per attempt. */
  timeoutMs: number;
  /** Attempts per cell, the first included. */
  maxAttempts: number;
  budget: ExperimentBudget;
  subjects: SubjectSpec[];
  tasks: TaskSpec[];
  verifiers: VerifierSpec[];
}

/** A cell's coordinates. */
export interface CellRef {
  index: number;
  subject: number;
  task: number;
  repetition: number;
}

/** The agents and actors a spec names: its agent and actor subjects, and its judges. */
export function agentsNamed(spec: Pick<ExperimentSpec, "subjects" | "verifiers">): string[] {
  const named = [
    ...spec.subjects.flatMap((s) => (s.kind === "agent" ? [s.agent] : s.kind === "actor" ? [s.actor] : [])),
    ...spec.verifiers.flatMap((v) => (v.type === "judge" ? [v.agent] : [])),
  ];
  return [...new Set(named)];
}

export function cellCount(spec: Pick<ExperimentSpec, "subjects" | "tasks" | "repetitions">): number {
  return spec.subjects.length * spec.tasks.length * spec.repetitions;
}

/**
 * Cells are numbered subject by subject, and within a subject repetition-major (every task
 * once, then again), which is the order a subject's cells are dispatched in.
 */
export function cellRef(spec: Pick<ExperimentSpec, "tasks" | "repetitions">, index: number): CellRef {
  const perSubject = spec.tasks.length * spec.repetitions;
  const subject = Math.floor(index / perSubject);
  const within = index % perSubject;
  return { index, subject, repetition: Math.floor(within / spec.tasks.length), task: within % spec.tasks.length };
}

export function cellIndex(spec: Pick<ExperimentSpec, "tasks" | "repetitions">, subject: number, task: number, repetition: number): number {
  return subject * spec.tasks.length * spec.repetitions + repetition * spec.tasks.length + task;
}

/** SHA-256 of the spec's JSON with sorted keys: names the spec an experiment runs (checked when it is read back). */
export function specDigest(spec: ExperimentSpec): string {
  const canonical = (x: unknown): unknown =>
    Array.isArray(x)
      ? x.map(canonical)
      : typeof x === "object" && x !== null
        ? Object.fromEntries(
            Object.keys(x)
              .sort()
              .map((k) => [k, canonical((x as Record<string, unknown>)[k])]),
          )
        : x;
  return createHash("sha256")
    .update(JSON.stringify(canonical(spec)))
    .digest("hex");
}

export interface ExpandOptions {
  /** Anchors relative paths (`dataset`, `schema_file`, `module`); default the current directory. */
  baseDir?: string;
}

/**
 * Declares an experiment in code, in the shape of a spec file, and expands it.
 * @throws ConfigError naming the field and the fix
 */
export function defineExperiment(raw: Record<string, unknown>, opts: ExpandOptions = {}): ExperimentSpec {
  return expandExperiment(raw, opts);
}

/**
 * Parses a spec file's text: TOML, or JSON for a `.json` file name.
 * @throws ConfigError naming the file for a syntax error, or the field at fault
 */
export function parseExperimentText(text: string, fileName = "experiment.toml", opts: ExpandOptions = {}): ExperimentSpec {
  let raw: unknown;
  if (extname(fileName).toLowerCase() === ".json") {
    try {
      raw = JSON.parse(text);
    } catch (err) {
      throw new ConfigError(fileName, `cannot parse: ${(err as Error).message}; fix the syntax there`, { cause: err });
    }
  } else raw = parseTomlText(text, fileName);
  return expandExperiment(tableAt(raw, fileName), opts);
}

/**
 * Reads and expands a spec file (relative paths in it are relative to the file).
 * @throws ConfigError for an unreadable, unparsable or invalid file
 */
export async function loadExperimentFile(path: string): Promise<ExperimentSpec> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new ConfigError(path, `cannot read the experiment file (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path`, { cause: err });
  }
  return parseExperimentText(text, path, { baseDir: dirname(resolve(path)) });
}

const TOP_KEYS = ["experiment", "budget", "subjects", "tasks", "verifiers"];
const EXPERIMENT_KEYS = ["name", "description", "repetitions", "concurrency", "per_subject", "timeout", "max_attempts", "dataset"];

function expandExperiment(doc: ConfigTable, opts: ExpandOptions): ExperimentSpec {
  const baseDir = opts.baseDir ?? process.cwd();
  rejectUnknown(doc, TOP_KEYS, "");
  const head = tableAt(doc.experiment ?? {}, "experiment");
  rejectUnknown(head, EXPERIMENT_KEYS, "experiment.");
  const name = stringValue(head.name, "experiment.name");
  if (name === undefined)
    throw new ConfigError("experiment.name", 'is required: a name of [A-Za-z0-9_-], e.g. name = "prompt-v2" (the experiment id is <name>-<8 hex>)');
  if (!NAME.test(name)) throw new ConfigError("experiment.name", `${JSON.stringify(name)}: use 1-48 characters from [A-Za-z0-9_-]`);
  // An id in a principal's scope is that principal's (docs/security.md): a name may not pass for one.
  if (isScoped(name)) throw new ConfigError("experiment.name", `${JSON.stringify(name)} reads as an owner scope (o<12 hex>_…): choose another name`);
  const concurrency = intValue(head.concurrency, "experiment.concurrency", 1, 1000) ?? DEFAULT_CONCURRENCY;
  const perSubject = intValue(head.per_subject, "experiment.per_subject", 1, 1000) ?? concurrency;
  if (perSubject > concurrency) {
    throw new ConfigError(
      "experiment.per_subject",
      `is ${perSubject}, more than concurrency (${concurrency}): a subject cannot have more cells in flight than the experiment`,
    );
  }
  const tasks = [...datasetTasks(head.dataset, baseDir), ...inlineTasks(doc.tasks)];
  if (tasks.length === 0) {
    throw new ConfigError("tasks", 'an experiment needs tasks: [[tasks]] with id, input and expected, or experiment.dataset = "./tasks.jsonl"');
  }
  uniqueIds(tasks, (i) => taskKey(tasks[i]!, i), "task");
  const subjects = tablesAt(
    doc.subjects,
    "subjects",
    'write each subject as [[subjects]] with id and one of agent, actor, openai or a2a, e.g. id = "base", agent = "helper"',
  ).map(({ table, key }) => parseSubject(table, key));
  if (subjects.length === 0)
    throw new ConfigError("subjects", 'an experiment needs at least one subject: [[subjects]] with id = "base" and agent = "<agent id>"');
  uniqueIds(subjects, (i) => `subjects[${i}]`, "subject");
  const verifiers = tablesAt(doc.verifiers, "verifiers", 'write each verifier as [[verifiers]] with a type, e.g. type = "exact"').map(({ table, key }, i) =>
    parseVerifier(table, key, i, baseDir),
  );
  if (verifiers.length === 0)
    throw new ConfigError(
      "verifiers",
      'an experiment needs at least one verifier: [[verifiers]] with type = "exact" (or normalized, contains, regex, json_schema, numeric, judge, code)',
    );
  uniqueIds(verifiers, (i) => `verifiers[${i}]`, "verifier");
  checkExpected(tasks, verifiers);
  const spec: ExperimentSpec = {
    v: EXPERIMENT_SPEC_VERSION,
    name,
    ...(head.description === undefined ? {} : { description: stringValue(head.description, "experiment.description")! }),
    repetitions: intValue(head.repetitions, "experiment.repetitions", 1, 100) ?? 1,
    concurrency,
    perSubject,
    timeoutMs: head.timeout === undefined ? DEFAULT_TIMEOUT_MS : durationMs(head.timeout, "experiment.timeout"),
    maxAttempts: intValue(head.max_attempts, "experiment.max_attempts", 1, 10) ?? DEFAULT_MAX_ATTEMPTS,
    budget: parseBudget(doc.budget),
    subjects,
    tasks,
    verifiers,
  };
  const cells = cellCount(spec);
  if (cells > MAX_CELLS) {
    throw new ConfigError(
      "experiment",
      `${subjects.length} subjects × ${tasks.length} tasks × ${spec.repetitions} repetitions is ${cells} cells, more than ${MAX_CELLS}: split it into several experiments`,
    );
  }
  return spec;
}

function uniqueIds(items: ReadonlyArray<{ id: string }>, keyOf: (i: number) => string, what: string): void {
  const seen = new Map<string, number>();
  items.forEach((item, i) => {
    const before = seen.get(item.id);
    if (before !== undefined)
      throw new ConfigError(`${keyOf(i)}.id`, `${what} id ${JSON.stringify(item.id)} is also ${keyOf(before)}'s: give each ${what} its own id`);
    seen.set(item.id, i);
  });
}

function tokenAt(value: unknown, key: string, example: string): string {
  const s = stringValue(value, key);
  if (s === undefined) throw new ConfigError(key, `is required: ${example}`);
  if (!TOKEN.test(s)) throw new ConfigError(key, `${JSON.stringify(s)}: use 1-64 characters from [A-Za-z0-9_-] (it is part of record keys)`);
  return s;
}

function numberIn(value: unknown, key: string, min: number, max: number, minOpen = false): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max || (minOpen && value === min)) {
    throw new ConfigError(key, `must be a number ${minOpen ? "above" : "from"} ${min}${Number.isFinite(max) ? ` to ${max}` : ""}, not ${describeValue(value)}`);
  }
  return value;
}

function parseBudget(raw: unknown): ExperimentBudget {
  if (raw === undefined) return {};
  const t = tableAt(raw, "budget");
  rejectUnknown(t, ["max_tokens", "max_cost_usd", "max_wall_time"], "budget.");
  const out: ExperimentBudget = {};
  const tokens = intValue(t.max_tokens, "budget.max_tokens", 1, Number.MAX_SAFE_INTEGER);
  if (tokens !== undefined) out.maxTokens = tokens;
  const cost = numberIn(t.max_cost_usd, "budget.max_cost_usd", 0, Number.POSITIVE_INFINITY, true);
  if (cost !== undefined) out.maxCostUsd = cost;
  if (t.max_wall_time !== undefined) out.maxWallTimeMs = durationMs(t.max_wall_time, "budget.max_wall_time");
  return out;
}

const SUBJECT_KINDS = ["agent", "actor", "openai", "a2a"] as const;
const AGENT_KEYS = ["id", "agent", "model", "system", "tools", "temperature", "max_output_tokens"];

function parseSubject(t: ConfigTable, key: string): SubjectSpec {
  const kinds = SUBJECT_KINDS.filter((k) => t[k] !== undefined);
  if (kinds.length !== 1) {
    throw new ConfigError(
      key,
      kinds.length === 0
        ? 'names no subject: give one of agent = "<agent id>", actor = "<actor id>", openai = { base_url, model }, a2a = "<url>"'
        : `names ${kinds.join(" and ")}: a subject is one of agent, actor, openai or a2a; split it into several subjects`,
    );
  }
  const id = tokenAt(t.id, `${key}.id`, 'a name for the report, e.g. id = "base"');
  const kind = kinds[0]!;
  if (kind === "agent") {
    rejectUnknown(t, AGENT_KEYS, `${key}.`);
    return { id, kind, agent: idAt(t.agent, `${key}.agent`), overrides: overrides(t, key) };
  }
  if (kind === "actor") {
    rejectUnknown(t, ["id", "actor"], `${key}.`);
    return { id, kind, actor: idAt(t.actor, `${key}.actor`) };
  }
  if (kind === "openai") {
    rejectUnknown(t, ["id", "openai", "system", "temperature", "max_output_tokens"], `${key}.`);
    const table = tableAt(t.openai, `${key}.openai`);
    if (table.api_key_file !== undefined) {
      throw new ConfigError(
        `${key}.openai.api_key_file`,
        "a spec may not name a file of the nodes (its contents would go to the spec's endpoint): use api_key_env, a variable the nodes' [eval.env] lets go to base_url",
      );
    }
    // Checked as a [models.<name>] table; the API key is read on the node that calls the
    // endpoint, so here any variable it names counts as set.
    const everyVariableSet = new Proxy({}, { get: () => "checked-on-the-node" }) as NodeJS.ProcessEnv;
    try {
      parseModelsConfig({ [id]: table }, { env: everyVariableSet });
    } catch (err) {
      if (err instanceof ConfigError)
        throw new ConfigError(`${key}.openai${err.key.slice(`models.${id}`.length)}`, err.message.slice(err.key.length + 2), { cause: err });
      throw err;
    }
    const o = overrides(t, key);
    return {
      id,
      kind,
      openai: JSON.parse(JSON.stringify(table)) as ConfigTable,
      ...(o.system === undefined ? {} : { system: o.system }),
      ...(o.temperature === undefined ? {} : { temperature: o.temperature }),
      ...(o.maxOutputTokens === undefined ? {} : { maxOutputTokens: o.maxOutputTokens }),
    };
  }
  rejectUnknown(t, ["id", "a2a", "headers_env"], `${key}.`);
  const url = urlAt(t.a2a, `${key}.a2a`);
  const subject: A2aSubject = { id, kind, url };
  if (t.headers_env !== undefined) {
    const h = tableAt(t.headers_env, `${key}.headers_env`);
    subject.headersEnv = {};
    for (const [name, env] of Object.entries(h)) {
      if (typeof env !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(env)) {
        throw new ConfigError(
          `${key}.headers_env.${name}`,
          `must name an environment variable holding the header's value (e.g. "A2A_TOKEN"), not ${describeValue(env)}`,
        );
      }
      subject.headersEnv[name] = env;
    }
  }
  return subject;
}

function idAt(value: unknown, key: string): string {
  const s = stringValue(value, key);
  if (s === undefined || !/^[A-Za-z0-9_-]{1,128}$/.test(s)) throw new ConfigError(key, `must be an id of [A-Za-z0-9_-], not ${describeValue(value)}`);
  return s;
}

function urlAt(value: unknown, key: string): string {
  const s = stringValue(value, key);
  let url: URL | undefined;
  try {
    url = s === undefined ? undefined : new URL(s);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new ConfigError(key, `must be an http(s) URL of the agent's JSON-RPC endpoint, not ${describeValue(value)}`);
  }
  return s!;
}

function overrides(t: ConfigTable, key: string): AgentOverrides {
  const o: AgentOverrides = {};
  const model = stringValue(t.model, `${key}.model`);
  if (model !== undefined) o.model = idAt(model, `${key}.model`);
  const system = t.system === undefined ? undefined : typeof t.system === "string" ? t.system : undefined;
  if (t.system !== undefined && system === undefined)
    throw new ConfigError(`${key}.system`, `must be a string (the system prompt), not ${describeValue(t.system)}`);
  if (system !== undefined) o.system = system;
  const tools = stringList(t.tools, `${key}.tools`, '["calculator", "mcp:everything/*"]');
  if (tools !== undefined) o.tools = tools;
  const temperature = numberIn(t.temperature, `${key}.temperature`, 0, 2);
  if (temperature !== undefined) o.temperature = temperature;
  const maxOut = intValue(t.max_output_tokens, `${key}.max_output_tokens`, 1, 10_000_000);
  if (maxOut !== undefined) o.maxOutputTokens = maxOut;
  return o;
}

/** Where a task came from, for errors: `tasks[2]` or `qa.jsonl:17`. */
const origins = new WeakMap<TaskSpec, string>();
function taskKey(task: TaskSpec, i: number): string {
  return origins.get(task) ?? `tasks[${i}]`;
}

function readTask(t: ConfigTable, key: string, defaultId: string): TaskSpec {
  rejectUnknown(t, ["id", "input", "expected", "metadata"], `${key}.`);
  const id = t.id === undefined ? defaultId : tokenAt(t.id, `${key}.id`, 'e.g. id = "q1"');
  if (typeof t.input !== "string" || t.input.trim() === "") {
    throw new ConfigError(`${key}.input`, `is required: the task as text, e.g. input = "What is 2 + 2?" (got ${describeValue(t.input)})`);
  }
  const task: TaskSpec = { id, input: t.input };
  if (t.expected !== undefined) task.expected = jsonValue(t.expected, `${key}.expected`);
  if (t.metadata !== undefined) task.metadata = jsonValue(tableAt(t.metadata, `${key}.metadata`), `${key}.metadata`) as Record<string, unknown>;
  origins.set(task, key);
  return task;
}

/** A value that survives JSON (TOML dates do not: they would change on the way to the nodes). */
function jsonValue(v: unknown, key: string): unknown {
  const walk = (x: unknown, path: string): void => {
    if (x === null || typeof x === "string" || typeof x === "boolean") return;
    if (typeof x === "number") {
      if (!Number.isFinite(x)) throw new ConfigError(path, "must be a finite number");
      return;
    }
    if (Array.isArray(x)) {
      for (const [i, e] of x.entries()) walk(e, `${path}[${i}]`);
      return;
    }
    if (typeof x === "object" && Object.getPrototypeOf(x) === Object.prototype) {
      for (const [k, e] of Object.entries(x as object)) walk(e, `${path}.${k}`);
      return;
    }
    throw new ConfigError(path, `must be JSON (a string, number, boolean, array or table), not ${describeValue(x)}: write dates as strings`);
  };
  walk(v, key);
  return v;
}

function inlineTasks(raw: unknown): TaskSpec[] {
  return tablesAt(raw, "tasks", 'write each task as [[tasks]] with id, input and expected, e.g. input = "2 + 2?", expected = "4"').map(({ table, key }, i) =>
    readTask(table, key, `t${i + 1}`),
  );
}

function datasetTasks(raw: unknown, baseDir: string): TaskSpec[] {
  const file = stringValue(raw, "experiment.dataset");
  if (file === undefined) return [];
  const path = isAbsolute(file) ? file : resolve(baseDir, file);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(
      "experiment.dataset",
      `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path (relative to the spec file)`,
      {
        cause: err,
      },
    );
  }
  const tasks: TaskSpec[] = [];
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const key = `${file}:${i + 1}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      throw new ConfigError(key, `is not JSON (${(err as Error).message}): each line is one task, {"id": "q1", "input": "...", "expected": "..."}`);
    }
    tasks.push(readTask(tableAt(value, key), key, `t${i + 1}`));
  });
  if (tasks.length === 0) throw new ConfigError("experiment.dataset", `${path} holds no task: one JSON object per line, {"input": "...", "expected": "..."}`);
  return tasks;
}

const COMMON_VERIFIER_KEYS = ["type", "id", "weight", "pass_score"];
const VERIFIER_KEYS: Record<VerifierType, string[]> = {
  exact: [],
  normalized: [],
  contains: ["value", "ignore_case"],
  regex: ["pattern", "flags"],
  json_schema: ["schema", "schema_file"],
  numeric: ["tolerance", "relative"],
  judge: ["agent", "rubric", "model"],
  code: ["module", "export"],
};

function parseVerifier(t: ConfigTable, key: string, index: number, baseDir: string): VerifierSpec {
  const type = stringValue(t.type, `${key}.type`);
  if (type === undefined || !(VERIFIER_TYPES as readonly string[]).includes(type)) {
    const hint = type === undefined ? [] : closeMatches(type, VERIFIER_TYPES, 1);
    throw new ConfigError(
      `${key}.type`,
      `${type === undefined ? "is required" : `${JSON.stringify(type)} is no verifier type`}${hint.length ? ` (did you mean ${hint[0]}?)` : ""}: use one of ${VERIFIER_TYPES.join(", ")}`,
    );
  }
  const vt = type as VerifierType;
  rejectUnknown(t, [...COMMON_VERIFIER_KEYS, ...VERIFIER_KEYS[vt]], `${key}.`);
  const id = t.id === undefined ? (index === 0 ? vt : `${vt}-${index}`) : tokenAt(t.id, `${key}.id`, 'e.g. id = "format"');
  const weight = numberIn(t.weight, `${key}.weight`, 0, Number.POSITIVE_INFINITY, true) ?? 1;
  const graded = vt === "judge" || vt === "code";
  const passScore = numberIn(t.pass_score, `${key}.pass_score`, 0, 1) ?? (graded ? 0.5 : 1);
  const base = { id, weight, passScore };
  switch (vt) {
    case "exact":
    case "normalized":
      return { ...base, type: vt };
    case "contains": {
      const value = t.value === undefined ? undefined : typeof t.value === "string" ? [t.value] : stringList(t.value, `${key}.value`, '["Paris", "France"]');
      const ignoreCase = t.ignore_case === undefined ? false : t.ignore_case === true ? true : t.ignore_case === false ? false : undefined;
      if (ignoreCase === undefined) throw new ConfigError(`${key}.ignore_case`, `must be true or false, not ${describeValue(t.ignore_case)}`);
      return { ...base, type: vt, ...(value ? { value } : {}), ignoreCase };
    }
    case "regex": {
      const pattern = stringValue(t.pattern, `${key}.pattern`);
      const flags = stringValue(t.flags, `${key}.flags`) ?? "";
      if (!/^[imsu]*$/.test(flags))
        throw new ConfigError(`${key}.flags`, `${JSON.stringify(flags)}: use any of i, m, s, u (g and y make no sense for one match)`);
      if (pattern !== undefined) compileRegex(pattern, flags, `${key}.pattern`);
      return { ...base, type: vt, ...(pattern === undefined ? {} : { pattern }), flags };
    }
    case "json_schema": {
      if ((t.schema === undefined) === (t.schema_file === undefined)) {
        throw new ConfigError(
          `${key}.schema`,
          'give the JSON Schema inline (schema = { type = "object", ... }) or as schema_file = "./answer.schema.json", one of them',
        );
      }
      let schema: unknown = t.schema;
      let where = `${key}.schema`;
      if (t.schema_file !== undefined) {
        where = `${key}.schema_file`;
        const file = stringValue(t.schema_file, where)!;
        const path = isAbsolute(file) ? file : resolve(baseDir, file);
        try {
          schema = JSON.parse(readFileSync(path, "utf8"));
        } catch (err) {
          throw new ConfigError(where, `cannot read ${path} as JSON (${(err as Error).message}): check the path (relative to the spec file)`, { cause: err });
        }
      }
      const s = jsonValue(tableAt(schema, where), where) as JsonSchema;
      try {
        compileArgumentSchema(where, s);
      } catch (err) {
        throw new ConfigError(where, `is not a valid JSON Schema: ${(err as Error).message}`, { cause: err });
      }
      return { ...base, type: vt, schema: s };
    }
    case "numeric": {
      const tolerance = numberIn(t.tolerance, `${key}.tolerance`, 0, Number.POSITIVE_INFINITY) ?? 1e-9;
      const relative = numberIn(t.relative, `${key}.relative`, 0, Number.POSITIVE_INFINITY);
      return { ...base, type: vt, tolerance, ...(relative === undefined ? {} : { relative }) };
    }
    case "judge": {
      const rubric = stringValue(t.rubric, `${key}.rubric`);
      if (rubric === undefined) throw new ConfigError(`${key}.rubric`, 'is required: what the judge grades on, e.g. rubric = "Correct and under 50 words"');
      const model = t.model === undefined ? undefined : idAt(t.model, `${key}.model`);
      return { ...base, type: vt, agent: idAt(t.agent, `${key}.agent`), rubric, ...(model ? { model } : {}) };
    }
    case "code": {
      const file = stringValue(t.module, `${key}.module`);
      if (file === undefined)
        throw new ConfigError(`${key}.module`, 'is required: the path of an ES module exporting the verifier function, e.g. module = "./verify.mjs"');
      const path = isAbsolute(file) ? file : resolve(baseDir, file);
      if (!existsSync(path)) throw new ConfigError(`${key}.module`, `${path} does not exist: check the path (relative to the spec file)`);
      const exportName = stringValue(t.export, `${key}.export`) ?? "default";
      return { ...base, type: vt, module: path, export: exportName };
    }
  }
}

/** @throws ConfigError naming `key` for a pattern JavaScript cannot compile */
export function compileRegex(pattern: string, flags: string, key: string): RegExp {
  try {
    return new RegExp(pattern, flags);
  } catch (err) {
    throw new ConfigError(key, `is not a valid regular expression: ${(err as Error).message}`);
  }
}

/** Which verifiers read the task's `expected`, and whether it may be missing. */
function checkExpected(tasks: readonly TaskSpec[], verifiers: readonly VerifierSpec[]): void {
  tasks.forEach((task, i) => {
    for (const v of verifiers) {
      const needs =
        v.type === "exact" ||
        v.type === "normalized" ||
        v.type === "numeric" ||
        (v.type === "contains" && !v.value) ||
        (v.type === "regex" && v.pattern === undefined);
      const key = `${taskKey(task, i)}.expected`;
      if (needs && task.expected === undefined) {
        throw new ConfigError(
          key,
          `is required by verifier ${v.id} (${v.type}): give the task's expected answer, or the verifier its own ${v.type === "regex" ? "pattern" : "value"}`,
        );
      }
      if (!needs || task.expected === undefined) continue;
      const values = Array.isArray(task.expected) ? task.expected : [task.expected];
      if (v.type === "numeric") {
        if (Array.isArray(task.expected) || !Number.isFinite(typeof task.expected === "number" ? task.expected : Number(String(task.expected).trim()))) {
          throw new ConfigError(key, `verifier ${v.id} (numeric) needs a number here, not ${describeValue(task.expected)}`);
        }
      } else if (values.length === 0 || values.some((e) => typeof e !== "string" && typeof e !== "number")) {
        throw new ConfigError(key, `verifier ${v.id} (${v.type}) needs a string (or an array of strings) here, not ${describeValue(task.expected)}`);
      }
      if (v.type === "regex") for (const p of values) compileRegex(String(p), v.flags, key);
    }
  });
}
