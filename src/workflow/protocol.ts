import { isValidId, ArgumentError } from "../core/index.js";
import { randomBytes } from "node:crypto";
import { registerMessageTypes } from "../bus/index.js";
import type { SignalPayload } from "./engine.js";

/**
 * The workflow protocol on the A2A bus. A run is an actor whose id is the run id; these
 * namespaced types go to its inbox `kova.<c>.a2a.<runId>` (docs/protocol.md):
 *
 * | type | payload | sent by |
 * | --- | --- | --- |
 * | `workflow.start` | `{ workflow, input, sessionId?, parentRunId? }` (workflow as written in the file) | `kova workflow run`, an application |
 * | `workflow.signal` | `{ approvalId, approved, by?, comment? }` or `{ event, data? }`, or `{ waitId, subject, data, seq }` | `kova approve/reject`, `kova workflow signal`, any service; the node that read a waited subject's message |
 * | `workflow.cancel` | `{ reason?, by? }` | `kova workflow cancel` |
 * | `workflow.timer` | `{ timerId }` | the nodes' timer services |
 *
 * Agents answer the run's `task_delegate`s with `result_notify` to its `replyTo`, the
 * run's own inbox (the A2A stream captures it, so the reply waits there for the run).
 */
export const WorkflowMessageType = {
  start: "workflow.start",
  signal: "workflow.signal",
  cancel: "workflow.cancel",
  timer: "workflow.timer",
} as const;

registerMessageTypes("workflow", ...Object.values(WorkflowMessageType));

/** The actor type of workflow runs. */
export const WORKFLOW_ACTOR_TYPE = "workflow";
/** Longest run id: `<runId>-t<n>r` must stay within the 128-character id limit. */
export const MAX_RUN_ID = 96;

/** A new run id: `wf-` and 20 hex digits. */
export function newRunId(): string {
  return `wf-${randomBytes(10).toString("hex")}`;
}

/**
 * The id of a run's `workflow.start` for a sender that waits for no answer (the scheduler):
 * one per run, so a start sent again is stored once. A sender that asks gives each start an
 * id of its own (a duplicate is dropped unanswered, its asker would wait for nothing).
 */
export function startMessageId(runId: string): string {
  return `${runId}-start`;
}

/** @throws ArgumentError for an id that cannot be a run id */
export function assertRunId(value: unknown): string {
  if (!isValidId(value) || value.length > MAX_RUN_ID) {
    throw new ArgumentError("runId", `must be 1-${MAX_RUN_ID} characters of [A-Za-z0-9_-], not ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Checks a `workflow.signal` payload.
 * @throws ArgumentError naming the field
 */
export function parseSignal(p: unknown): SignalPayload {
  const v = (typeof p === "object" && p !== null ? p : {}) as Record<string, unknown>;
  const opt = (k: string) => {
    if (v[k] === undefined || v[k] === null) return {};
    if (typeof v[k] !== "string") throw new ArgumentError(k, "must be a string");
    return { [k]: v[k] as string };
  };
  if (v.approvalId !== undefined) {
    if (typeof v.approvalId !== "string" || v.approvalId.length === 0)
      throw new ArgumentError("approvalId", "must be the approval id named by approval_requested");
    if (typeof v.approved !== "boolean") throw new ArgumentError("approved", "must be true (approve) or false (reject)");
    return { approvalId: v.approvalId, approved: v.approved, ...opt("by"), ...opt("comment") };
  }
  if (v.waitId !== undefined) {
    if (!isValidId(v.waitId)) throw new ArgumentError("waitId", "must be the id of a subject wait");
    if (typeof v.subject !== "string") throw new ArgumentError("subject", "must be the subject the message came on");
    return { waitId: v.waitId, subject: v.subject, ...(v.data === undefined ? {} : { data: v.data }), ...(typeof v.seq === "number" ? { seq: v.seq } : {}) };
  }
  if (typeof v.event === "string" && isValidId(v.event)) return { event: v.event, ...(v.data === undefined ? {} : { data: v.data }) };
  throw new ArgumentError("payload", "a workflow.signal is { approvalId, approved, by?, comment? } or { event, data? } (event a name of [A-Za-z0-9_-])");
}
