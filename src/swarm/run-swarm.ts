import { assertId, derivedId } from "../core/index.js";
import { createEnvelope, type Bus, type KovaClient, type KovaEvent } from "../bus/index.js";
import { DelegatedRunTimeoutError, msUntilDeadline, RunWatcher, type RunOutcome, type TaskConstraints } from "../agents/index.js";
import { DEFAULT_SWARM_DEADLINE_MS, type SwarmRequest, type SwarmResult } from "./coordinator.js";
import { SwarmRunFailedError } from "./errors.js";
import type { StaticSubtask } from "./plan.js";

export interface RunSwarmOptions {
  /** The session the run tree goes on (default: the run id). */
  sessionId?: string;
  /** The run id (default: derived from `requestId`, or a new one). */
  runId?: string;
  /** The request's message id: the same id re-sent is the same swarm (default: a new one). */
  requestId?: string;
  constraints?: TaskConstraints;
  /** A static plan instead of the coordinator's model. */
  plan?: StaticSubtask[];
  /** Sender id (default: the bus's client id). */
  from?: string;
  /** Every event of the session while the swarm runs (the run tree growing), from the start. */
  onEvent?: (event: KovaEvent) => void;
  /** How long to wait past the swarm's deadline for its answer (default 60 s). */
  graceMs?: number;
  signal?: AbortSignal;
}

/**
 * Runs a swarm and waits for its answer: sends a `task_delegate` to the coordinator (a
 * durable send: the request survives the coordinator's node dying), follows the session's
 * events (passing each to `onEvent`), and resolves with the coordinator's result, read
 * from its `result_notify` or, if that reply is lost (the coordinator was taken over by
 * another node), from its `run_completed` event.
 * @throws UnknownAgentError (before anything is sent) when no agent `coordinator` is declared;
 *   SwarmRunFailedError when the run ends failed or cancelled; DelegatedRunTimeoutError
 *   when no answer came by the deadline plus `graceMs`; InvalidIdError / ArgumentError for bad input
 */
export async function runSwarm(via: Bus | KovaClient, coordinator: string, task: string, opts: RunSwarmOptions = {}): Promise<SwarmResult> {
  const bus = "bus" in via ? via.bus : via;
  assertId("coordinator id", coordinator);
  const requestId = opts.requestId ?? derivedId({ prefix: "swarmreq" }, coordinator, task, String(Date.now()), String(Math.random()));
  const runId = opts.runId ?? derivedId({ prefix: "swarm" }, requestId);
  const sessionId = opts.sessionId ?? runId;
  const deadlineMs = opts.constraints?.deadline === undefined ? DEFAULT_SWARM_DEADLINE_MS : msUntilDeadline(opts.constraints.deadline, Date.now());
  // A coordinator nobody declared would leave the request in the stream and the caller
  // waiting out the whole deadline: fail now, as `ask` does.
  await bus.checkAgent(coordinator);
  const until = Date.now() + deadlineMs + (opts.graceMs ?? 60_000);
  await using watcher = await RunWatcher.start(bus, { sessionId, since: Date.now() - 60_000 });
  const events = opts.onEvent ? bus.subscribeEvents({ sessionId }) : undefined;
  const following = events
    ? (async () => {
        for await (const e of events) opts.onEvent!(e);
      })()
    : undefined;
  try {
    watcher.expect(requestId, runId);
    const payload: SwarmRequest = { input: task, sessionId, runId };
    if (opts.constraints) payload.constraints = opts.constraints;
    if (opts.plan) payload.plan = opts.plan;
    await bus.nc.flush();
    await bus.send(
      createEnvelope({
        id: requestId,
        from: opts.from ?? bus.clientId,
        to: coordinator,
        type: "task_delegate",
        payload,
        replyTo: watcher.replyTo,
        correlationId: requestId,
      }),
    );
    const got = (await watcher.wait([runId], { until, ...(opts.signal ? { signal: opts.signal } : {}) })).get(runId);
    if (!got) throw new DelegatedRunTimeoutError(coordinator, runId, deadlineMs + (opts.graceMs ?? 60_000));
    if (got.status !== "completed") throw new SwarmRunFailedError(runId, got.status, got.error);
    return toResult(got, sessionId);
  } finally {
    events?.stop();
    await following;
  }
}

function toResult(o: RunOutcome, sessionId: string): SwarmResult {
  const missing = Array.isArray(o.detail.missing) ? (o.detail.missing as SwarmResult["missing"]) : [];
  const subtasks = typeof o.detail.subtasks === "number" ? o.detail.subtasks : 0;
  return { output: o.output, usage: o.usage, runId: o.runId, sessionId, status: o.status, subtasks, missing };
}
