import { readFile } from "node:fs/promises";
import { extname } from "node:path";
import { closeMatches, durationMs, isKovaError, isValidId, parseTomlText } from "../core/index.js";
import { conditionPaths, parseCondition } from "./condition.js";
import { WorkflowDefinitionError, WorkflowInputError } from "./errors.js";
import { parseTemplate, type Placeholder, type TemplatePart } from "./template.js";

/**
 * Workflow definitions: what a workflow file says (TOML or JSON, docs/workflows.md), checked
 * and normalised at load, before any run starts. Every error names the workflow, the step
 * and the field. The normalised form is plain JSON: a run keeps it in its state, so a run
 * never depends on the file after it started.
 */

/** What a step does when it fails. Default: abort (the run fails). */
export type ErrorStrategy =
  | { strategy: "abort" }
  | { strategy: "skip" }
  | { strategy: "retry"; attempts: number; backoffMs: number; maxBackoffMs: number }
  | { strategy: "fallback"; step: StepDef };

interface StepBase {
  /** Unique in the workflow; inline steps without an id get `<parent>.<n>` (a dot: never a user id). */
  id: string;
  onError?: ErrorStrategy;
}

export interface AgentStep extends StepBase {
  type: "agent";
  agent: string;
  /** Template of the task text sent to the agent (`input` of task_delegate). */
  task: string;
  /** No result within this time fails the attempt (STEP_TIMEOUT). */
  timeoutMs?: number;
  /** Passed to the agent as task_delegate `constraints`. */
  constraints?: { max_tokens?: number; deadline?: string | number; budget_group?: string };
}

export interface ParallelStep extends StepBase {
  type: "parallel";
  branches: StepDef[];
}

export interface BranchStep extends StepBase {
  type: "branch";
  if: string;
  /** `then` in the file (renamed: an object with a `then` field would look like a promise). */
  whenTrue: StepDef[];
  /** `else` in the file. */
  whenFalse: StepDef[];
}

export interface WaitStep extends StepBase {
  type: "wait";
  for: "approval" | "event" | "timer";
  /** `for = "event"`: the signal name that ends the wait (`kova workflow signal`). */
  event?: string;
  /**
   * `for = "event"`: a NATS subject (a template) whose next message ends the wait; its data
   * is the step's output. Captured by a stream from the moment the wait begins
   * (subject-waits.ts), so a message published while no node hosts the run is not missed.
   */
  subject?: string;
  /** approval and event: fail with WAIT_TIMEOUT after this long. */
  timeoutMs?: number;
  /** `for = "timer"`: how long to wait. */
  durationMs?: number;
  /** Shown with an approval request. */
  message?: string;
}

export interface LoopStep extends StepBase {
  type: "loop";
  steps: StepDef[];
  while?: string;
  until?: string;
  maxIterations: number;
}

export interface FailStep extends StepBase {
  type: "fail";
  message: string;
}

export type StepDef = AgentStep | ParallelStep | BranchStep | WaitStep | LoopStep | FailStep;
export type StepType = StepDef["type"];

export type InputType = "string" | "number" | "integer" | "boolean" | "object" | "array" | "any";

export interface InputSpec {
  type: InputType;
  required: boolean;
  default?: unknown;
}

export interface WorkflowDefinition {
  v: 1;
  id: string;
  description?: string;
  input: Record<string, InputSpec>;
  steps: StepDef[];
}

export const WORKFLOW_DEFINITION_VERSION = 1;
const INPUT_TYPES: readonly InputType[] = ["string", "number", "integer", "boolean", "object", "array", "any"];
const DEFAULT_ATTEMPTS = 3;
const DEFAULT_BACKOFF_MS = 1000;
const DEFAULT_MAX_BACKOFF_MS = 60_000;
const DEFAULT_MAX_ITERATIONS = 10;
const MAX_ITERATIONS = 1000;
/** Step ids end up in message ids (`<runId>-…`) and approval ids: keep them short. */
const MAX_STEP_ID = 64;

type Raw = Record<string, unknown>;

const STEP_KEYS: Record<StepType, readonly string[]> = {
  agent: ["id", "type", "agent", "task", "input", "timeout", "constraints", "on_error"],
  parallel: ["id", "type", "branches", "on_error"],
  branch: ["id", "type", "if", "then", "else", "on_error"],
  wait: ["id", "type", "for", "event", "subject", "timeout", "duration", "message", "on_error"],
  loop: ["id", "type", "steps", "while", "until", "max_iterations", "on_error"],
  fail: ["id", "type", "fail", "on_error"],
};

class Checker {
  /** Every step id, user-given or generated, with where it was declared. */
  readonly ids = new Map<string, string>();
  readonly refs: Array<{ step: string; field: string; ref: Placeholder; template: string }> = [];

  constructor(readonly workflow: string | undefined) {}

  fail(step: string | undefined, field: string, message: string): never {
    throw new WorkflowDefinitionError({ ...(this.workflow ? { workflow: this.workflow } : {}), ...(step ? { step } : {}), field }, message);
  }

  table(value: unknown, step: string | undefined, field: string): Raw {
    if (typeof value !== "object" || value === null || Array.isArray(value) || value instanceof Date) {
      this.fail(step, field, `must be a table ({ ... }), not ${describe(value)}`);
    }
    return value as Raw;
  }

  string(value: unknown, step: string | undefined, field: string): string {
    if (typeof value !== "string" || value.length === 0) this.fail(step, field, `must be a non-empty string, not ${describe(value)}`);
    return value as string;
  }

  duration(value: unknown, step: string | undefined, field: string): number {
    try {
      return durationMs(value, field);
    } catch {
      return this.fail(step, field, `must be a duration: milliseconds, or a string like "500ms", "30s", "15m", "24h", not ${describe(value)}`);
    }
  }

  known(t: Raw, allowed: readonly string[], step: string | undefined, prefix: string): void {
    for (const k of Object.keys(t)) {
      if (!allowed.includes(k)) {
        const hint = closeMatches(k, allowed, 1)[0];
        this.fail(step, `${prefix}${k}`, `unknown key${hint ? `: did you mean ${hint}?` : `; allowed here: ${allowed.join(", ")}`}`);
      }
    }
  }

  template(text: string, step: string, field: string): TemplatePart[] {
    try {
      const parts = parseTemplate(text, step);
      for (const p of parts) if (typeof p !== "string") this.refs.push({ step, field, ref: p, template: text });
      return parts;
    } catch (err) {
      if (isKovaError(err)) this.fail(step, field, err.message);
      throw err;
    }
  }

  condition(text: string, step: string, field: string): void {
    try {
      for (const ref of conditionPaths(parseCondition(text, step))) this.refs.push({ step, field, ref, template: text });
    } catch (err) {
      if (isKovaError(err)) this.fail(step, field, err.message);
      throw err;
    }
  }

  declare(id: string, where: string): void {
    const before = this.ids.get(id);
    if (before !== undefined) this.fail(id, "id", `duplicate step id (also used by ${before}); step ids must be unique in a workflow`);
    this.ids.set(id, where);
  }
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return "an array";
  if (value === null) return "null";
  if (value === undefined) return "nothing (it is missing)";
  return typeof value === "string" ? JSON.stringify(value) : `${typeof value} ${String(value)}`;
}

function inferType(t: Raw): StepType | undefined {
  if (t.type !== undefined) return t.type as StepType;
  if (t.agent !== undefined) return "agent";
  if (t.fail !== undefined) return "fail";
  if (t.branches !== undefined) return "parallel";
  if (t.if !== undefined) return "branch";
  if (t.for !== undefined) return "wait";
  if (t.steps !== undefined) return "loop";
  return undefined;
}

function parseStep(c: Checker, raw: unknown, path: string, generatedId: string | undefined, inherited?: ErrorStrategy): StepDef {
  const t = c.table(raw, generatedId, path);
  let id: string;
  if (t.id === undefined && generatedId !== undefined) id = generatedId;
  else {
    if (typeof t.id !== "string" || !isValidId(t.id) || t.id.length > MAX_STEP_ID) {
      c.fail(undefined, `${path}.id`, `every step needs an id of 1-${MAX_STEP_ID} characters of [A-Za-z0-9_-], not ${describe(t.id)}`);
    }
    id = t.id as string;
  }
  c.declare(id, path);
  const type = inferType(t);
  if (type === undefined || !(type in STEP_KEYS)) {
    c.fail(
      id,
      "type",
      `${t.type === undefined ? "missing" : `unknown type ${describe(t.type)}`}: use agent, parallel, branch, wait, loop or fail (or give agent/branches/if/for/steps/fail, which imply it)`,
    );
  }
  c.known(t, STEP_KEYS[type!], id, "");
  let step: StepDef;
  switch (type!) {
    case "agent": {
      const agent = c.string(t.agent, id, "agent");
      if (!isValidId(agent)) c.fail(id, "agent", `must be an agent id of [A-Za-z0-9_-], not ${describe(agent)}`);
      if (t.task !== undefined && t.input !== undefined) c.fail(id, "task", "give task or input, not both");
      const task = c.string(t.task ?? t.input, id, t.input !== undefined ? "input" : "task");
      c.template(task, id, "task");
      step = { id, type: "agent", agent, task };
      if (t.timeout !== undefined) step.timeoutMs = c.duration(t.timeout, id, "timeout");
      if (t.constraints !== undefined) {
        const k = c.table(t.constraints, id, "constraints");
        c.known(k, ["max_tokens", "deadline", "budget_group"], id, "constraints.");
        if (k.max_tokens !== undefined && (typeof k.max_tokens !== "number" || !Number.isInteger(k.max_tokens) || k.max_tokens < 1)) {
          c.fail(id, "constraints.max_tokens", "must be a positive integer");
        }
        if (k.deadline !== undefined && typeof k.deadline !== "string" && typeof k.deadline !== "number") {
          c.fail(id, "constraints.deadline", 'must be a duration ("5min") or milliseconds');
        }
        step.constraints = k as AgentStep["constraints"] & object;
      }
      break;
    }
    case "parallel": {
      if (!Array.isArray(t.branches) || t.branches.length === 0)
        c.fail(id, "branches", 'must be a non-empty array of steps, e.g. branches = [ { agent = "critic", task = "…" } ]');
      // `retry` on a parallel step retries each failing branch (a branch's own on_error wins).
      const own = t.on_error === undefined ? undefined : parseStrategy(c, t.on_error, id, "on_error", undefined);
      const down = own?.strategy === "retry" ? own : inherited;
      step = { id, type: "parallel", branches: (t.branches as unknown[]).map((b, i) => parseStep(c, b, `branches[${i}]`, `${id}.${i}`, down)) };
      break;
    }
    case "branch": {
      const cond = c.string(t.if, id, "if");
      c.condition(cond, id, "if");
      if (t.then === undefined) c.fail(id, "then", 'is required: a step ({ agent = "writer", task = "…" }, { fail = "…" }) or an array of steps');
      step = {
        id,
        type: "branch",
        if: cond,
        whenTrue: parseArm(c, t.then, id, "then"),
        whenFalse: t.else === undefined ? [] : parseArm(c, t.else, id, "else"),
      };
      break;
    }
    case "wait": {
      const kind = t.for;
      if (kind !== "approval" && kind !== "event" && kind !== "timer") c.fail(id, "for", `must be "approval", "event" or "timer", not ${describe(kind)}`);
      step = { id, type: "wait", for: kind as WaitStep["for"] };
      if (kind === "event") {
        if (t.event === undefined && t.subject === undefined)
          c.fail(
            id,
            "event",
            'a wait for "event" names an event (event = "paid", ended by kova workflow signal) or a NATS subject (subject = "orders.{{input.id}}.paid")',
          );
        if (t.event !== undefined) {
          const ev = c.string(t.event, id, "event");
          if (!isValidId(ev)) c.fail(id, "event", `must be a name of [A-Za-z0-9_-] (what kova workflow signal sends), not ${describe(ev)}`);
          step.event = ev;
        }
        if (t.subject !== undefined) {
          const subject = c.string(t.subject, id, "subject");
          const parts = c.template(subject, id, "subject");
          // Checked with every placeholder standing for one token; the rendered subject is checked again when the wait begins.
          const problem = waitSubjectProblem(parts.map((p) => (typeof p === "string" ? p : "x")).join(""));
          if (problem) c.fail(id, "subject", `${describe(subject)}: ${problem}`);
          step.subject = subject;
        }
      } else {
        if (t.event !== undefined) c.fail(id, "event", `only a wait for "event" names an event`);
        if (t.subject !== undefined) c.fail(id, "subject", `only a wait for "event" names a subject`);
      }
      if (kind === "timer") {
        if (t.duration === undefined) c.fail(id, "duration", 'is required for a timer wait, e.g. duration = "10m"');
        step.durationMs = c.duration(t.duration, id, "duration");
        if (t.timeout !== undefined) c.fail(id, "timeout", "a timer wait ends after its duration; timeout is for approval and event waits");
      } else if (t.duration !== undefined) c.fail(id, "duration", 'only a wait for "timer" has a duration; use timeout for how long to wait at most');
      if (t.timeout !== undefined) step.timeoutMs = c.duration(t.timeout, id, "timeout");
      if (t.message !== undefined) {
        step.message = c.string(t.message, id, "message");
        c.template(step.message, id, "message");
      }
      break;
    }
    case "loop": {
      if (!Array.isArray(t.steps) || t.steps.length === 0) c.fail(id, "steps", "must be a non-empty array of steps (the loop body)");
      const max = t.max_iterations ?? DEFAULT_MAX_ITERATIONS;
      if (typeof max !== "number" || !Number.isInteger(max) || max < 1 || max > MAX_ITERATIONS) {
        c.fail(id, "max_iterations", `must be an integer from 1 to ${MAX_ITERATIONS}, not ${describe(max)}`);
      }
      step = { id, type: "loop", steps: (t.steps as unknown[]).map((s, i) => parseStep(c, s, `steps[${i}]`, undefined)), maxIterations: max as number };
      if (t.while !== undefined) {
        step.while = c.string(t.while, id, "while");
        c.condition(step.while, id, "while");
      }
      if (t.until !== undefined) {
        step.until = c.string(t.until, id, "until");
        c.condition(step.until, id, "until");
      }
      break;
    }
    case "fail": {
      const message = c.string(t.fail, id, "fail");
      c.template(message, id, "fail");
      step = { id, type: "fail", message };
      break;
    }
  }
  // An inherited retry (from a parallel step) reaches only the branches that can retry.
  const canRetry = step!.type === "agent" || step!.type === "parallel";
  const onError = t.on_error === undefined ? (canRetry ? inherited : undefined) : parseStrategy(c, t.on_error, id, "on_error", step!);
  if (onError) {
    if (onError.strategy === "retry" && !canRetry) {
      c.fail(
        id,
        "on_error.strategy",
        `retry applies to agent steps (and to the branches of a parallel step), not to a ${step!.type} step: use skip, abort or fallback`,
      );
    }
    if (step!.type !== "parallel" || onError.strategy !== "retry") step!.onError = onError;
  }
  return step!;
}

/**
 * Why a subject cannot end a wait, or undefined when it can. A wait's subject is captured
 * by a stream (subject-waits.ts), so it must be one concrete subject that is neither a
 * server API nor a private reply: no `$`-prefixed system subject (`$JS`, `$KV`, `$SYS`,
 * `$SRV`, …), no `_INBOX`, and none of Kova's own subjects (mailboxes, rpc, dlq, journal)
 * except its events (`kova.<cluster>.events.…`, already stored by the EVENTS stream). No
 * wildcards: a wait ends on one event, a per-run subject is made with a template
 * (`orders.{{input.id}}.paid`), and wildcard captures of different runs would overlap,
 * which JetStream refuses within and across streams.
 */
export function waitSubjectProblem(subject: string): string | undefined {
  if (subject.length > 255) return "is longer than 255 characters";
  if (/\s/.test(subject)) return "has white space; a NATS subject is tokens separated by dots";
  const tokens = subject.split(".");
  if (tokens.some((t) => t.length === 0)) return "has an empty token (a leading, trailing or double dot)";
  if (tokens.some((t) => t.includes("*") || t.includes(">")))
    return "has a wildcard (* or >): a wait ends on one subject; make it per run with a template, e.g. orders.{{input.id}}.paid";
  if (tokens[0]!.startsWith("$")) return "is a NATS system subject ($JS, $KV, $SYS, $SRV, …): a workflow cannot wait on those";
  if (tokens[0] === "_INBOX") return "is a reply inbox: those are private to their requester";
  if (tokens[0] === "kova" && !(tokens.length >= 4 && tokens[2] === "events"))
    return "is one of Kova's own subjects: of those a wait may only name events (kova.<cluster>.events.<session>.<run>)";
  return undefined;
}

function parseArm(c: Checker, raw: unknown, id: string, arm: "then" | "else"): StepDef[] {
  if (Array.isArray(raw)) return raw.map((s, i) => parseStep(c, s, `${arm}[${i}]`, `${id}.${arm}.${i}`));
  return [parseStep(c, raw, arm, `${id}.${arm}`)];
}

function parseStrategy(c: Checker, raw: unknown, id: string, field: string, step: StepDef | undefined): ErrorStrategy {
  const t = c.table(raw, id, field);
  const strategy = t.strategy;
  switch (strategy) {
    case "abort":
    case "skip":
      c.known(t, ["strategy"], id, `${field}.`);
      return { strategy };
    case "retry": {
      c.known(t, ["strategy", "attempts", "backoff", "max_backoff"], id, `${field}.`);
      const attempts = t.attempts ?? DEFAULT_ATTEMPTS;
      if (typeof attempts !== "number" || !Number.isInteger(attempts) || attempts < 1 || attempts > 100) {
        c.fail(id, `${field}.attempts`, `must be an integer from 1 to 100 (attempts in all, the first included), not ${describe(attempts)}`);
      }
      const backoffMs = t.backoff === undefined ? DEFAULT_BACKOFF_MS : c.duration(t.backoff, id, `${field}.backoff`);
      const maxBackoffMs = t.max_backoff === undefined ? Math.max(DEFAULT_MAX_BACKOFF_MS, backoffMs) : c.duration(t.max_backoff, id, `${field}.max_backoff`);
      return { strategy, attempts: attempts as number, backoffMs, maxBackoffMs };
    }
    case "fallback": {
      c.known(t, ["strategy", "agent", "task", "step"], id, `${field}.`);
      if (t.step !== undefined) {
        if (t.agent !== undefined || t.task !== undefined) c.fail(id, `${field}.step`, "give step = { … } or agent (and task), not both");
        return { strategy, step: parseStep(c, t.step, `${field}.step`, `${id}.fallback`) };
      }
      if (t.agent === undefined) c.fail(id, `${field}.agent`, 'a fallback names the agent to ask instead (agent = "backup") or a step (step = { … })');
      const task = t.task ?? (step?.type === "agent" ? step.task : undefined);
      if (task === undefined) c.fail(id, `${field}.task`, "is required: only an agent step's fallback can reuse the step's task");
      return { strategy, step: parseStep(c, { agent: t.agent, task }, `${field}`, `${id}.fallback`) };
    }
    default:
      return c.fail(id, `${field}.strategy`, `must be retry, skip, abort or fallback, not ${describe(strategy)}`);
  }
}

function parseInput(c: Checker, raw: unknown): Record<string, InputSpec> {
  if (raw === undefined) return {};
  const t = c.table(raw, undefined, "workflow.input");
  const out: Record<string, InputSpec> = {};
  for (const [name, spec] of Object.entries(t)) {
    const field = `workflow.input.${name}`;
    if (!isValidId(name)) c.fail(undefined, field, "input names are [A-Za-z0-9_-]");
    let type: unknown;
    let required = true;
    let def: unknown;
    if (typeof spec === "string") {
      required = !spec.endsWith("?");
      type = spec.replace(/\?$/, "");
    } else {
      const s = c.table(spec, undefined, field);
      c.known(s, ["type", "default", "required"], undefined, `${field}.`);
      type = s.type ?? "any";
      def = s.default;
      required = s.required === undefined ? def === undefined : s.required === true;
    }
    if (!INPUT_TYPES.includes(type as InputType))
      c.fail(undefined, field, `unknown type ${describe(type)}: use ${INPUT_TYPES.join(", ")} (a trailing ? makes it optional: "string?")`);
    out[name] = { type: type as InputType, required, ...(def === undefined ? {} : { default: def }) };
  }
  return out;
}

/** Every step of a list, nested ones included (fallbacks too), depth first. */
export function allSteps(steps: readonly StepDef[]): StepDef[] {
  const out: StepDef[] = [];
  const visit = (s: StepDef) => {
    out.push(s);
    if (s.type === "parallel") s.branches.forEach(visit);
    if (s.type === "branch") [...s.whenTrue, ...s.whenFalse].forEach(visit);
    if (s.type === "loop") s.steps.forEach(visit);
    if (s.onError?.strategy === "fallback") visit(s.onError.step);
  };
  steps.forEach(visit);
  return out;
}

/**
 * Checks and normalises a workflow given as data (a parsed TOML or JSON file, or an
 * object in code): `{ workflow: { id, input?, description? }, steps: [...] }`.
 * @throws WorkflowDefinitionError naming the workflow, the step and the field
 */
export function parseWorkflow(raw: unknown, source = "workflow"): WorkflowDefinition {
  const c0 = new Checker(undefined);
  const doc = c0.table(raw, undefined, source);
  c0.known(doc, ["workflow", "steps"], undefined, "");
  if (doc.workflow === undefined) {
    const what = Object.keys(doc).length === 0 ? "is empty" : "has no [workflow] table";
    c0.fail(
      undefined,
      source,
      `${what}: a workflow file starts with a [workflow] table (id = "…", optional input = { name = "string" }) followed by one or more [[steps]] (docs/workflows.md)`,
    );
  }
  const head = c0.table(doc.workflow, undefined, "[workflow]");
  c0.known(head, ["id", "input", "description"], undefined, "workflow.");
  if (typeof head.id !== "string" || !isValidId(head.id) || head.id.length > MAX_STEP_ID) {
    c0.fail(undefined, "workflow.id", `is required: 1-${MAX_STEP_ID} characters of [A-Za-z0-9_-], not ${describe(head.id)}`);
  }
  const c = new Checker(head.id as string);
  const input = parseInput(c, head.input);
  if (!Array.isArray(doc.steps) || doc.steps.length === 0) c.fail(undefined, "steps", "a workflow needs at least one [[steps]] entry");
  const steps = (doc.steps as unknown[]).map((s, i) => parseStep(c, s, `steps[${i}]`, undefined));
  for (const r of c.refs) {
    const [root, name] = r.ref.segments;
    if (root === "steps" && !c.ids.has(name!)) {
      const hint = closeMatches(name!, c.ids.keys(), 1)[0];
      c.fail(r.step, r.field, `${r.template} refers to ${r.ref.path}, but there is no step ${name}${hint ? ` (did you mean ${hint}?)` : ""}`);
    }
    if (root === "input" && !(name! in input) && Object.keys(input).length > 0) {
      c.fail(r.step, r.field, `${r.template} refers to ${r.ref.path}, but [workflow] input declares only ${Object.keys(input).join(", ")}`);
    }
  }
  const def: WorkflowDefinition = { v: WORKFLOW_DEFINITION_VERSION, id: head.id as string, input, steps };
  if (head.description !== undefined) def.description = c.string(head.description, undefined, "workflow.description");
  return def;
}

/**
 * Declares a workflow in code, in the same shape as a workflow file.
 * @throws WorkflowDefinitionError naming the step and the field
 */
export function defineWorkflow(raw: { workflow: Raw; steps: Raw[] }): WorkflowDefinition {
  return parseWorkflow(raw, "defineWorkflow");
}

/**
 * Parses a workflow file's text: TOML, or JSON for a `.json` file name.
 * @throws WorkflowDefinitionError for a syntax error (with the file name) or an invalid definition
 */
export function parseWorkflowText(text: string, fileName = "workflow.toml"): { raw: Raw; definition: WorkflowDefinition } {
  const unparsable = (field: string, why: string, cause: unknown) => new WorkflowDefinitionError({ field }, `cannot parse: ${why}`, { cause });
  let raw: Raw;
  if (extname(fileName).toLowerCase() === ".json") {
    try {
      raw = JSON.parse(text) as Raw;
    } catch (err) {
      throw unparsable(fileName, (err as Error).message, err);
    }
  } else raw = parseTomlText(text, fileName, unparsable) as Raw;
  return { raw, definition: parseWorkflow(raw, fileName) };
}

/**
 * Reads and checks a workflow file (TOML, or JSON by extension).
 * @returns the data as written (what a run is started with) and the checked definition
 * @throws WorkflowDefinitionError for an unreadable, unparsable or invalid file
 */
export async function loadWorkflowFile(path: string): Promise<{ raw: Raw; definition: WorkflowDefinition }> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new WorkflowDefinitionError({ field: path }, `cannot read the workflow file (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { cause: err });
  }
  return parseWorkflowText(text, path);
}

function typeMatches(type: InputType, v: unknown): boolean {
  switch (type) {
    case "any":
      return true;
    case "integer":
      return Number.isInteger(v);
    case "array":
      return Array.isArray(v);
    case "object":
      return typeof v === "object" && v !== null && !Array.isArray(v);
    default:
      return typeof v === type;
  }
}

/**
 * Checks a run's input against the workflow's declaration and fills in defaults. A
 * workflow that declares no input takes any.
 * @throws WorkflowInputError naming the field
 */
export function checkInput(def: WorkflowDefinition, input: unknown): Record<string, unknown> {
  if (input === undefined || input === null) input = {};
  if (typeof input !== "object" || Array.isArray(input)) throw new WorkflowInputError(def.id, "", "must be an object of named values");
  const given = input as Record<string, unknown>;
  const declared = Object.keys(def.input);
  if (declared.length === 0) return { ...given };
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(def.input)) {
    let v = given[name];
    if (v === undefined) v = spec.default;
    if (v === undefined) {
      if (spec.required) throw new WorkflowInputError(def.id, name, `is required (${spec.type}): pass --input ${name}=…`);
      continue;
    }
    // --input k=v gives text; a number or boolean input accepts its text form.
    if (typeof v === "string" && (spec.type === "number" || spec.type === "integer") && v.trim() !== "" && Number.isFinite(Number(v))) v = Number(v);
    if (typeof v === "string" && spec.type === "boolean" && (v === "true" || v === "false")) v = v === "true";
    if (!typeMatches(spec.type, v))
      throw new WorkflowInputError(def.id, name, `must be ${/^[aeiou]/.test(spec.type) ? "an" : "a"} ${spec.type}, not ${describe(v)}`);
    out[name] = v;
  }
  const unknown = Object.keys(given).filter((k) => !(k in def.input));
  if (unknown.length > 0) throw new WorkflowInputError(def.id, unknown[0]!, `is not declared; [workflow] input declares ${declared.join(", ")}`);
  return out;
}
