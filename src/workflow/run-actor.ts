import { ErrorCode, isKovaError, KovaError, toWire, type WireError, isValidId } from "../core/index.js";
import { BusErrorCode } from "../bus/index.js";
import { defineActor, type ActorContext, type ActorDefinition } from "../actors/index.js";
import { checkInput, parseWorkflow } from "./definition.js";
import { emptyRunState, readRunState, RunEngine, stepMetadata, type Effect, type RunState } from "./engine.js";
import { parseSignal, WORKFLOW_ACTOR_TYPE, WorkflowMessageType } from "./protocol.js";
import type { WorkflowTimers } from "./timers.js";
import type { SubjectWaits } from "./subject-waits.js";
import type { InterruptDelegation, RunUsage } from "../agents/index.js";

/**
 * A workflow run is an actor (one per run, id = run id, type `workflow`). Every message
 * it gets — its start, each agent's `result_notify`, signals, timers, a cancel — is one
 * turn: the engine applies it to the run's state and starts what became ready, and the
 * turn performs the engine's effects as journaled steps (`ctx.send` with the engine's
 * deterministic message ids, `ctx.emit`, timer writes). The state, with every finished
 * step's output, is the actor's checkpoint: a node killed at any point resumes the turn
 * from its WAL, or a peer resumes it from the last checkpoint and the turn's step journal
 * on NATS, and in both cases a re-sent task_delegate carries the id of the first try, so
 * no agent runs a step twice and no finished step is started again.
 */
export interface WorkflowActorPorts {
  /** The cluster's timer bucket (the node opens it once). */
  timers: () => Promise<WorkflowTimers>;
  /** Takes a finished run off placement (the node marks it killed and frees its consumer). */
  retire?: (runId: string) => Promise<void>;
  /** The run's own A2A inbox subject (`kova.<c>.a2a.<runId>`): agents send their result_notify there. */
  inbox: (runId: string) => string;
  /** The cluster's subject waits (the node opens them once); needed by runs that wait on a subject. */
  waits?: () => Promise<SubjectWaits>;
  /** Interrupts the agent turns a cancelled run still waits for (they end `cancelled`). */
  interrupt?: InterruptDelegation;
}

/** What `kova workflow status` shows (the run's rpc `info_request` answer). */
export interface RunSummary {
  runId: string;
  workflowId: string | null;
  sessionId: string;
  parentRunId?: string;
  status: RunState["status"];
  createdAt: number;
  endedAt?: number;
  input: Record<string, unknown>;
  output?: unknown;
  error?: WireError;
  usage: RunUsage;
  steps: Array<{
    key: string;
    id: string;
    type: string;
    status: string;
    attempts: number;
    agent?: string;
    durationMs?: number;
    /** What a settled step produced (null for a skipped one), as later steps' templates read it. */
    output?: unknown;
    error?: WireError;
    childRunId?: string;
  }>;
  /** Approval waits open now: `kova approve <runId> <approvalId>`. */
  approvals: Array<{ approvalId: string; stepId: string }>;
  /** Event waits open now: `kova workflow signal <runId> <event>`. */
  events: string[];
  /** Subject waits open now: a message published on the subject ends the wait. */
  subjects: Array<{ stepId: string; subject: string }>;
}

/** @throws UnsupportedFormatError for the state of a run a newer Kova advanced (see readRunState) */
export function runSummary(s: RunState): RunSummary {
  readRunState(s.runId, s);
  const steps = Object.values(s.steps).map((r) => {
    const m = stepMetadata(r);
    return {
      key: r.key,
      id: r.id,
      type: r.type,
      status: r.status,
      attempts: r.attempt,
      ...(r.agent ? { agent: r.agent } : {}),
      ...(typeof m.durationMs === "number" ? { durationMs: m.durationMs } : {}),
      // Inline: the summary is built from the run's checkpoint state, which holds every output already.
      ...(r.status === "completed" || r.status === "skipped" ? { output: r.output ?? null } : {}),
      ...(r.error && r.status !== "completed" ? { error: r.error } : {}),
      ...(r.childRunId ? { childRunId: r.childRunId } : {}),
    };
  });
  const open = Object.values(s.steps).filter((r) => r.waiting && r.status === "running");
  return {
    runId: s.runId,
    workflowId: s.workflow?.id ?? null,
    sessionId: s.sessionId,
    ...(s.parentRunId ? { parentRunId: s.parentRunId } : {}),
    status: s.status,
    createdAt: s.createdAt,
    ...(s.endedAt === undefined ? {} : { endedAt: s.endedAt }),
    input: s.input,
    ...(s.output === undefined ? {} : { output: s.output }),
    ...(s.error ? { error: s.error } : {}),
    usage: s.usage,
    steps,
    approvals: open.filter((r) => r.approvalId).map((r) => ({ approvalId: r.approvalId!, stepId: r.id })),
    events: open.flatMap((r) => {
      const e = findEvent(s, r.id);
      return e ? [e] : [];
    }),
    subjects: open.flatMap((r) => (r.subject ? [{ stepId: r.id, subject: r.subject }] : [])),
  };
}

function findEvent(s: RunState, stepId: string): string | undefined {
  const stack = [...(s.workflow?.steps ?? [])];
  while (stack.length > 0) {
    const d = stack.pop()!;
    if (d.id === stepId) return d.type === "wait" && d.for === "event" ? d.event : undefined;
    if (d.type === "parallel") stack.push(...d.branches);
    if (d.type === "branch") stack.push(...d.whenTrue, ...d.whenFalse);
    if (d.type === "loop") stack.push(...d.steps);
    if (d.onError?.strategy === "fallback") stack.push(d.onError.step);
  }
  return undefined;
}

type Ctx = ActorContext<RunState>;

/**
 * Performs the engine's effects in order, including those that a failed delegation adds
 * while they are performed (its step retries, is skipped or fails the run).
 */
async function perform(ctx: Ctx, engine: RunEngine, ports: WorkflowActorPorts): Promise<void> {
  const s = ctx.state;
  const where = { sessionId: s.sessionId, runId: s.runId, ...(s.parentRunId ? { parentRunId: s.parentRunId } : {}) };
  for (let e = engine.effects.shift(); e !== undefined; e = engine.effects.shift()) {
    switch (e.kind) {
      case "send":
        await delegate(ctx, engine, e, ports);
        break;
      case "event":
        await ctx.emit(e.type, { ...e.data, workflowRunId: s.runId }, where);
        break;
      case "timer": {
        const timers = await ports.timers();
        await ctx.step(`timer:${e.timerId}`, () => timers.set({ runId: s.runId, timerId: e.timerId, due: e.due }), { idempotent: true });
        break;
      }
      case "clear_timers": {
        const timers = await ports.timers();
        await ctx.step("timers:clear", () => timers.clear(s.runId), { idempotent: true });
        break;
      }
      case "subject_wait": {
        const waits = await subjectWaits(ports);
        await ctx.step(`wait:${e.waitId}`, () => waits.begin({ runId: s.runId, waitId: e.waitId, subject: e.subject }), { idempotent: true });
        break;
      }
      case "end_subject_wait": {
        const waits = await subjectWaits(ports);
        await ctx.step(`wait-end:${e.waitId}`, () => waits.end({ runId: s.runId, waitId: e.waitId, subject: e.subject }), { idempotent: true });
        break;
      }
      case "clear_subject_waits": {
        const waits = await subjectWaits(ports);
        await ctx.step("waits:clear", () => waits.clear(s.runId), { idempotent: true });
        break;
      }
      case "interrupt":
        if (ports.interrupt) await ctx.step(`interrupt:${e.messageId}`, () => ports.interrupt!(e.agent, e.messageId), { idempotent: true });
        break;
      case "retire":
        if (ports.retire) await ctx.step("retire", () => ports.retire!(s.runId), { idempotent: true });
        break;
    }
  }
}

/**
 * Sends one step's task_delegate. An agent nobody declared would never answer, and the
 * step would wait forever: the send fails with UNKNOWN_AGENT instead (checked inside the
 * send's journaled step, so a replay sees the same answer), and that failure settles the
 * step at once as an agent's failed result would, so its on_error strategy applies.
 */
async function delegate(ctx: Ctx, engine: RunEngine, e: Extract<Effect, { kind: "send" }>, ports: WorkflowActorPorts): Promise<void> {
  try {
    // The agent's result_notify goes to this run's inbox, which the A2A stream captures.
    await ctx.send(
      { id: e.id, to: e.to, type: "task_delegate", payload: e.payload, correlationId: e.id, replyTo: ports.inbox(ctx.state.runId) },
      { requireKnownAgent: true },
    );
  } catch (err) {
    if (!isKovaError(err, BusErrorCode.UNKNOWN_AGENT)) throw err;
    engine.result(e.id, null, toWire(err));
    engine.advance();
  }
}

function subjectWaits(ports: WorkflowActorPorts): Promise<SubjectWaits> {
  if (!ports.waits)
    throw new KovaError(ErrorCode.INTERNAL, "this node cannot capture subjects for workflow waits (the workflow actor was registered without a waits port)");
  return ports.waits();
}

function field(payload: unknown, name: string): unknown {
  return typeof payload === "object" && payload !== null ? (payload as Record<string, unknown>)[name] : undefined;
}

/**
 * The `workflow` actor type. Register it on every node that may host runs (a KovaNode
 * does so by itself).
 */
export function workflowActor(ports: WorkflowActorPorts): ActorDefinition<RunState> {
  const turn = async (ctx: Ctx, apply: (engine: RunEngine) => unknown): Promise<unknown> => {
    if (!ctx.state.runId) ctx.state.runId = ctx.actorId;
    const engine = new RunEngine(ctx.state, ctx.now());
    const outcome = apply(engine);
    engine.advance();
    await perform(ctx, engine, ports);
    return { ...(outcome === undefined ? {} : { outcome }), run: runSummary(ctx.state) };
  };

  const start = (ctx: Ctx, engine: RunEngine): unknown => {
    const p = ctx.message.payload;
    const sessionId = field(p, "sessionId");
    const parentRunId = field(p, "parentRunId");
    const where = {
      sessionId: isValidId(sessionId) ? sessionId : ctx.actorId,
      ...(isValidId(parentRunId) ? { parentRunId } : {}),
    };
    const rawWorkflow = field(p, "workflow");
    const workflowId = field(field(rawWorkflow, "workflow"), "id");
    try {
      const workflow = parseWorkflow(rawWorkflow, "workflow.start payload");
      const input = checkInput(workflow, field(p, "input"));
      return engine.start({ workflow, input, ...where }) ? "started" : "already started";
    } catch (err) {
      // A bad definition or input fails the run visibly (events, status); it is not a
      // handler failure to retry.
      return engine.reject({ ...where, ...(typeof workflowId === "string" ? { workflowId } : {}) }, toWire(err)) ? "rejected" : "already started";
    }
  };

  return defineActor<RunState>({
    type: WORKFLOW_ACTOR_TYPE,
    capabilities: ["workflow"],
    initialState: () => emptyRunState(""),
    handlers: {
      [WorkflowMessageType.start]: (ctx) => turn(ctx, (e) => start(ctx, e)),
      result_notify: (ctx) => turn(ctx, (e) => (e.result(ctx.message.correlationId, ctx.message.payload, ctx.message.error) ? "accepted" : "ignored")),
      [WorkflowMessageType.timer]: (ctx) =>
        turn(ctx, (e) => {
          const id = field(ctx.message.payload, "timerId");
          return typeof id === "string" && e.fired(id) ? "fired" : "ignored";
        }),
      [WorkflowMessageType.signal]: (ctx) =>
        turn(ctx, (e) => {
          try {
            return e.signal(parseSignal(ctx.message.payload), ctx.message.from);
          } catch (err) {
            // Bad input must not fail the run's actor: the sender hears why.
            return { ignored: toWire(err) };
          }
        }),
      [WorkflowMessageType.cancel]: (ctx) =>
        turn(ctx, (e) => {
          const reason = field(ctx.message.payload, "reason");
          return e.cancel(typeof reason === "string" ? reason : undefined, ctx.message.from) ? "cancelled" : "not running";
        }),
    },
    rpc: { info_request: (_env, state) => runSummary(state as RunState) },
  });
}
