import { parseDuration, ArgumentError, isValidId } from "../core/index.js";
import { registerMessageTypes } from "../bus/index.js";
import { AgentInputInvalidError } from "./errors.js";

/**
 * The agent-run protocol (docs/protocol.md, "Agents"), in one place: what a `task_delegate`
 * or `agent.chat` carries and how it is read, what the `result_notify` answer and a run's
 * events say, usage, ids and deadlines. Every party speaks it through this module: the
 * agent itself, the CLI, workflows, the swarm coordinator, experiments, the gateway, and
 * (by the wire format it documents) plain NATS clients in any language. Nothing here does
 * I/O: the sending is in client.ts.
 */

/** The chat message type: one turn of a conversation kept by `sessionId`. */
export const AGENT_CHAT = "agent.chat";
registerMessageTypes("agents", AGENT_CHAT);

/** Event types of a run (`kova.<c>.events.<sessionId>.<runId>`): one list, kept in events.ts. */
export { RunEventType } from "./events.js";

/** `constraints` of a task (as the short form writes them too): a token cap and a deadline for this run. */
export interface TaskConstraints {
  max_tokens?: number;
  /** Epoch ms, an ISO date, or a duration from receipt: `"5min"`, `"30s"`, `"2h"`, `"500ms"`, or milliseconds. */
  deadline?: string | number;
  /** The budget group a child run draws from (its parent's); see docs/agents.md. */
  budget_group?: string;
  /**
   * The model-call priority of this run under `scheduling = "priority"`: an integer from
   * -100 to 100, higher first; overrides the agent's `priority` (default 0).
   */
  priority?: number;
  /**
   * The end user the run is for (an id token): its fair-share key under `scheduling =
   * "fair_share"` and its `user_max_tokens` group, instead of the sender (docs/models.md).
   */
  user?: string;
}

/** One earlier turn of a conversation a stateless task brings along (`history`). */
export interface HistoryTurn {
  role: "system" | "user" | "assistant";
  content: string;
}

/** `task_delegate` payload. The short form `{ task, constraints }` is accepted too (`task` = `input`). */
export interface TaskDelegatePayload {
  input: string;
  /**
   * The conversation before `input`, for a task without `sessionId` (a client that keeps
   * the conversation itself, as OpenAI chat clients do): the model sees these turns in
   * their roles, after the agent's own system prompt, fitted by its memory policy.
   */
  history?: HistoryTurn[];
  sessionId?: string;
  runId?: string;
  parentRunId?: string;
  constraints?: TaskConstraints;
}

/** `agent.chat` payload: conversation memory is keyed by `sessionId`. */
export interface AgentChatPayload {
  message: string;
  sessionId: string;
  /**
   * The conversation before `message` as the caller keeps it (an OpenAI chat client sends
   * it whole every time): it starts the session when the agent has no memory of it yet,
   * and is ignored once the session has memory (which then holds those turns).
   */
  history?: HistoryTurn[];
  runId?: string;
  parentRunId?: string;
  /** Read as a task's are (the gateway sends `max_tokens` and the end user). */
  constraints?: TaskConstraints;
}

/** The name the public API has long given the `task_delegate` payload. */
export type AgentTaskPayload = TaskDelegatePayload;

/** How an agent's run ended. */
export type RunStatus = "completed" | "failed" | "cancelled";

export function isRunStatus(value: unknown): value is RunStatus {
  return value === "completed" || value === "failed" || value === "cancelled";
}

export interface RunUsage {
  inputTokens: number;
  outputTokens: number;
  costUsd?: number;
}

/** The `result_notify` payload an agent replies with (what `ask` resolves to). */
export interface AgentResult {
  output: string;
  usage: RunUsage;
  runId: string;
  sessionId: string;
  status: RunStatus;
  error?: { code: string; message: string };
  /**
   * The node that ended the run (after a takeover, the node that took it over): what a
   * workflow step's `{{steps.<id>.metadata.node}}` reads.
   */
  node?: string;
}

/** Payload of the `result_notify` that answers a `task_delegate`. */
export type ResultNotifyPayload = AgentResult;

/** What `info_request` and `capability_query` answer on an agent's fast path. */
export interface AgentInfo {
  agentId: string;
  model: string;
  capabilities: string[];
  /** `Running` while a run is in progress on the hosting node (`waiting_approval` while it waits for a human), else `Idle`. */
  state: string;
  usage: AgentUsageTotals;
}

/** Totals an agent keeps across runs (checkpointed with the actor). */
export interface AgentUsageTotals {
  runs: number;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
  modelCalls: number;
  toolCalls: number;
  toolMs: number;
  byModel: Record<string, { calls: number; inputTokens: number; outputTokens: number; costUsd: number }>;
  byTool: Record<string, { calls: number; errors: number; ms: number }>;
}

/** A run's request, normalised from either message type. */
export interface RunRequest {
  kind: "task" | "chat";
  input: string;
  /** Earlier turns: a stateless task's conversation, or a chat's to start a session the agent has no memory of. */
  history?: HistoryTurn[];
  sessionId?: string;
  runId?: string;
  parentRunId?: string;
  maxTokens?: number;
  /** Epoch ms. */
  deadline?: number;
  budgetGroup?: string;
  /** Model-call priority (`constraints.priority`), -100..100. */
  priority?: number;
  /** The end user (`constraints.user`). */
  user?: string;
}

/**
 * Reads a `task_delegate` or `agent.chat` payload.
 * @param receivedAt epoch ms the run started, for relative deadlines (`"5min"`)
 * @throws AgentInputInvalidError naming the field and the expected form
 */
export function parseRunRequest(type: string, payload: unknown, receivedAt: number): RunRequest {
  return readRequest(type, payload, receivedAt, agentInput).request;
}

/**
 * Reads a `task_delegate` payload in either form (`input`, or `task` in the short form), as
 * a party that passes the task on reads it (the swarm coordinator): checked as the agent
 * checks it, its constraints kept as written.
 * @throws ArgumentError naming the field at fault
 */
export function readTaskPayload(payload: unknown): TaskDelegatePayload {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload))
    throw new ArgumentError("payload", 'a task_delegate payload is an object: { "input": "...", "constraints": { ... } }');
  const { request: r, constraints } = readRequest("task_delegate", payload, 0, argument);
  return runPayload({ input: r.input, sessionId: r.sessionId, runId: r.runId, parentRunId: r.parentRunId, constraints });
}

function readRequest(type: string, payload: unknown, receivedAt: number, fail: Fail): { request: RunRequest; constraints?: TaskConstraints } {
  if (typeof payload === "string" && type === "task_delegate") return { request: { kind: "task", input: payload } };
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    throw fail("payload", type === AGENT_CHAT ? "must be { message, sessionId }" : "must be { input } (or the short form { task })");
  }
  const p = payload as Record<string, unknown>;
  const out: RunRequest =
    type === AGENT_CHAT
      ? { kind: "chat", input: text(p.message, "message", fail), sessionId: id(p.sessionId, "sessionId", true, fail)! }
      : { kind: "task", input: taskInput(p, fail) };
  const sessionId = out.sessionId ?? id(p.sessionId, "sessionId", false, fail);
  if (sessionId) out.sessionId = sessionId;
  const runId = id(p.runId, "runId", false, fail);
  if (runId) out.runId = runId;
  const parentRunId = id(p.parentRunId, "parentRunId", false, fail);
  if (parentRunId) out.parentRunId = parentRunId;
  if (p.history !== undefined) {
    if (out.kind === "task" && out.sessionId !== undefined)
      throw fail("history", "is for a task without sessionId: a session's memory already holds its conversation");
    out.history = historyTurns(p.history, fail);
  }
  if (p.constraints === undefined || p.constraints === null) return { request: out };
  const { constraints: c, deadline } = readConstraints(p.constraints, receivedAt, fail);
  if (c.max_tokens !== undefined) out.maxTokens = c.max_tokens;
  if (deadline !== undefined) out.deadline = deadline;
  if (c.budget_group !== undefined) out.budgetGroup = c.budget_group;
  if (c.priority !== undefined) out.priority = c.priority;
  if (c.user !== undefined) out.user = c.user;
  return { request: out, constraints: c };
}

/** The range of an agent's or a task's model-call priority (higher first; 0 by default). */
export const PRIORITY_MIN = -100;
export const PRIORITY_MAX = 100;

/**
 * A model-call priority: an integer from PRIORITY_MIN to PRIORITY_MAX.
 * @throws what `fail` makes of the reason
 */
export function priorityValue(value: unknown, fail: (why: string) => Error): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < PRIORITY_MIN || value > PRIORITY_MAX) {
    throw fail(`must be an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX} (higher goes first, default 0), not ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Milliseconds from `from` to the deadline `value` names (as parseDeadline reads it), at
 * least 0: how long a party that passes the task on (a swarm, its caller) gives it.
 * @throws ArgumentError naming `field`
 */
export function msUntilDeadline(value: unknown, from: number, field = "constraints.deadline"): number {
  return Math.max(0, parseDeadline(value, from, (_, why) => new ArgumentError(field, why)) - from);
}

/** Most turns a task's `history` may bring (the payload's size is bounded by the bus too). */
export const MAX_HISTORY_TURNS = 1000;

function historyTurns(value: unknown, fail: Fail): HistoryTurn[] {
  const form = 'must be an array of { role: "system" | "user" | "assistant", content: string }';
  if (!Array.isArray(value)) throw fail("history", form);
  if (value.length > MAX_HISTORY_TURNS) throw fail("history", `may bring at most ${MAX_HISTORY_TURNS} turns, not ${value.length}`);
  return value.map((t: unknown, i) => {
    const turn = t as { role?: unknown; content?: unknown } | null;
    if (
      typeof turn !== "object" ||
      turn === null ||
      (turn.role !== "system" && turn.role !== "user" && turn.role !== "assistant") ||
      typeof turn.content !== "string"
    )
      throw fail(`history[${i}]`, form);
    return { role: turn.role, content: turn.content };
  });
}

// Anything below this is a duration in ms, above it an epoch timestamp (2001-09-09).
const EPOCH_FLOOR = 1_000_000_000_000;

/**
 * A deadline as epoch ms: an epoch timestamp, a duration in ms from `from`, a duration
 * string (`"5min"`, `"30s"`), or an ISO date. The one reading of a run's deadline: the agent's,
 * and a swarm's that passes the rest on.
 * @throws what `fail` makes of the field and the reason (AgentInputInvalidError by default)
 */
export function parseDeadline(value: unknown, from: number, fail: Fail = agentInput): number {
  if (typeof value === "number" && Number.isFinite(value) && value > 0) return value >= EPOCH_FLOOR ? value : from + value;
  if (typeof value === "string") {
    const ms = parseDuration(value, { unitOptional: true });
    if (ms !== undefined) return from + ms;
    const date = Date.parse(value);
    if (!Number.isNaN(date)) return date;
  }
  throw fail("constraints.deadline", `${JSON.stringify(value)} is not a deadline: use epoch ms, a duration such as "5min" or 30000, or an ISO date`);
}

/** The payload forms a `task_delegate` to an agent takes, for errors that name what to send. */
const TASK_PAYLOAD_FORM = "a task_delegate to an agent carries { input, sessionId?, constraints? }";

/** A task's text: `input`, or `task` in the short form. A payload with neither names `input`, the field to set. */
function taskInput(p: Record<string, unknown>, fail: Fail): string {
  if (p.input === undefined && p.task !== undefined) return text(p.task, "payload.task", fail);
  return text(p.input, "payload.input", fail, ` (${TASK_PAYLOAD_FORM}; got the fields ${Object.keys(p).join(", ") || "none"})`);
}

function text(value: unknown, field: string, fail: Fail, hint = ""): string {
  if (typeof value !== "string" || value.length === 0) throw fail(field, `must be a non-empty string${hint}`);
  return value;
}

function id(value: unknown, field: string, required: boolean, fail: Fail): string | undefined {
  if ((value === undefined || value === null) && !required) return undefined;
  if (!isValidId(value)) throw fail(field, `must be an id of 1-128 characters from [A-Za-z0-9_-], not ${JSON.stringify(value)}`);
  return value;
}

/** How a reader of the protocol reports a field at fault: the agent as AGENT_INPUT_INVALID, a passing-on party as INVALID_ARGUMENT. */
type Fail = (field: string, why: string) => Error;
const agentInput: Fail = (field, why) => new AgentInputInvalidError(field, why);
const argument: Fail = (field, why) => new ArgumentError(field.startsWith("payload") ? field : `payload.${field}`, why);

/**
 * Reads `constraints`, each field checked here for every reader; the deadline is returned
 * as epoch ms beside the constraints, which keep it as written.
 */
function readConstraints(raw: unknown, receivedAt: number, fail: Fail): { constraints: TaskConstraints; deadline?: number } {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw fail("constraints", 'must be an object, e.g. { "max_tokens": 2000, "deadline": "5min" }');
  const c = raw as Record<string, unknown>;
  const out: TaskConstraints = {};
  if (c.max_tokens !== undefined) {
    if (!Number.isInteger(c.max_tokens) || (c.max_tokens as number) < 1)
      throw fail("constraints.max_tokens", `must be a positive integer, not ${JSON.stringify(c.max_tokens)}`);
    out.max_tokens = c.max_tokens as number;
  }
  const deadline = c.deadline === undefined ? undefined : parseDeadline(c.deadline, receivedAt, fail);
  if (deadline !== undefined) out.deadline = c.deadline as string | number;
  for (const key of ["budget_group", "user"] as const) {
    const v = id(c[key], `constraints.${key}`, false, fail);
    if (v !== undefined) out[key] = v;
  }
  if (c.priority !== undefined) out.priority = priorityValue(c.priority, (why) => fail("constraints.priority", why));
  return { constraints: out, ...(deadline === undefined ? {} : { deadline }) };
}

/**
 * A `task_delegate` or `agent.chat` payload as every sender writes it: fields left undefined
 * or empty (no history, no constraints) are left out.
 */
export function runPayload<T extends TaskDelegatePayload | AgentChatPayload>(fields: T): T {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    const empty = value === undefined || (typeof value === "object" && value !== null && Object.keys(value).length === 0);
    if (!empty) out[key] = value;
  }
  return out as T;
}

export const ZERO_USAGE: Readonly<RunUsage> = Object.freeze({ inputTokens: 0, outputTokens: 0 });

/** Sums usages (cost only when some part has one). */
export function addUsage(a: RunUsage, b: RunUsage | undefined): RunUsage {
  if (!b) return a;
  const out: RunUsage = { inputTokens: a.inputTokens + (b.inputTokens || 0), outputTokens: a.outputTokens + (b.outputTokens || 0) };
  if (a.costUsd !== undefined || b.costUsd !== undefined) out.costUsd = Math.round(((a.costUsd ?? 0) + (b.costUsd ?? 0)) * 1e9) / 1e9;
  return out;
}

/** A run's `error` as a remote party reported it (a result's, an event's), or undefined where it reported none. */
export function reportedError(raw: unknown): { code: string; message: string } | undefined {
  if (typeof raw !== "object" || raw === null) return undefined;
  const e = raw as Record<string, unknown>;
  return { code: typeof e.code === "string" ? e.code : "RUN_FAILED", message: typeof e.message === "string" ? e.message : "the run failed" };
}

/** A usage a remote party reported, or undefined where it reported none (no object). */
export function reportedUsage(raw: unknown): RunUsage | undefined {
  return typeof raw === "object" && raw !== null ? readUsage(raw) : undefined;
}

/** Reads a usage a remote party reported, treating anything malformed as zero. */
export function readUsage(raw: unknown): RunUsage {
  const u = (raw ?? {}) as Record<string, unknown>;
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : 0);
  const out: RunUsage = { inputTokens: num(u.inputTokens), outputTokens: num(u.outputTokens) };
  if (typeof u.costUsd === "number" && Number.isFinite(u.costUsd)) out.costUsd = u.costUsd;
  return out;
}
