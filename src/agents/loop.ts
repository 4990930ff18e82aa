import { KovaError, timedPhase } from "../core/index.js";
import { TurnInterruptedError, type ActorContext } from "../actors/index.js";
import { isInfrastructureFailure } from "../bus/index.js";
import { ArgumentRepairBudget, ToolSet } from "../tools/index.js";
import { groupsOf, shareKeyOf, type RunParty } from "./budget.js";
import { DEFAULT_MAX_TURNS, type AgentDefinition, type HookResult } from "./definition.js";
import { AgentHookFailedError, RunLimitExceededError } from "./errors.js";
import { applyFit, modelTurn } from "./model-turn.js";
import { ModelOutputTruncatedError } from "./model/errors.js";
import type { ChatMessage } from "./model/types.js";
import { parseRunRequest, type AgentResult, type RunRequest, type RunStatus } from "./run-protocol.js";
import { hookContext, publish, publishStarted, type AgentState, type RunScope } from "./run-scope.js";
import type { AgentRuntime } from "./runtime.js";
import { armRunLimit } from "./budget-time.js";
import { runToolCalls } from "./tool-calls.js";
import { addRun, newTally, runUsage, tallyModel } from "./usage.js";

/**
 * The decision loop of one run: reason → tool calls → results → reason … → final answer,
 * each model response and each tool result a journaled step, so that a run resumed after
 * a crash (same node, from the WAL; or a takeover, from the step journal) continues from
 * its last recorded step without calling the model again for the recorded ones.
 *
 * A run always ends with a result (`completed`, `failed` or `cancelled`) and the events
 * `run_completed` / `run_failed` / `run_cancelled` then `run_stream_end`, except when the
 * node itself cannot go on (lease lost, WAL or NATS failure, a stop): then the error
 * propagates and the turn resumes where the actor goes next.
 */
export async function runAgentTurn(def: AgentDefinition, runtime: AgentRuntime, ctx: ActorContext<AgentState>): Promise<AgentResult> {
  const startedAt = ctx.now();
  let request: RunRequest;
  let requestError: unknown;
  try {
    request = parseRunRequest(ctx.message.type, ctx.message.payload, startedAt);
  } catch (err) {
    requestError = err;
    request = { kind: "task", input: "" };
  }
  const runId = request.runId ?? ctx.newId();
  const sessionId = request.sessionId ?? runId;
  const limit = armRunLimit(ctx, {
    agentId: ctx.actorId,
    startedAt,
    ...(def.run.timeBudgetMs !== undefined ? { timeBudgetMs: def.run.timeBudgetMs } : {}),
    ...(request.deadline !== undefined ? { deadline: request.deadline } : {}),
  });
  const party: RunParty = {
    sessionId,
    from: ctx.message.from,
    ...(request.user ? { user: request.user } : {}),
    ...(request.budgetGroup ? { budgetGroup: request.budgetGroup } : {}),
  };
  const s: RunScope = {
    // The run's steps see a signal that also fires at its time limit.
    ctx: limit.ctx,
    def,
    runtime,
    agentId: ctx.actorId,
    runId,
    sessionId,
    ...(request.parentRunId ? { parentRunId: request.parentRunId } : {}),
    request,
    startedAt,
    tally: newTally(),
    tools: new ToolSet([]),
    repairs: new ArgumentRepairBudget(runtime.maxArgumentRepairs),
    groups: groupsOf(def.budget, party, runtime.budgetGroups),
    shareKey: shareKeyOf(def.budget, party),
    history: [],
    modelSteps: 0,
  };
  runtime.runStarted(s.agentId, runId);
  try {
    if (requestError) throw requestError;
    return await loop(s);
  } catch (err) {
    // Whatever the aborted call threw (an abort error of the model client, an interrupted
    // wait), the run ended because of its limit; unless the turn itself was interrupted or
    // the node failed meanwhile (a lost lease, the WAL, NATS), which the node must handle.
    const byLimit = !ctx.signal.aborted && limit.exceeded !== undefined && (!(err instanceof KovaError) || isRunFailure(err));
    const cause = byLimit ? limit.exceeded : err;
    return await endAbnormally(s, cause, ctx.signal);
  } finally {
    limit.dispose();
    runtime.runEnded(s.agentId);
  }
}

async function loop(s: RunScope): Promise<AgentResult> {
  const { ctx, def } = s;
  // A task without a sessionId is a conversation of one run: nothing to load or keep.
  if (s.request.sessionId !== undefined || def.hooks.beforeUserMessage) {
    const loaded = await ctx.step(
      "run:start",
      async ({ key }) => {
        // The event's ack and the conversation's read, in one round trip's time.
        const [, history] = await Promise.all([publishStarted(s, key), loadHistory(s)]);
        return history;
      },
      { idempotent: true },
    );
    // A copy: the journal keeps the step's result by reference and writes it again with every later step.
    s.history = [...loaded];
  } else {
    // A task of its own with nothing to load: `run_started` goes out with the first model
    // call's step instead, one journal write less per run. The conversation it brings (if
    // any) is part of the message, so a replay rebuilds the same history.
    s.startedInStep = "model";
    s.history = broughtHistory(s);
  }
  s.tools = await s.runtime.toolsFor(def, s.agentId);
  let input = s.request.input;
  const before = await hook(s, "beforeUserMessage", () => def.hooks.beforeUserMessage?.(input, hookContext(s)));
  if (before?.message !== undefined) input = before.message;
  addToMemory(s, before);
  s.history.push({ role: "user", content: input });
  if (before?.stop) return finish(s, before.output ?? "", "completed");

  const maxTurns = def.run.maxTurns ?? DEFAULT_MAX_TURNS;
  let output = "";
  for (let turn = 0; ; turn++) {
    checkTime(s);
    if (turn >= maxTurns) {
      throw new RunLimitExceededError(
        "max_turns",
        maxTurns,
        `no final answer after ${maxTurns} model calls; raise run.max_turns of agent ${s.agentId} or give it a narrower task`,
      );
    }
    s.modelSteps++;
    const rec = await modelTurn(s, turn);
    s.history = applyFit(s.history, rec);
    if (rec.summary) tallyModel(s.tally, rec.summary.model, rec.summary.usage, rec.summary.costUsd);
    tallyModel(s.tally, rec.model, rec.usage, rec.costUsd);
    s.history.push(rec.message);
    const calls = rec.message.toolCalls ?? [];
    // Decided from the recorded response, so a replay ends the same way without a new call.
    if (rec.finishReason === "length" && calls.length > 0) {
      throw new ModelOutputTruncatedError({
        model: rec.model,
        tools: calls.map((c) => c.name),
        ...(def.maxOutputTokens !== undefined ? { maxOutputTokens: def.maxOutputTokens } : {}),
      });
    }
    output = rec.message.content ?? "";
    if (calls.length > 0) s.history.push(...(await runToolCalls(s, calls)));
    const after = await hook(s, "afterTurn", () =>
      def.hooks.afterTurn?.({ index: turn, content: rec.message.content, toolCalls: calls.length }, hookContext(s)),
    );
    addToMemory(s, after);
    if (after?.stop) return finish(s, after.output ?? output, "completed");
    if (calls.length === 0) break;
  }
  return finish(s, output, "completed");
}

async function loadHistory(s: RunScope): Promise<ChatMessage[]> {
  if (s.request.sessionId === undefined) return broughtHistory(s);
  const memory = await s.runtime.memory();
  const kept = await timedPhase("kv.memory.load", s.agentId, () => memory.load(s.agentId, s.sessionId));
  // A chat that brings its conversation (a client keeping it, as OpenAI chat clients do)
  // starts a session the agent has no memory of with it; a session with memory keeps its own.
  return kept.length === 0 && s.request.history ? broughtHistory(s) : kept;
}

/** The conversation a message brings (`history`), as fresh messages. */
function broughtHistory(s: RunScope): ChatMessage[] {
  return (s.request.history ?? []).map((t) => ({ role: t.role, content: t.content }));
}

function checkTime(s: RunScope): void {
  const now = s.ctx.now();
  const budget = s.def.run.timeBudgetMs;
  if (budget !== undefined && now - s.startedAt > budget) {
    throw new RunLimitExceededError("time_budget_ms", budget, `the run took ${now - s.startedAt} ms; raise run.time_budget_ms of agent ${s.agentId}`);
  }
  if (s.request.deadline !== undefined && now > s.request.deadline) {
    throw new RunLimitExceededError("deadline", s.request.deadline, `the task's deadline ${new Date(s.request.deadline).toISOString()} has passed`);
  }
}

function addToMemory(s: RunScope, r: HookResult | undefined): void {
  for (const m of r?.addToMemory ?? [])
    s.history.push(m.role === "assistant" ? { role: "assistant", content: m.content } : { role: m.role, content: m.content });
}

type HookName = "beforeUserMessage" | "afterTurn" | "afterLoop";

/** Runs a hook as a step: its result is recorded, so replay neither re-runs it nor sees a different answer. */
async function hook(s: RunScope, name: HookName, call: () => HookResult | undefined | Promise<HookResult | undefined>): Promise<HookResult | undefined> {
  if (!s.def.hooks[name]) return undefined;
  const r = await s.ctx.step(
    `hook:${name}`,
    async () => {
      try {
        return (await call()) ?? null;
      } catch (err) {
        throw new AgentHookFailedError(name, s.agentId, err);
      }
    },
    { idempotent: true },
  );
  return r ?? undefined;
}

/**
 * The last step of a run: save the conversation, publish the end events, add the usage to
 * the agent's totals. `error.data` (a failed model call's endpoint and status…) is for
 * operators: it goes into the `run_failed` event, not into the reply.
 */
async function finish(s: RunScope, output: string, status: RunStatus, error?: { code: string; message: string; data?: unknown }): Promise<AgentResult> {
  let result: AgentResult = {
    output,
    usage: runUsage(s.tally),
    runId: s.runId,
    sessionId: s.sessionId,
    status,
    ...(error ? { error: { code: error.code, message: error.message } } : {}),
    node: s.ctx.nodeId,
  };
  if (status === "completed") {
    // The answer the conversation keeps: the model's final message, or the output a hook
    // stopped with; replaced (never mutated: it is a recorded step result) when they differ.
    const last = s.history.at(-1);
    const answerAt = last?.role === "assistant" && !last.toolCalls?.length ? s.history.length - 1 : s.history.push({ role: "assistant", content: output }) - 1;
    const keep = (text: string) => {
      if (s.history[answerAt]?.content !== text) s.history[answerAt] = { role: "assistant", content: text };
    };
    keep(output);
    const after = await hook(s, "afterLoop", () => s.def.hooks.afterLoop?.(result, hookContext(s)));
    if (after?.output !== undefined) {
      result = { ...result, output: after.output };
      keep(after.output);
    }
    addToMemory(s, after);
  }
  const final = result;
  if (status === "cancelled") {
    // No step can start once the turn is interrupted (the journal refuses): the end events
    // go out directly, best effort, under ids of this turn's end (a repeat is stored once).
    // A crash now replays the turn, which then runs on.
    const endKey = `${s.agentId}.${s.ctx.message.id}.end`;
    await publish(s, "run_cancelled", { agentId: s.agentId, usage: final.usage }, endKey).catch(() => undefined);
    await publish(s, "run_stream_end", { status }, endKey).catch(() => undefined);
    s.ctx.state.usage = addRun(s.ctx.state.usage, s.tally);
    return final;
  }
  // Not recorded: the turn's commit, right after, is what says the run ended. A crash
  // before it replays the turn, which reuses every recorded step and comes here again: the
  // conversation is saved again with the same content, and the end events go out again
  // under the same message ids (the step's key), which the stream drops as duplicates.
  await s.ctx.step(
    "run:end",
    async ({ key }) => {
      // A run that ended before its first model step never said it started.
      if (s.startedInStep === "model" && s.modelSteps === 0) await publishStarted(s, key);
      if (status === "completed") {
        if (s.request.sessionId !== undefined) {
          const memory = await s.runtime.memory();
          await timedPhase("kv.memory.save", s.agentId, () => memory.save(s.agentId, s.sessionId, s.history));
        }
        await publish(s, "run_completed", { agentId: s.agentId, output: final.output, usage: final.usage }, key);
      } else {
        await publish(s, "run_failed", { agentId: s.agentId, error, usage: final.usage }, key);
      }
      await publish(s, "run_stream_end", { status }, key);
      return true;
    },
    { idempotent: true, record: false },
  );
  s.ctx.state.usage = addRun(s.ctx.state.usage, s.tally);
  return final;
}

/**
 * Ends a run that threw: an interrupt is `cancelled`, a failure of the run itself (model,
 * budget, run policy, tools, hooks, bad input, a replay mismatch) is `failed`; what the node
 * must handle (a stop, a kill, a lost lease, WAL or NATS trouble, the step journal) propagates.
 */
async function endAbnormally(s: RunScope, err: unknown, signal: AbortSignal): Promise<AgentResult> {
  // `signal` is the turn's own (interrupt, kill, lost lease), not the run's limit.
  if (signal.aborted) {
    const reason = signal.reason;
    if (reason instanceof TurnInterruptedError && reason.by === "interrupt")
      return finish(s, "", "cancelled", { code: reason.code, message: "the run was interrupted" });
    throw reason ?? err;
  }
  if (!isRunFailure(err)) throw err;
  const e = err as KovaError;
  s.runtime.log.info({ agentId: s.agentId, runId: s.runId, code: e.code, err: e.message, data: e.data }, "run failed");
  return finish(s, "", "failed", { code: e.code, message: e.message, ...(e.data === undefined ? {} : { data: e.data }) });
}

/**
 * A typed failure of the run itself, which ends it `failed`; an interruption, a failure of
 * the infrastructure (bus's isInfrastructureFailure) and an untyped error (a defect, which
 * the turn's supervision retries) are not.
 */
function isRunFailure(err: unknown): boolean {
  return err instanceof KovaError && !(err instanceof TurnInterruptedError) && !isInfrastructureFailure(err);
}
