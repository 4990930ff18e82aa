import type { KovaEvent } from "../bus/index.js";

/**
 * The events of an agent run, on `kova.<c>.events.<sessionId>.<runId>` (docs/protocol.md):
 * the one list of their names, for the agent loop, its callers (swarm coordinators,
 * agents as tools, workflows) and the CLI. `model_delta` and `model_request` are plain NATS
 * publishes, not awaited (high rate); every other type waits for the EVENTS stream's ack.
 * The stream captures all of them.
 */
export const RunEventType = {
  started: "run_started",
  modelRequest: "model_request",
  modelDelta: "model_delta",
  modelResponse: "model_response",
  toolCall: "tool_call",
  toolResult: "tool_result",
  childLinked: "child_run_linked",
  approvalRequested: "approval_requested",
  approvalGranted: "approval_granted",
  approvalRejected: "approval_rejected",
  budgetWait: "budget_wait",
  /** The model call waits in the node's scheduler queue (all of the model's slots are taken). */
  scheduleBlocked: "schedule_blocked",
  /** The provider answered 429; the call is retried after the wait it asked for. */
  rateLimited: "rate_limited",
  completed: "run_completed",
  failed: "run_failed",
  cancelled: "run_cancelled",
  streamEnd: "run_stream_end",
} as const;
/** One of the run event names (`"run_started"`, …). */
export type RunEventType = (typeof RunEventType)[keyof typeof RunEventType];
/** Every run event name, in the order a run can emit them. */
export const RunEventTypes: readonly RunEventType[] = Object.freeze(Object.values(RunEventType));

/** Who reads a stream of events, and so what they see. */
export const EventProfiles = ["chat", "debug", "metrics"] as const;
export type EventProfile = (typeof EventProfiles)[number];

const CHAT: ReadonlySet<string> = new Set([
  "run_started",
  "model_delta",
  "approval_requested",
  "approval_granted",
  "approval_rejected",
  "run_completed",
  "run_failed",
  "run_cancelled",
  "run_stream_end",
]);
const METRICS: ReadonlySet<string> = new Set([
  "model_response",
  "tool_result",
  "budget_wait",
  "schedule_blocked",
  "rate_limited",
  "run_completed",
  "run_failed",
  "run_cancelled",
]);

/**
 * Whether an event belongs in a profile: `chat` (the answer as it streams, and how the run
 * ended), `metrics` (usage: model calls, tool results, run totals), `debug` (everything,
 * cluster and actor events included).
 */
export function inProfile(event: Pick<KovaEvent, "type">, profile: EventProfile): boolean {
  if (profile === "debug") return true;
  return (profile === "chat" ? CHAT : METRICS).has(event.type);
}

/** Text fields `metrics` keeps: names and codes, never a prompt, an answer or arguments. */
const METRIC_NAMES = ["agentId", "model", "tool", "status", "budget", "finishReason", "policy", "statsClass", "purpose"];
/** Objects `metrics` keeps: token counts and cost (the run's own, for a swarm's). */
const METRIC_USAGES = ["usage", "ownUsage"];

/**
 * What an event shows to a profile: `metrics` keeps only numbers and names (no prompt or
 * answer text), the others the whole event. Every number and flag is kept, whatever its
 * key, so a metric an event gains later (a model call's `costUsd` beside its `usage`, a
 * queue length) is not dropped by a list that forgot it.
 */
export function forProfile(event: KovaEvent, profile: EventProfile): KovaEvent {
  if (profile !== "metrics") return event;
  const d = (event.data ?? {}) as Record<string, unknown>;
  const keep: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(d)) if ((typeof v === "number" && Number.isFinite(v)) || typeof v === "boolean") keep[k] = v;
  for (const k of METRIC_NAMES) if (typeof d[k] === "string") keep[k] = d[k];
  for (const k of METRIC_USAGES) if (d[k] !== undefined) keep[k] = d[k];
  if (d.error !== undefined) keep.error = { code: (d.error as { code?: unknown }).code };
  return { ...event, data: keep };
}

export function isEventProfile(value: unknown): value is EventProfile {
  return typeof value === "string" && (EventProfiles as readonly string[]).includes(value);
}
