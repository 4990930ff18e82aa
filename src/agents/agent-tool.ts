import { ArgumentError, assertId, derivedId } from "../core/index.js";
import type { Bus, KovaClient } from "../bus/index.js";
import { defineTool, type Tool, type ToolContext } from "../tools/index.js";
import { delegateTask } from "./client.js";
import { DelegatedRunCancelledError, DelegatedRunFailedError, DelegatedRunTimeoutError } from "./delegation-errors.js";
import { RunEventType, type RunUsage, type TaskConstraints } from "./run-protocol.js";
import { RunWatcher } from "./run-watcher.js";

/** The arguments the model gives an agent tool. */
export interface AgentToolArgs {
  task: string;
}

/** What an agent tool returns: the child's answer, its run id and the usage to charge to the caller. */
export interface AgentToolResult {
  output: string;
  agentId: string;
  childRunId: string;
  usage: RunUsage;
}

export interface AgentToolOptions {
  /** What the model reads (default: "Delegates a task to the agent <id> and returns its answer."). */
  description?: string;
  /** How long a call waits when the call has no deadline of its own (default 5 min). */
  timeoutMs?: number;
  /** `max_tokens` for the child run. */
  maxTokens?: number;
  /**
   * The budget group the child's usage is charged to (default: the calling run's group,
   * `ctx.budgetGroup`, so a child draws from its parent's; none when the caller has none).
   */
  budgetGroup?: string | ((ctx: ToolContext) => string | undefined);
  /**
   * Called once per finished call with the child's usage, for the caller's budget group.
   * The same usage is also in the result (`usage`), for a loop that accounts from results.
   */
  onUsage?: (usage: RunUsage, info: { agentId: string; childRunId: string; ctx: ToolContext }) => void;
}

export const DEFAULT_AGENT_TOOL_TIMEOUT_MS = 5 * 60_000;

/**
 * The arguments every agent tool takes. One object for all of them: the validator is
 * compiled once per schema object (ajv), ~2.5 ms each, which a node offering a thousand
 * agents would otherwise pay a thousand times at start.
 */
const AGENT_TOOL_PARAMETERS = Object.freeze({
  type: "object",
  properties: { task: { type: "string", minLength: 1, description: "The task for the agent, self-contained: it sees nothing else." } },
  required: ["task"],
  additionalProperties: false,
});

/** Agents offered as tools are named `agent:<id>`. */
export const AGENT_TOOL_PREFIX = "agent:";

/**
 * Offers an agent as a tool named `agent:<agentId>` (docs/swarm.md, "Agents as tools"). A call
 * is a child run of the calling run, on whatever node hosts the agent:
 * 1. the child's run id and the delegation's message id are derived from the call's
 *    idempotency key, so a call re-run after a crash (or on the node that took the caller
 *    over) addresses the same child: the re-sent `task_delegate` is dropped as a duplicate
 *    and the outcome is read from the child's events on the stream;
 * 2. `child_run_linked { childRunId, callId, agentId }` goes on the caller's run subject,
 *    so the session's run tree shows the child under the call;
 * 3. the child's `result_notify` (or its terminal event) is the tool's result: its output,
 *    or an error the model sees (failed, cancelled, no answer in time);
 * 4. the child's usage is returned and given to `onUsage`, for the caller's budget group.
 *
 * Re-running a call is safe (the same child answers), so the tool is idempotent.
 * @param via the caller's bus (a node's, or `KovaClient.bus`)
 * @throws InvalidIdError for a bad agent id; ArgumentError for a bad timeout
 */
export function agentTool(via: Bus | KovaClient, agentId: string, opts: AgentToolOptions = {}): Tool<AgentToolArgs, AgentToolResult> {
  assertId("agent id", agentId);
  const timeoutMs = opts.timeoutMs ?? DEFAULT_AGENT_TOOL_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) throw new ArgumentError("timeoutMs", "must be a positive integer of milliseconds");
  const bus = "bus" in via ? via.bus : via;
  return defineTool<AgentToolArgs, AgentToolResult>({
    name: `${AGENT_TOOL_PREFIX}${agentId}`,
    description:
      opts.description ?? `Delegates a task to the agent ${agentId} and returns its answer. Give the whole task as text: the agent sees nothing else.`,
    idempotent: true,
    parameters: AGENT_TOOL_PARAMETERS,
    run: (args, ctx) => callAgent(bus, agentId, args, ctx, opts, timeoutMs),
  });
}

async function callAgent(
  bus: Bus,
  agentId: string,
  args: AgentToolArgs,
  ctx: ToolContext,
  opts: AgentToolOptions,
  timeoutMs: number,
): Promise<AgentToolResult> {
  const childRunId = derivedId({ prefix: "run" }, ctx.idempotencyKey, agentId);
  const messageId = derivedId({ prefix: "call" }, ctx.idempotencyKey, agentId);
  const started = Date.now();
  const until = Math.min(ctx.deadline ?? Number.POSITIVE_INFINITY, started + timeoutMs);
  // On the calling run's subject, as every event of that run: with its parent, so the link
  // sits in the session's tree at the calling run's depth.
  await bus.publishEvent(
    {
      type: RunEventType.childLinked,
      sessionId: ctx.sessionId,
      runId: ctx.runId,
      ...(ctx.parentRunId ? { parentRunId: ctx.parentRunId } : {}),
      ts: Date.now(),
      data: { childRunId, callId: ctx.callId, agentId },
    },
    { msgId: derivedId({ prefix: "link" }, messageId) },
  );
  await using watcher = await RunWatcher.start(bus, { sessionId: ctx.sessionId, runId: childRunId, logger: ctx.logger });
  watcher.expect(messageId, childRunId);
  const constraints: TaskConstraints = { deadline: Math.max(1, Math.round(until - Date.now())) };
  if (opts.maxTokens) constraints.max_tokens = opts.maxTokens;
  const group = typeof opts.budgetGroup === "function" ? opts.budgetGroup(ctx) : (opts.budgetGroup ?? ctx.budgetGroup);
  if (group) constraints.budget_group = group;
  // The child run is for the same end user, at the same priority: else a user's work
  // delegated through an agent would be scheduled as the calling agent's own.
  if (ctx.user !== undefined) constraints.user = ctx.user;
  if (ctx.priority !== undefined) constraints.priority = ctx.priority;
  await delegateTask(bus, {
    id: messageId,
    from: ctx.agentId,
    to: agentId,
    input: args.task,
    sessionId: ctx.sessionId,
    runId: childRunId,
    parentRunId: ctx.runId,
    constraints,
    replyTo: watcher.replyTo,
  });
  const outcomes = await watcher.wait([childRunId], { until, signal: ctx.signal });
  const outcome = outcomes.get(childRunId);
  if (!outcome) throw new DelegatedRunTimeoutError(agentId, childRunId, Math.round(until - started));
  opts.onUsage?.(outcome.usage, { agentId, childRunId, ctx });
  if (outcome.status === "failed") throw new DelegatedRunFailedError(agentId, childRunId, outcome.error);
  if (outcome.status === "cancelled") throw new DelegatedRunCancelledError(agentId, childRunId);
  return { output: outcome.output, agentId, childRunId, usage: outcome.usage };
}
