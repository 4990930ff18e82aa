import type { ActorContext } from "../actors/index.js";
import { RunLimitExceededError } from "./errors.js";

// setTimeout fires at once for delays past 2^31-1 ms; a far deadline is re-armed instead.
const MAX_TIMER_MS = 2_147_483_647;

/**
 * The run's time budget (`run.time_budget_ms`) and the task's deadline as one signal, and
 * the context the run's steps see.
 */
export interface RunLimit<S> {
  /** Aborts at the earlier of startedAt + time_budget_ms and the deadline, with a RunLimitExceededError. */
  readonly signal: AbortSignal;
  /**
   * The turn's context whose `signal` also aborts at the limit: model calls, tool calls,
   * approval and rate-limit waits all take `ctx.signal`, so they stop in flight instead of
   * holding the agent past its time (a tool that ignores the signal is abandoned by
   * runTool). Everything else is the turn's own context.
   */
  readonly ctx: ActorContext<S>;
  /** The limit's error once it fired, else undefined. */
  readonly exceeded: RunLimitExceededError | undefined;
  /** Stops the timer; call when the run ends. */
  dispose(): void;
}

// The turn's own context behind each limited view, for waits that end at the limit by themselves.
const turnContexts = new WeakMap<object, ActorContext<unknown>>();

/**
 * The turn's context without the run's time limit on its signal. For a wait that already
 * ends at the limit by its own rule and records how it ended (an approval expires at the
 * deadline or time budget and is recorded as timed out): the limit's abort would race it
 * and leave the approval pending. Interrupts, kills and a lost lease still abort it.
 */
export function withoutRunLimit<S>(ctx: ActorContext<S>): ActorContext<S> {
  return (turnContexts.get(ctx) as ActorContext<S> | undefined) ?? ctx;
}

/**
 * Arms the run's time limit. The start is the journaled clock reading, so a turn replayed
 * after a crash past its limit stops at once, as it would have.
 */
export function armRunLimit<S>(ctx: ActorContext<S>, run: { agentId: string; startedAt: number; timeBudgetMs?: number; deadline?: number }): RunLimit<S> {
  const budgetAt = run.timeBudgetMs === undefined ? Number.POSITIVE_INFINITY : run.startedAt + run.timeBudgetMs;
  const deadlineAt = run.deadline ?? Number.POSITIVE_INFINITY;
  const limitAt = Math.min(budgetAt, deadlineAt);
  const limiter = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const fire = (): void => {
    const error =
      budgetAt <= deadlineAt
        ? new RunLimitExceededError(
            "time_budget_ms",
            run.timeBudgetMs ?? 0,
            `the run was stopped after ${Date.now() - run.startedAt} ms, with a model or tool call still in flight; raise run.time_budget_ms of agent ${run.agentId} or give it a narrower task`,
          )
        : new RunLimitExceededError(
            "deadline",
            deadlineAt,
            `the task's deadline ${new Date(deadlineAt).toISOString()} passed with a model or tool call still in flight; give the task a later deadline`,
          );
    limiter.abort(error);
  };
  const arm = (): void => {
    const delay = limitAt - Date.now();
    if (delay <= 0) {
      fire();
      return;
    }
    timer = setTimeout(delay > MAX_TIMER_MS ? arm : fire, Math.min(delay, MAX_TIMER_MS));
    // A run's limit never keeps a node's process alive on its own.
    timer.unref();
  };
  if (Number.isFinite(limitAt)) arm();

  const signal = limiter.signal;
  // By hand rather than AbortSignal.any, which Node 20 has only from 20.3 (engines: >= 20).
  const both = new AbortController();
  const onTurn = (): void => both.abort(ctx.signal.reason);
  const onLimit = (): void => both.abort(signal.reason);
  if (ctx.signal.aborted) onTurn();
  else ctx.signal.addEventListener("abort", onTurn, { once: true });
  signal.addEventListener("abort", onLimit, { once: true });
  const combined = Number.isFinite(limitAt) ? both.signal : ctx.signal;
  // A view of the turn's context, not a copy: getters (replaying) and state stay live.
  const limited = new Proxy(ctx, {
    get: (target, prop) => (prop === "signal" ? combined : Reflect.get(target, prop)),
  });
  turnContexts.set(limited, ctx as ActorContext<unknown>);
  return {
    signal,
    ctx: limited,
    get exceeded() {
      return signal.aborted ? (signal.reason as RunLimitExceededError) : undefined;
    },
    dispose: () => {
      clearTimeout(timer);
      ctx.signal.removeEventListener("abort", onTurn);
    },
  };
}
