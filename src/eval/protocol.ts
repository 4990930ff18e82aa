import { randomBytes } from "node:crypto";
import { ArgumentError, INSTANCE_SEPARATOR, isScoped, ownedId, ownerScopeOf, reserveTemplates } from "../core/index.js";
import { registerMessageTypes } from "../bus/index.js";

/**
 * The experiment protocol on the A2A bus (docs/evals.md, "Execution"). An experiment is the
 * virtual actor `eval--<experiment id>`; its cells go as `task_delegate`s to subjects, whose
 * `result_notify`s come back to its inbox. These namespaced types go to its inbox too:
 *
 * | type | payload | sent by |
 * | --- | --- | --- |
 * | `eval.start` | `{ digest, owner? }` (the spec is stored first, through `kova.<c>.control.eval`) | `kova eval run`, `startExperiment` |
 * | `eval.cancel` | `{ reason? }` | `kova eval cancel` |
 * | `eval.resume` | `{ budget? }` | `kova eval resume` |
 *
 * and `workflow.timer { timerId }` from the nodes' timer services (the experiment's watchdog).
 */
export const EvalMessageType = {
  start: "eval.start",
  cancel: "eval.cancel",
  resume: "eval.resume",
} as const;

registerMessageTypes("eval", ...Object.values(EvalMessageType));

/** The template (and actor type) of experiments: `eval--<experiment id>`. */
export const EXPERIMENT_TEMPLATE = "eval";
/** The template (and actor type) that runs subjects and judges: `eval-subject--<experiment>-<s|j><index>-<slot>`. */
export const SUBJECT_TEMPLATE = "eval-subject";
/** An idle experiment (waiting for its cells' answers) is passivated after this long; its next message activates it again. */
export const EXPERIMENT_IDLE_AFTER_MS = 120_000;
export const SUBJECT_IDLE_AFTER_MS = 60_000;

// Only trusted parties message experiments and their runners (docs/security.md, "Experiments").
reserveTemplates(EXPERIMENT_TEMPLATE, SUBJECT_TEMPLATE);

/** `<owner scope>?<name>-<8 hex>`: an experiment started for a principal carries its owner scope (core/principals.ts). */
const EXPERIMENT_ID = /^(?:o[0-9a-f]{12}_)?[A-Za-z0-9_-]{1,48}-[0-9a-f]{8}$/;

/**
 * A new experiment id: the spec's name and 8 hex digits, behind the owner's scope when it
 * is started for a principal (`o1f3…_prompt-v2-3f9a1c2b`), so that ownership is a prefix
 * test and every id derived from it (its actor, its runners, its cells' runs, its session)
 * is the owner's too.
 */
export function newExperimentId(name: string, owner?: string): string {
  return `${owner === undefined ? "" : ownerScopeOf(owner)}${name}-${randomBytes(4).toString("hex")}`;
}

/**
 * The id an experiment named `id` gets for `owner`: in the owner's scope (as ownedId
 * makes a principal's names its own); without an owner, an id in nobody's scope.
 * @throws ArgumentError for an id that is no experiment id, or that carries another principal's scope (or any scope, without an owner)
 */
export function ownedExperimentId(id: string, owner?: string): string {
  const owned = owner === undefined ? (isScoped(id) ? undefined : id) : ownedId(id, ownerScopeOf(owner));
  if (owned === undefined) {
    throw new ArgumentError(
      "experimentId",
      `${JSON.stringify(id)} carries an owner scope (o<12 hex>_) that is not ${owner === undefined ? "anyone's here: name its owner (--owner)" : `${owner}'s`}`,
    );
  }
  return assertExperimentId(owned);
}

/**
 * Why `owner` cannot own experiment `experimentId`, or undefined when it can: an experiment
 * in a principal's scope is that principal's, one in nobody's scope names no principal.
 */
export function experimentOwnerProblem(experimentId: string, owner: string | undefined): string | undefined {
  if (owner === undefined) return isScoped(experimentId) ? `experiment ${experimentId} is in an owner's scope: start it with that owner` : undefined;
  return experimentId.startsWith(ownerScopeOf(owner))
    ? undefined
    : `experiment ${experimentId} is not in the scope of its owner ${owner} (${ownerScopeOf(owner)}): let startExperiment name the id, or give one in that scope`;
}

/** Whether a principal of `scope` owns the experiment: a prefix test, as for every id it owns. */
export function ownsExperiment(experimentId: string, scope: string): boolean {
  return experimentId.startsWith(scope);
}

/**
 * Where experiments' specs are stored (docs/evals.md, "Starting"): `kova.<c>.control.eval`,
 * a control endpoint any node answers, so that an operator stores a spec without writing
 * the evals bucket. JSON `{ op: "tasks", experimentId, digest, index, tasks }` for each
 * chunk of tasks, then `{ op: "spec", experimentId, head }`.
 */
export function evalControlSubject(cluster: string): string {
  return `kova.${cluster}.control.eval`;
}

export function isExperimentId(value: unknown): value is string {
  return typeof value === "string" && EXPERIMENT_ID.test(value);
}

/** @throws ArgumentError for what cannot be an experiment id */
export function assertExperimentId(value: unknown): string {
  if (!isExperimentId(value)) throw new ArgumentError("experimentId", `must be <name>-<8 hex digits> as kova eval ls lists them, not ${JSON.stringify(value)}`);
  return value;
}

/** The experiment's actor id. */
export function experimentActorId(experimentId: string): string {
  return `${EXPERIMENT_TEMPLATE}${INSTANCE_SEPARATOR}${experimentId}`;
}

/** The experiment id of an experiment's actor id, or undefined. */
export function experimentOfActor(actorId: string): string | undefined {
  const prefix = `${EXPERIMENT_TEMPLATE}${INSTANCE_SEPARATOR}`;
  return actorId.startsWith(prefix) ? actorId.slice(prefix.length) : undefined;
}

/** Who runs a subject's or a judge's delegations: `s<subject index>` or `j<verifier index>`, on one concurrency slot. */
export interface RunnerKey {
  experimentId: string;
  role: "s" | "j";
  index: number;
  slot: number;
}

export function runnerActorId(k: RunnerKey): string {
  return `${SUBJECT_TEMPLATE}${INSTANCE_SEPARATOR}${k.experimentId}-${k.role}${k.index}-${k.slot}`;
}

/** Reads an `eval-subject` instance's key back; undefined for a key of another form. */
export function parseRunnerKey(key: string): RunnerKey | undefined {
  const m = /^(.+)-([sj])(\d{1,4})-(\d{1,4})$/.exec(key);
  if (!m || !isExperimentId(m[1])) return undefined;
  return { experimentId: m[1]!, role: m[2] as "s" | "j", index: Number(m[3]), slot: Number(m[4]) };
}

/** A subject attempt's message id and run id: `<experiment>-c<cell>-a<attempt>`. */
export function attemptId(experimentId: string, cell: number, attempt: number): string {
  return `${experimentId}-c${cell}-a${attempt}`;
}

/** A judge's message id and run id for an attempt: `<attempt id>-j<verifier>-<try>`. */
export function judgeId(experimentId: string, cell: number, attempt: number, verifier: number, attemptOfJudge: number): string {
  return `${attemptId(experimentId, cell, attempt)}-j${verifier}-${attemptOfJudge}`;
}
