import { derivedId, toWire } from "../core/index.js";
import type { TurnFailure } from "../actors/index.js";
import { parseRunRequest } from "./run-protocol.js";
import { runEvent } from "./run-scope.js";
import type { AgentRuntime } from "./runtime.js";

/**
 * Ends the run of an agent turn that failed without the run ending itself: the node died
 * during every attempt (the actor layer ends the turn Failed and never runs the loop again),
 * or the loop threw something that is not a run failure (a defect) on its last attempt. A
 * run that ended in the loop published its end in `run:end` and returned, so it never comes
 * here. Publishes `run_failed` (the turn's error, public code and message) and
 * `run_stream_end`, under ids derived from the agent and the message: a repeat (a crash
 * before the turn's commit) is stored once. A message that is not a run, or a run whose id
 * was drawn inside the turn (no `runId` in its payload), has no run a follower could name:
 * nothing is published.
 */
export async function endFailedRun(runtime: AgentRuntime, failure: TurnFailure): Promise<void> {
  const { env, actorId } = failure;
  let runId: string | undefined;
  let sessionId: string | undefined;
  let parentRunId: string | undefined;
  try {
    const request = parseRunRequest(env.type, env.payload, Date.now());
    runId = request.runId;
    sessionId = request.sessionId ?? runId;
    parentRunId = request.parentRunId;
  } catch {
    return;
  }
  if (runId === undefined || sessionId === undefined) return;
  const scope = { runId, sessionId, ...(parentRunId ? { parentRunId } : {}) };
  const { code, message } = toWire(failure.error);
  const error = { code, message };
  runtime.log.info({ agentId: actorId, runId, code: error.code, cause: failure.cause }, "run failed with its turn");
  const id = (type: string) => derivedId("uuid", actorId, env.id, `turn-failed:${type}`);
  await runtime.publish(runEvent(scope, "run_failed", { agentId: actorId, error }), true, id("run_failed"));
  await runtime.publish(runEvent(scope, "run_stream_end", { status: "failed" }), true, id("run_stream_end"));
}
