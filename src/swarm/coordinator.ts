import { ArgumentError, isKovaError, toWire, componentLogger, silentLogger, type Logger, derivedId, publicText } from "../core/index.js";
import { isInfrastructureFailure, type Bus, type KovaEvent } from "../bus/index.js";
import { defineActor, isLeaseLost, TurnInterruptedError, type ActorContext, type ActorDefinition } from "../actors/index.js";
import {
  costOf,
  type ModelCallScheduler,
  type ModelClient,
  type ModelPrice,
  addUsage,
  delegateTask,
  type InterruptDelegation,
  msUntilDeadline,
  readTaskPayload,
  RunEventType,
  ZERO_USAGE,
  type ResultNotifyPayload,
  type RunUsage,
  type TaskConstraints,
  type TaskDelegatePayload,
  RunWatcher,
  type RunOutcome,
} from "../agents/index.js";
import { assignSubtasks, natsAgentDirectory, type AgentCandidate, type AgentDirectory } from "./directory.js";
import { SwarmErrorCode, SwarmNoAgentError, SwarmNoResultsError } from "./errors.js";
import { readRunEvents } from "./history.js";
import { decompose, readStaticPlan, type ModelCall, type StaticSubtask, type Subtask } from "./plan.js";
import { missingNote, synthesize, type MissingSubtask, type SubtaskResult } from "./synthesize.js";

/** Event types a coordinator adds to the agent protocol's run events. */
export const SwarmEventType = {
  /** The plan: every subtask with its agent and child run id. */
  planned: "swarm_planned",
  /** The deadline passed, or subtasks failed: which results the answer goes without. */
  partial: "swarm_partial",
} as const;

/** What a coordinator's `task_delegate` payload may carry beyond the agent protocol's. */
export interface SwarmRequest extends TaskDelegatePayload {
  /** A static plan: the coordinator delegates these instead of asking its model for a plan. */
  plan?: StaticSubtask[];
}

/** A subtask as planned: where it goes and under which ids. */
export interface PlannedSubtask extends Subtask {
  /** The agent it was given to, or null when no live agent could take it. */
  agentId: string | null;
  node?: string | null;
  /** Why it went nowhere. */
  reason?: string;
  childRunId: string;
  messageId: string;
}

/** The `result_notify` payload of a swarm: the agent protocol's, plus what the answer lacks. */
export interface SwarmResult extends ResultNotifyPayload {
  subtasks: number;
  missing: MissingSubtask[];
}

export interface CoordinatorOptions {
  /** Actor type (default `coordinator`); one type per model and settings. */
  type?: string;
  /** The coordinator's model (for the plan and the answer), or a function that makes it once. */
  model: ModelClient | (() => ModelClient | Promise<ModelClient>);
  /**
   * The model's price (`price` of its `[models.<name>]` entry): the plan's and the answer's
   * calls are then priced as an agent's are, `costUsd` on their `model_response` and in the
   * run's usage. Without it they carry tokens only.
   */
  price?: ModelPrice;
  /** The node's model-call scheduler: each call then takes a slot of its model. */
  scheduler?: ModelCallScheduler;
  /**
   * The bus of the node that hosts the coordinator (the swarm reads events, the registry
   * and agents through it). A function, because the node connects after it registered
   * its actor types.
   */
  bus: () => Bus;
  /**
   * Interrupts a child still running at the deadline (the node's `interrupt` signal for
   * that subtask's message): it ends `cancelled` instead of working on for an answer that
   * no longer waits for it. A KovaNode passes its own; without it a late child runs on and
   * its outcome is ignored.
   */
  interrupt?: InterruptDelegation;
  /** Where agents are found (default: the registry and `capability_query`, natsAgentDirectory). */
  directory?: (bus: Bus, self: string) => AgentDirectory;
  /** Capabilities the coordinator itself offers (default none: nobody delegates to it by capability). */
  capabilities?: string[];
  /** Most subtasks in one plan (default 20). */
  maxSubtasks?: number;
  /** Invalid plans the model may repair (default 2). */
  planRepairs?: number;
  /** Swarm deadline when the request gives none (default 5 min). */
  deadlineMs?: number;
  /** `max_tokens` of each subtask's run, unless the plan says (default none sent). */
  subtaskMaxTokens?: number;
  /** Guidance for the planner and for the answer. */
  instructions?: { plan?: string; synthesize?: string };
  /**
   * Share of the deadline kept for writing the answer: results are collected until
   * `deadline - reserve` (default 20 %, at most 30 s).
   */
  synthesisReserve?: (deadlineMs: number) => number;
  logger?: Logger;
}

export const DEFAULT_MAX_SUBTASKS = 20;
export const DEFAULT_SWARM_DEADLINE_MS = 5 * 60_000;
/** Slack for clock skew between nodes when reading children's events from the run's start. */
const CLOCK_SKEW_MS = 60_000;
/** How long a collect waits to read the outcomes already stored before it trusts its view. */
const CATCH_UP_MS = 10_000;

/** What a re-run learns from the run's own stored events. */
interface History {
  startedAt?: number;
  planned?: PlannedSubtask[];
  planUsage?: RunUsage;
  linked: string[];
  completed?: SwarmResult;
  ended: boolean;
}

/**
 * Defines a coordinator actor type (docs/swarm.md): it takes a `task_delegate` whose payload
 * follows the agent protocol (plus an optional static `plan`) and, in one journaled turn:
 *
 * 1. reads its run's stored events (`history`): a re-run after a takeover continues
 *    from the plan and the delegations the first run published;
 * 2. lists live agents (`agents`: registry + `capability_query`, least backlog first);
 * 3. plans (`plan`): its model splits the task through a `submit_plan` tool call validated
 *    against a JSON Schema and repaired within a bound, or the caller's static plan;
 * 4. assigns each subtask to an agent with its capability, spreading over agents and nodes;
 * 5. delegates (`delegate`): one `task_delegate` per subtask, with ids derived from the
 *    run id and the subtask's index, so a re-run sends nothing twice (the stream and the
 *    agent drop the repeat), carrying `max_tokens`, the deadline and the budget group;
 * 6. collects (`collect`) the children's `result_notify` replies and terminal events until
 *    all are in or the deadline (less the synthesis reserve) passes;
 * 7. writes the answer (`synthesize`) with its model, naming what is missing, and replies.
 *
 * Every step is an actor step, journaled in the node's WAL; events go on
 * `kova.<c>.events.<sessionId>.<runId>` with message ids derived from the run, so a re-run
 * publishes each once. The coordinator handles one swarm at a time (one turn per actor):
 * run several coordinators for concurrent swarms.
 * @throws ConfigError / ArgumentError for bad options (at definition time)
 */
export function defineCoordinator(opts: CoordinatorOptions): ActorDefinition<Record<string, never>> {
  const maxSubtasks = opts.maxSubtasks ?? DEFAULT_MAX_SUBTASKS;
  if (!Number.isInteger(maxSubtasks) || maxSubtasks < 1 || maxSubtasks > 1000) throw new ArgumentError("maxSubtasks", "must be an integer from 1 to 1000");
  const deadlineMs = opts.deadlineMs ?? DEFAULT_SWARM_DEADLINE_MS;
  if (!Number.isInteger(deadlineMs) || deadlineMs < 1) throw new ArgumentError("deadlineMs", "must be a positive integer of milliseconds");
  // The agent directory and the run watcher bind their own component: they get the caller's logger.
  const scope = opts.logger ?? silentLogger();
  const log = componentLogger(scope, "coordinator");
  let model: Promise<ModelClient> | undefined;
  const directories = new Map<string, AgentDirectory>();
  const deps: TurnDeps = {
    opts,
    maxSubtasks,
    deadlineMs,
    log,
    model: () => (model ??= Promise.resolve(typeof opts.model === "function" ? opts.model() : opts.model)),
    directory: (bus, self) => {
      let d = directories.get(self);
      if (!d) {
        d = opts.directory ? opts.directory(bus, self) : natsAgentDirectory(bus, { exclude: [self], logger: scope });
        directories.set(self, d);
      }
      return d;
    },
  };
  return defineActor<Record<string, never>>({
    type: opts.type ?? "coordinator",
    capabilities: opts.capabilities ?? [],
    initialState: () => ({}),
    handlers: { task_delegate: (ctx) => runSwarmTurn(ctx, deps) },
    rpc: {
      capability_query: (env) => ({ agentId: env.to, capabilities: opts.capabilities ?? [], coordinator: true }),
    },
  });
}

interface TurnDeps {
  opts: CoordinatorOptions;
  maxSubtasks: number;
  deadlineMs: number;
  log: Logger;
  model(): Promise<ModelClient>;
  directory(bus: Bus, self: string): AgentDirectory;
}

async function runSwarmTurn(ctx: ActorContext<Record<string, never>>, deps: TurnDeps): Promise<SwarmResult> {
  // Like an agent's, the reply names the node that ended the run (a workflow step's metadata.node).
  const result = await swarmTurn(ctx, deps);
  return { ...result, node: ctx.nodeId };
}

async function swarmTurn(ctx: ActorContext<Record<string, never>>, deps: TurnDeps): Promise<SwarmResult> {
  const env = ctx.message;
  // Ids derived from the message, so a re-run of this turn (redelivery, takeover) is the same run.
  const fallbackRun = derivedId({ prefix: "swarm" }, env.id);
  let req: SwarmRequest;
  try {
    req = readSwarmRequest(env.payload);
  } catch (err) {
    // Unreadable: the run still ends visibly on its subject (run_failed, run_stream_end),
    // so a follower of the session sees why, not only the requester.
    const p = (typeof env.payload === "object" && env.payload !== null ? env.payload : {}) as Record<string, unknown>;
    const pick = (v: unknown) => (typeof v === "string" && /^[A-Za-z0-9_-]{1,128}$/.test(v) ? v : undefined);
    const runId = pick(p.runId) ?? fallbackRun;
    const parentRunId = pick(p.parentRunId);
    const unread: SwarmRequest = { input: "", ...(parentRunId ? { parentRunId } : {}) };
    return new SwarmRun(ctx, deps, unread, runId, pick(p.sessionId) ?? runId).finishUnanswered("failed", err);
  }
  const runId = req.runId ?? fallbackRun;
  const sessionId = req.sessionId ?? runId;
  const run = new SwarmRun(ctx, deps, req, runId, sessionId);
  try {
    return await run.execute();
  } catch (err) {
    const reason: unknown = ctx.signal.aborted ? ctx.signal.reason : err;
    // Leaving this node (lease lost, a stop) or killed: the next host or nobody finishes it.
    if (isLeaseLost(reason) || (reason instanceof TurnInterruptedError && reason.by !== "interrupt")) throw reason;
    if (isInfrastructureFailure(err)) throw err;
    const cancelled = reason instanceof TurnInterruptedError;
    return run.finishUnanswered(cancelled ? "cancelled" : "failed", err);
  }
}

/** Reads the payload: the agent protocol's task, plus an optional static plan. @throws ArgumentError */
function readSwarmRequest(payload: unknown): SwarmRequest {
  const base = readTaskPayload(payload);
  const plan = (payload as { plan?: unknown }).plan;
  return plan === undefined || plan === null ? base : { ...base, plan: plan as StaticSubtask[] };
}

function failedResult(runId: string, sessionId: string, usage: RunUsage, err: unknown, status: "failed" | "cancelled" = "failed"): SwarmResult {
  const w = toWire(err);
  return { output: "", usage, runId, sessionId, status, error: { code: w.code, message: w.message }, subtasks: 0, missing: [] };
}

/** One swarm run: the state of one coordinator turn. */
class SwarmRun {
  private usage: RunUsage = { ...ZERO_USAGE };
  private readonly bus: Bus;

  constructor(
    private readonly ctx: ActorContext<Record<string, never>>,
    private readonly deps: TurnDeps,
    private readonly req: SwarmRequest,
    readonly runId: string,
    readonly sessionId: string,
  ) {
    this.bus = deps.opts.bus();
  }

  async execute(): Promise<SwarmResult> {
    const { ctx, deps, req } = this;
    const history = await ctx.step("history", async () => readHistory(await readRunEvents(this.bus, this.sessionId, this.runId)), { idempotent: true });
    if (history.completed) {
      if (!history.ended) await this.emit(RunEventType.streamEnd, { status: history.completed.status });
      return history.completed;
    }
    const startedAt = history.startedAt ?? ctx.now();
    const totalMs =
      req.constraints?.deadline === undefined ? deps.deadlineMs : msUntilDeadline(req.constraints.deadline, startedAt, "payload.constraints.deadline");
    const deadline = startedAt + totalMs;
    const cutoff = deadline - (deps.opts.synthesisReserve ?? defaultReserve)(totalMs);
    if (history.startedAt === undefined) {
      await this.emit(RunEventType.started, { agentId: ctx.actorId, input: req.input, coordinator: true, deadline, startedAt });
    }

    let planned = history.planned;
    if (planned) this.usage = addUsage(this.usage, history.planUsage);
    else planned = await this.plan();

    // The children's outcomes: replies on the watcher's inbox, and their events from the run's start.
    await using watcher = await RunWatcher.start(this.bus, {
      sessionId: this.sessionId,
      since: startedAt - CLOCK_SKEW_MS,
      logger: deps.opts.logger ?? deps.log,
    });
    const linked = new Set(history.linked);
    const toSend = planned.filter((p) => p.agentId !== null && !linked.has(p.childRunId));
    await ctx.step("delegate", () => this.delegate(toSend, watcher, cutoff, planned), { idempotent: true });
    const sent = planned.filter((p) => p.agentId !== null);
    for (const p of sent) watcher.expect(p.messageId, p.childRunId);

    const outcomes = await ctx.step(
      "collect",
      async () => {
        await Promise.race([watcher.caughtUp, new Promise((r) => setTimeout(r, CATCH_UP_MS).unref())]);
        const got = await watcher.wait(
          sent.map((p) => p.childRunId),
          { until: cutoff, signal: ctx.signal },
        );
        return [...got.values()];
      },
      { idempotent: true },
    );
    // Children still running at the cutoff are interrupted: the answer goes without them.
    const late = sent.filter((p) => !outcomes.some((o) => o.runId === p.childRunId));
    const interrupt = deps.opts.interrupt;
    if (late.length > 0 && interrupt) {
      await ctx.step("interrupt-late", () => Promise.all(late.map((p) => interrupt(p.agentId!, p.messageId))), { idempotent: true });
    }
    return this.answer(planned, outcomes);
  }

  private async plan(): Promise<PlannedSubtask[]> {
    const { ctx, deps, req } = this;
    const agents = await ctx.step("agents", () => deps.directory(this.bus, ctx.actorId).list(), { idempotent: true });
    let subtasks: Subtask[];
    if (req.plan !== undefined) {
      subtasks = readStaticPlan(req.plan, deps.maxSubtasks);
    } else {
      const capabilities = [...new Set(agents.flatMap((a) => a.capabilities))].sort();
      if (capabilities.length === 0) throw new SwarmNoAgentError(ctx.actorId, ["any capability"], []);
      const call = await this.modelCall();
      const d = await ctx
        .step(
          "plan",
          () =>
            decompose(call, {
              coordinator: ctx.actorId,
              task: req.input,
              capabilities,
              maxSubtasks: deps.maxSubtasks,
              ...(deps.opts.planRepairs !== undefined ? { maxRepairs: deps.opts.planRepairs } : {}),
              ...(deps.opts.instructions?.plan ? { instructions: deps.opts.instructions.plan } : {}),
              ...(req.constraints?.max_tokens ? { maxTokens: req.constraints.max_tokens } : {}),
              signal: ctx.signal,
            }),
          { idempotent: true },
        )
        .catch((err: unknown) => this.planFailed(err));
      subtasks = d.subtasks;
      await this.ownCall("plan", d.model, d.usage, { calls: d.calls });
    }
    const planned = this.place(subtasks, agents);
    await this.emit(SwarmEventType.planned, { subtasks: planned, usage: this.usage });
    return planned;
  }

  private place(subtasks: Subtask[], agents: AgentCandidate[]): PlannedSubtask[] {
    const assignments = assignSubtasks(subtasks, agents);
    const planned = subtasks.map((s, i): PlannedSubtask => {
      const a = assignments[i]!;
      const ids = {
        childRunId: derivedId({ prefix: "run" }, this.runId, String(s.index)),
        messageId: derivedId({ prefix: "task" }, this.runId, String(s.index)),
      };
      return a.agentId === null ? { ...s, ...ids, agentId: null, reason: a.reason } : { ...s, ...ids, agentId: a.agentId, node: a.node };
    });
    if (planned.every((p) => p.agentId === null)) {
      const wanted = [...new Set(subtasks.map((s) => s.agent ?? s.capability ?? "?"))];
      throw new SwarmNoAgentError(this.ctx.actorId, wanted, [...new Set(agents.flatMap((a) => a.capabilities))].sort());
    }
    return planned;
  }

  private async delegate(toSend: PlannedSubtask[], watcher: RunWatcher, cutoff: number, planned: PlannedSubtask[]): Promise<number> {
    const { ctx, deps, req } = this;
    const remaining = Math.max(1, Math.round(cutoff - Date.now()));
    const budgetGroup = req.constraints?.budget_group ?? this.sessionId;
    await Promise.all(
      toSend.map((p) => {
        const constraints: TaskConstraints = { deadline: remaining, budget_group: budgetGroup };
        const maxTokens = p.maxTokens ?? deps.opts.subtaskMaxTokens;
        if (maxTokens) constraints.max_tokens = maxTokens;
        // Subtasks are for the swarm's end user, at its priority (fair share, user_max_tokens).
        if (req.constraints?.user !== undefined) constraints.user = req.constraints.user;
        if (req.constraints?.priority !== undefined) constraints.priority = req.constraints.priority;
        return delegateTask(this.bus, {
          id: p.messageId,
          from: ctx.actorId,
          to: p.agentId!,
          input: p.task,
          sessionId: this.sessionId,
          runId: p.childRunId,
          parentRunId: this.runId,
          constraints,
          replyTo: watcher.replyTo,
          deadline: cutoff,
        });
      }),
    );
    // Linked after the send: a re-run skips the children it finds linked, and re-sends the rest.
    await Promise.all(
      toSend.map((p) =>
        this.publish(RunEventType.childLinked, { childRunId: p.childRunId, stepId: `subtask-${p.index}`, agentId: p.agentId, task: p.task }, p.childRunId),
      ),
    );
    deps.log.debug({ runId: this.runId, sent: toSend.length, planned: planned.length }, "delegated");
    return toSend.length;
  }

  private async answer(planned: PlannedSubtask[], outcomes: RunOutcome[]): Promise<SwarmResult> {
    const { ctx, deps, req } = this;
    const byRun = new Map(outcomes.map((o) => [o.runId, o]));
    const results: SubtaskResult[] = [];
    const missing: MissingSubtask[] = [];
    let childUsage: RunUsage = { ...ZERO_USAGE };
    for (const p of planned) {
      const o = byRun.get(p.childRunId);
      if (o) childUsage = addUsage(childUsage, o.usage);
      if (p.agentId !== null && o?.status === "completed") results.push({ subtask: p, agentId: p.agentId, output: o.output });
      else missing.push({ index: p.index, task: p.task, agentId: p.agentId, reason: missingReason(p, o) });
    }
    if (missing.length > 0) await this.emit(SwarmEventType.partial, { missing });
    if (results.length === 0) throw new SwarmNoResultsError(ctx.actorId, missing.length);
    const call = await this.modelCall();
    const s = await ctx.step(
      "synthesize",
      () =>
        synthesize(call, {
          task: req.input,
          results,
          missing,
          ...(deps.opts.instructions?.synthesize ? { instructions: deps.opts.instructions.synthesize } : {}),
          ...(req.constraints?.max_tokens ? { maxTokens: req.constraints.max_tokens } : {}),
          signal: ctx.signal,
        }),
      { idempotent: true },
    );
    await this.ownCall("synthesize", s.model, s.usage);
    const usage = addUsage(this.usage, childUsage);
    const result: SwarmResult = {
      output: s.output + missingNote(missing),
      usage,
      runId: this.runId,
      sessionId: this.sessionId,
      status: "completed",
      subtasks: planned.length,
      missing,
    };
    await this.emit(RunEventType.completed, { output: result.output, usage, ownUsage: this.usage, subtasks: planned.length, missing });
    await this.emit(RunEventType.streamEnd, { status: "completed" });
    return result;
  }

  /** Ends a run that has no answer: `run_failed` or `run_cancelled`, then `run_stream_end`. */
  async finishUnanswered(status: "failed" | "cancelled", err: unknown): Promise<SwarmResult> {
    const result = failedResult(this.runId, this.sessionId, this.usage, err, status);
    try {
      // The coordinator's own model calls so far, as an agent's run_failed carries its
      // usage; the children's runs report theirs in their own events.
      if (status === "failed") await this.emit(RunEventType.failed, { error: result.error, usage: this.usage });
      else await this.emit(RunEventType.cancelled, { usage: this.usage });
      await this.emit(RunEventType.streamEnd, { status });
    } catch (emitErr) {
      // A run whose end cannot be published still answers its requester.
      this.deps.log.warn({ err: emitErr, runId: this.runId }, "could not publish the end of a swarm run");
    }
    if (status === "failed") this.deps.log.warn({ err, runId: this.runId, coordinator: this.ctx.actorId }, "swarm run failed");
    return result;
  }

  /** A plan the model never got right still cost its calls: they go into the run's usage before the run fails. */
  private async planFailed(err: unknown): Promise<never> {
    if (isKovaError(err, SwarmErrorCode.SWARM_PLAN_INVALID)) {
      const spent = err.data as { attempts?: number; usage?: RunUsage; model?: string } | undefined;
      if (spent?.usage && spent.model) await this.ownCall("plan", spent.model, spent.usage, { calls: spent.attempts });
    }
    throw err;
  }

  /**
   * Counts the coordinator's own model calls (the plan with its repairs, or the answer) in
   * the run's usage and publishes their `model_response`. The cost is reckoned here, from
   * the journaled tokens, with the agents' costOf, so a replay or a takeover prices them the
   * same, and it sits beside `usage` as in an agent's event (docs/protocol.md).
   */
  private async ownCall(purpose: "plan" | "synthesize", model: string, tokens: RunUsage, extra: Record<string, unknown> = {}): Promise<void> {
    const { price } = this.deps.opts;
    const usage: RunUsage = { inputTokens: tokens.inputTokens, outputTokens: tokens.outputTokens };
    const costUsd = price ? costOf(usage, price).total : undefined;
    this.usage = addUsage(this.usage, costUsd === undefined ? usage : { ...usage, costUsd });
    await this.emit(RunEventType.modelResponse, { model, usage, ...(costUsd !== undefined ? { costUsd } : {}), purpose, ...extra }, purpose);
  }

  private async modelCall(): Promise<ModelCall> {
    const client = await this.deps.model();
    const { scheduler } = this.deps.opts;
    const agentId = this.ctx.actorId;
    return (request) =>
      client.complete({
        ...request,
        headers: { "x-kova-agent": agentId, "x-kova-run": this.runId },
        ...(scheduler ? { acquireSlot: scheduler.slotFor({ model: client.name, agentId, ...(request.signal ? { signal: request.signal } : {}) }) } : {}),
      });
  }

  /** A journaled event publish whose message id is derived from the run: a re-run publishes it once. */
  private emit(type: string, data: unknown, key = ""): Promise<void> {
    return this.ctx.step(`emit:${type}${key ? `:${key}` : ""}`, () => this.publish(type, data, key), { idempotent: true });
  }

  private publish(type: string, data: unknown, key = ""): Promise<void> {
    const event: KovaEvent = { type, sessionId: this.sessionId, runId: this.runId, ts: Date.now(), data };
    if (this.req.parentRunId) event.parentRunId = this.req.parentRunId;
    return this.bus.publishEvent(event, { msgId: derivedId({ prefix: "ev" }, this.runId, type, key) });
  }
}

function defaultReserve(totalMs: number): number {
  return Math.min(30_000, Math.round(totalMs * 0.2));
}

/**
 * Why a subtask has no result, as the answer names it to the user: the child's error with
 * its internals (a model's endpoint, a file path, a key) taken out; its run_failed event
 * keeps the whole error for operators.
 */
export function missingReason(p: Pick<PlannedSubtask, "agentId" | "reason">, o: RunOutcome | undefined): string {
  if (p.agentId === null) return p.reason ?? "no agent could take it";
  if (!o) return "no result before the deadline";
  if (o.status === "cancelled") return "the agent's run was cancelled";
  return `the agent's run failed${o.error ? `: ${publicText(o.error.message)} [${o.error.code}]` : ""}`;
}

/** What the run's stored events say was done already. */
function readHistory(events: KovaEvent[]): History {
  const h: History = { linked: [], ended: false };
  for (const e of events) {
    const data = (e.data ?? {}) as Record<string, unknown>;
    switch (e.type) {
      case RunEventType.started:
        h.startedAt = typeof data.startedAt === "number" ? data.startedAt : e.ts;
        break;
      case SwarmEventType.planned:
        h.planned = data.subtasks as PlannedSubtask[];
        h.planUsage = data.usage as RunUsage;
        break;
      case RunEventType.childLinked:
        if (typeof data.childRunId === "string") h.linked.push(data.childRunId);
        break;
      case RunEventType.completed:
        h.completed = {
          output: String(data.output ?? ""),
          usage: data.usage as RunUsage,
          runId: e.runId,
          sessionId: e.sessionId,
          status: "completed",
          subtasks: Number(data.subtasks ?? 0),
          missing: (data.missing as MissingSubtask[]) ?? [],
        };
        break;
      case RunEventType.streamEnd:
        h.ended = true;
        break;
    }
  }
  return h;
}
