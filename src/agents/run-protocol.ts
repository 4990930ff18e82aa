import { AS_ARGUMENT, durationMs } from "../core/duration.js";
import { ArgumentError } from "../core/errors.js";
import { isValidId } from "../core/ids.js";
import { priorityValue, type AgentResult, type AgentTaskPayload, type RunUsage, type TaskConstraints } from "./protocol.js";

/**
 * The agent protocol contract (docs/protocol.md, "Agents"), as its callers see it: what a
 * `task_delegate` carries, what the `result_notify` answer and the run's events say. The
 * swarm coordinator and agents-as-tools talk to agents through this alone, never through
 * the agent loop's internals, so any actor that speaks it can be delegated to.
 */

export type { AgentInfo, RunStatus, RunUsage, TaskConstraints } from "./protocol.js";
/** Payload of `task_delegate` (the short form `{ task, constraints }` is read as `input`). */
export type TaskDelegatePayload = AgentTaskPayload;
/** Payload of the `result_notify` that answers a `task_delegate`. */
export type ResultNotifyPayload = AgentResult;

export const ZERO_USAGE: Readonly<RunUsage> = Object.freeze({ inputTokens: 0, outputTokens: 0 });

/** Event types of a run (`kova.<c>.events.<sessionId>.<runId>`): one list, kept in events.ts. */
export { RunEventType } from "./events.js";

/**
 * Reads a `task_delegate` payload in either form (`input`, or `task` in the short form).
 * @throws ArgumentError naming the field at fault
 */
export function readTaskPayload(payload: unknown): TaskDelegatePayload {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    throw new ArgumentError("payload", 'a task_delegate payload is an object: { "input": "...", "constraints": { ... } }');
  }
  const p = payload as Record<string, unknown>;
  const input = p.input ?? p.task;
  if (typeof input !== "string" || input.trim() === "") {
    throw new ArgumentError("payload.input", 'is required: the task as text, e.g. { "input": "Compare the three biggest vector databases" }');
  }
  const out: TaskDelegatePayload = { input };
  for (const key of ["sessionId", "runId", "parentRunId"] as const) {
    const v = p[key];
    if (v === undefined || v === null) continue;
    if (!isValidId(v)) throw new ArgumentError(`payload.${key}`, `must be an id of 1-128 characters of [A-Za-z0-9_-], got ${JSON.stringify(v)}`);
    out[key] = v;
  }
  if (p.constraints !== undefined && p.constraints !== null) out.constraints = readConstraints(p.constraints);
  return out;
}

function readConstraints(raw: unknown): TaskConstraints {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ArgumentError("payload.constraints", 'must be an object, e.g. { "max_tokens": 2000, "deadline": "5min" }');
  }
  const c = raw as Record<string, unknown>;
  const out: TaskConstraints = {};
  if (c.max_tokens !== undefined) {
    if (!Number.isInteger(c.max_tokens) || (c.max_tokens as number) < 1) {
      throw new ArgumentError("payload.constraints.max_tokens", `must be a positive integer, got ${JSON.stringify(c.max_tokens)}`);
    }
    out.max_tokens = c.max_tokens as number;
  }
  if (c.deadline !== undefined) {
    durationMs(c.deadline, "payload.constraints.deadline", AS_ARGUMENT);
    out.deadline = c.deadline as string | number;
  }
  if (c.budget_group !== undefined) {
    if (typeof c.budget_group !== "string" || c.budget_group === "" || c.budget_group.length > 256) {
      throw new ArgumentError("payload.constraints.budget_group", "must be a string of 1-256 characters");
    }
    out.budget_group = c.budget_group;
  }
  if (c.priority !== undefined) out.priority = priorityValue(c.priority, (why) => new ArgumentError("payload.constraints.priority", why));
  if (c.user !== undefined) {
    if (!isValidId(c.user))
      throw new ArgumentError("payload.constraints.user", `must be an id of 1-128 characters of [A-Za-z0-9_-], got ${JSON.stringify(c.user)}`);
    out.user = c.user;
  }
  return out;
}

/** Sums usages (cost only when some part has one). */
export function addUsage(a: RunUsage, b: RunUsage | undefined): RunUsage {
  if (!b) return a;
  const out: RunUsage = { inputTokens: a.inputTokens + (b.inputTokens || 0), outputTokens: a.outputTokens + (b.outputTokens || 0) };
  if (a.costUsd !== undefined || b.costUsd !== undefined) out.costUsd = Math.round(((a.costUsd ?? 0) + (b.costUsd ?? 0)) * 1e9) / 1e9;
  return out;
}

/** Reads a usage a remote party reported, treating anything malformed as zero. */
export function readUsage(raw: unknown): RunUsage {
  const u = (raw ?? {}) as Record<string, unknown>;
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : 0);
  const out: RunUsage = { inputTokens: num(u.inputTokens), outputTokens: num(u.outputTokens) };
  if (typeof u.costUsd === "number" && Number.isFinite(u.costUsd)) out.costUsd = u.costUsd;
  return out;
}
