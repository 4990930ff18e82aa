import type { ActorContext } from "../actors/index.js";
import type { KovaEvent } from "../bus/index.js";
import type { ArgumentRepairBudget, ToolSet } from "../tools/index.js";
import type { GroupLimit } from "./budget.js";
import type { AgentDefinition, HookContext } from "./definition.js";
import type { ChatMessage } from "./model/types.js";
import type { AgentUsageTotals, RunRequest } from "./run-protocol.js";
import type { AgentRuntime } from "./runtime.js";
import type { RunTally } from "./usage.js";

/** What an agent actor keeps in its checkpoint: usage totals only (conversations live in NATS KV). */
export interface AgentState {
  usage: AgentUsageTotals;
}

/** Everything one run works with. Rebuilt identically on replay from the journal. */
export interface RunScope {
  readonly ctx: ActorContext<AgentState>;
  readonly def: AgentDefinition;
  readonly runtime: AgentRuntime;
  readonly agentId: string;
  readonly runId: string;
  readonly sessionId: string;
  readonly parentRunId?: string;
  readonly request: RunRequest;
  /** Journaled clock reading at the start of the run. */
  readonly startedAt: number;
  readonly tally: RunTally;
  /** Resolved at the start of the run (an MCP server's tools may change between runs). */
  tools: ToolSet;
  readonly repairs: ArgumentRepairBudget;
  readonly groups: readonly GroupLimit[];
  /** The fair-share key of the run's model calls (budget.ts, shareKeyOf). */
  readonly shareKey: string;
  /** The session's conversation plus this run's messages, without the system prompt. */
  history: ChatMessage[];
  /** `model`: `run_started` is published by the first model call's step (no `run:start` step). */
  startedInStep?: "model";
  /** Model steps entered so far (counted before each, so replay counts the same). */
  modelSteps: number;
}

/** An event of this run (ts now: events are published inside the steps that produce them). */
export function runEvent(s: Pick<RunScope, "runId" | "sessionId" | "parentRunId">, type: string, data: unknown): KovaEvent {
  return { type, sessionId: s.sessionId, runId: s.runId, ...(s.parentRunId ? { parentRunId: s.parentRunId } : {}), ts: Date.now(), data };
}

/**
 * Publishes a stored event of the run; call it only inside a step, so a replay that reuses
 * the step's result does not repeat it. `stepKey` (the step's `info.key`): a step that runs
 * again (a crash before its result was recorded, or an unrecorded step) publishes the event
 * under the same message id, and the stream keeps one.
 */
export function publish(s: RunScope, type: string, data: unknown, stepKey?: string): Promise<void> {
  return s.runtime.publish(runEvent(s, type, data), true, stepKey === undefined ? undefined : `${stepKey}.${type}`);
}

/** `run_started`, from inside the step that starts the run (`run:start`, the first model call's, or `run:end`). */
export function publishStarted(s: RunScope, stepKey?: string): Promise<void> {
  return publish(s, "run_started", { agentId: s.agentId, input: s.request.input, kind: s.request.kind }, stepKey);
}

/** Publishes a live-only event (tokens, model_request): never fails the run. */
export function stream(s: RunScope, type: string, data: unknown): void {
  // Through the actor's context, which publishes nothing once this node cannot prove it
  // holds the agent's lease: a model call that outlived a takeover streams no more tokens.
  s.ctx.stream(type, data, { sessionId: s.sessionId, runId: s.runId, ...(s.parentRunId ? { parentRunId: s.parentRunId } : {}) });
}

export function hookContext(s: RunScope): HookContext {
  return {
    agentId: s.agentId,
    runId: s.runId,
    sessionId: s.sessionId,
    ...(s.parentRunId ? { parentRunId: s.parentRunId } : {}),
    messages: structuredClone(s.history),
  };
}
