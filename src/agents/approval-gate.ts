import { createHash } from "node:crypto";
import { parseToolPattern, type ToolPattern, type Tool } from "../tools/index.js";
import { ApprovalErrorCode, type ApprovalRecord } from "./approvals.js";
import type { AgentDefinition } from "./definition.js";
import { RunEventType } from "./events.js";
import type { ToolCall } from "./model/types.js";
import { publish, type RunScope } from "./run-scope.js";

/** A validated call about to run. */
export interface GatedCall {
  call: ToolCall;
  tool: Tool;
  args: unknown;
}

/** What the approval step recorded for one call. */
interface Asked {
  callId: string;
  approvalId: string;
}

const patterns = new WeakMap<AgentDefinition, ToolPattern[]>();

/** Whether a call of this tool waits for a human: the tool says so, or the agent's `approval` list names it. */
export function needsApproval(def: AgentDefinition, tool: Tool): boolean {
  if (tool.requiresApproval === true) return true;
  let list = patterns.get(def);
  if (!list) {
    list = def.approval.tools.map((t) => parseToolPattern(t)).filter((p): p is ToolPattern => p !== undefined);
    patterns.set(def, list);
  }
  return list.some((p) => p.matches(tool.name));
}

/**
 * Holds the calls of one model response that need approval until a human decides each
 * (docs/tools.md, "Approval"), as two journaled steps, in the same order on every replay:
 *
 * 1. `approval:request`: fixes each approval's id (from the step's key, so a turn redone
 *    from its message asks under the same ids) and deadline (the approval timeout, cut to
 *    the task's deadline and the run's time budget), writes the pending records to KV and
 *    publishes `approval_requested`. Its result is recorded: a replay keeps the
 *    deadline, and a re-run after a crash inside it finds the records already written
 *    and keeps their deadlines.
 * 2. `approval:wait`: waits for every decision (watching the keys). A replay after a
 *    crash, here or on the node that took the agent over, enters the wait again and finds
 *    a decision given meanwhile already in the bucket.
 *
 * While it waits the run holds no model slot (only provider calls take one) and the
 * mailbox keeps the turn's message in progress. Calls of the same response that need no
 * approval wait too: the response's calls run together once all are decided.
 * @returns the decision of each call that needed one, by call id
 */
export async function awaitApprovals(s: RunScope, calls: readonly GatedCall[]): Promise<Map<string, ApprovalRecord>> {
  const gated = calls.filter((c) => needsApproval(s.def, c.tool));
  if (gated.length === 0) return new Map();
  // Set before the request is published: whoever reads the event then sees the state.
  s.runtime.awaitingApproval(s.agentId, true);
  try {
    return await requestAndWait(s, gated);
  } finally {
    s.runtime.awaitingApproval(s.agentId, false);
  }
}

async function requestAndWait(s: RunScope, gated: readonly GatedCall[]): Promise<Map<string, ApprovalRecord>> {
  const asked = await s.ctx.step(
    "approval:request",
    async (info): Promise<Asked[]> => {
      const store = await s.runtime.approvals();
      const now = Date.now();
      // Never past what the run may take anyway: its task's deadline, its time budget.
      const budgetEnd = s.def.run.timeBudgetMs !== undefined ? s.startedAt + s.def.run.timeBudgetMs : Number.POSITIVE_INFINITY;
      const expiresAt = Math.min(now + s.def.approval.timeoutMs, s.request.deadline ?? Number.POSITIVE_INFINITY, budgetEnd);
      const out: Asked[] = [];
      for (const [i, c] of gated.entries()) {
        const approvalId = approvalIdOf(info.key, i);
        const rec = await store.request({
          v: 1,
          runId: s.runId,
          approvalId,
          sessionId: s.sessionId,
          agentId: s.agentId,
          callId: c.call.id,
          tool: c.tool.name,
          args: c.args,
          requestedAt: now,
          expiresAt,
          status: "pending",
        });
        await publish(
          s,
          RunEventType.approvalRequested,
          { agentId: s.agentId, approvalId, callId: c.call.id, tool: c.tool.name, args: c.args, expiresAt: rec.expiresAt },
          approvalId,
        );
        out.push({ callId: c.call.id, approvalId });
      }
      return out;
    },
    { idempotent: true },
  );
  const decided = await s.ctx.step(
    "approval:wait",
    async (): Promise<ApprovalRecord[]> => {
      const store = await s.runtime.approvals();
      // One failed wait (its key gone, NATS trouble) ends the others too: the step fails whole.
      const stop = new AbortController();
      const forward = () => stop.abort(s.ctx.signal.reason);
      s.ctx.signal.addEventListener("abort", forward, { once: true });
      if (s.ctx.signal.aborted) forward();
      return Promise.all(
        asked.map(async (a) => {
          const rec = await store.waitForDecision(s.runId, a.approvalId, stop.signal).catch((err: unknown) => {
            stop.abort(err);
            throw err;
          });
          await publish(
            s,
            rec.status === "approved" ? RunEventType.approvalGranted : RunEventType.approvalRejected,
            {
              agentId: s.agentId,
              approvalId: a.approvalId,
              callId: a.callId,
              tool: rec.tool,
              ...(rec.by !== undefined ? { by: rec.by } : {}),
              ...(rec.comment !== undefined ? { comment: rec.comment } : {}),
              ...(rec.timedOut ? { timedOut: true } : {}),
            },
            a.approvalId,
          );
          return rec;
        }),
      ).finally(() => s.ctx.signal.removeEventListener("abort", forward));
    },
    { idempotent: true },
  );
  return new Map(decided.map((r) => [r.callId, r]));
}

/**
 * The tool result a rejected call gets: what happened and what not to do, so the model can
 * go on without the call (or ask the user).
 */
export function rejectionError(rec: ApprovalRecord): { code: string; message: string; retryable: boolean; data: Record<string, unknown> } {
  const data = { approvalId: rec.approvalId, ...(rec.by !== undefined ? { by: rec.by } : {}), ...(rec.comment !== undefined ? { comment: rec.comment } : {}) };
  if (rec.timedOut) {
    return {
      code: ApprovalErrorCode.TOOL_APPROVAL_TIMEOUT,
      message: `the call of ${rec.tool} needed a human's approval and none came before ${new Date(rec.expiresAt).toISOString()}: it did not run. Go on without it, or tell the user it is waiting for approval.`,
      retryable: false,
      data,
    };
  }
  const who = rec.by ? ` by ${rec.by}` : "";
  const why = rec.comment ? ` (${JSON.stringify(rec.comment)})` : "";
  return {
    code: ApprovalErrorCode.TOOL_CALL_REJECTED,
    message: `the call of ${rec.tool} was rejected${who}${why}: it did not run. Do not call it again with the same arguments; go on without it or ask the user.`,
    retryable: false,
    data,
  };
}

/** `ap-` and 12 hex characters of the step key and position: short enough to type. */
function approvalIdOf(stepKey: string, position: number): string {
  return `ap-${createHash("sha256").update(`${stepKey}\u0000${position}`).digest("hex").slice(0, 12)}`;
}
