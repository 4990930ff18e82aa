import { toWire, type WireError } from "../core/index.js";
import { StepOutcomeUnknownError } from "../actors/index.js";
import { isIdempotentCall, checkToolCall, runTool, type Tool } from "../tools/index.js";
import { awaitApprovals, rejectionError } from "./approval-gate.js";
import { withoutRunLimit } from "./budget-time.js";
import { DEFAULT_MAX_TOOL_CALLS } from "./definition.js";
import { RunLimitExceededError } from "./errors.js";
import type { ToolCall, ToolMessage } from "./model/types.js";
import { publish, type RunScope } from "./run-scope.js";
import { tallyTool } from "./usage.js";

/** What a tool call's step records: the message for the model and what events report. */
export interface ToolCallRecord {
  content: string;
  ok: boolean;
  ms: number;
  error?: WireError;
}

type Planned = { call: ToolCall; kind: "run"; tool: Tool; args: unknown } | { call: ToolCall; kind: "refused"; content: string; error: WireError };

/**
 * Runs the tool calls of one model response and returns their messages in call order.
 * Arguments are validated first, in order and outside any step (validation is pure, so
 * the repair budget is rebuilt identically on replay); each valid call is then a step of
 * its own, idempotent or not as its tool declares, and the calls run concurrently unless
 * `run.parallel_tool_calls` is false.
 * @throws RunLimitExceededError past `max_tool_calls`; ToolArgumentsInvalidError when the repair budget is spent
 */
export async function runToolCalls(s: RunScope, calls: readonly ToolCall[]): Promise<ToolMessage[]> {
  const max = s.def.run.maxToolCalls ?? DEFAULT_MAX_TOOL_CALLS;
  if (s.tally.toolCalls + calls.length > max) {
    throw new RunLimitExceededError(
      "max_tool_calls",
      max,
      `the model asked for ${s.tally.toolCalls + calls.length} tool calls; raise run.max_tool_calls of agent ${s.agentId} or narrow its task`,
    );
  }
  const planned = calls.map((call) => plan(s, call));
  // An approval ends at the run's limit by its own expiry (recorded as timed out); the
  // limit's abort would race it and leave the approval pending.
  const decisions = await awaitApprovals(
    { ...s, ctx: withoutRunLimit(s.ctx) },
    planned.filter((p) => p.kind === "run"),
  );
  const exec = (p: Planned): Promise<ToolCallRecord> => {
    if (p.kind === "refused") return refuse(s, p.call, p.call.name, p.call.arguments, p.content, p.error);
    const decision = decisions.get(p.call.id);
    if (decision && decision.status !== "approved") {
      const error = rejectionError(decision);
      return refuse(
        s,
        p.call,
        p.tool.name,
        p.args,
        JSON.stringify({ error: { code: error.code, message: error.message, ...(error.data.comment !== undefined ? { comment: error.data.comment } : {}) } }),
        error,
      );
    }
    return runCall(s, p.call, p.tool, p.args);
  };
  let records: ToolCallRecord[];
  if (s.def.run.parallelToolCalls === false) {
    records = [];
    for (const p of planned) records.push(await exec(p));
  } else {
    records = await Promise.all(planned.map(exec));
  }
  return planned.map((p, i) => {
    tallyTool(s.tally, p.kind === "run" ? p.tool.name : p.call.name, records[i]!.ok, records[i]!.ms);
    return { role: "tool", toolCallId: p.call.id, content: records[i]!.content };
  });
}

function plan(s: RunScope, call: ToolCall): Planned {
  const tool = s.tools.byModelName(call.name);
  if (!tool) {
    const issues = [
      { path: "$", expected: `one of the offered tools (${s.tools.tools.map((t) => s.tools.modelName(t.name)).join(", ") || "none"})`, given: call.name },
    ];
    const verdict = s.repairs.onInvalid(call.name, issues, { unknownTool: true });
    if (verdict.action === "fail") throw verdict.error;
    const error = {
      code: "TOOL_UNKNOWN",
      message: `there is no tool ${JSON.stringify(call.name)}: call one of the offered tools`,
      retryable: false,
      data: { issues },
    };
    return { call, kind: "refused", content: JSON.stringify({ error }), error };
  }
  const check = checkToolCall(tool, call.arguments, s.repairs);
  if (check.status === "valid") return { call, kind: "run", tool, args: check.args };
  if (check.verdict.action === "fail") throw check.verdict.error;
  const error = { code: "TOOL_ARGUMENTS_INVALID", message: "invalid arguments", retryable: true, data: { issues: check.issues } };
  return { call, kind: "refused", content: check.content, error };
}

async function runCall(s: RunScope, call: ToolCall, tool: Tool, args: unknown): Promise<ToolCallRecord> {
  const idempotent = isIdempotentCall(tool, args);
  const budgetGroup = s.request.budgetGroup ?? s.def.budget.group;
  try {
    return await s.ctx.step(
      `tool:${call.id}`,
      async (info) => {
        // Under the step's key: a call run again (an idempotent one, after a crash) is stored once.
        await publish(s, "tool_call", { agentId: s.agentId, callId: call.id, tool: tool.name, args }, info.key);
        const started = performance.now();
        const outcome = await runTool(
          tool,
          args,
          {
            agentId: s.agentId,
            sessionId: s.sessionId,
            runId: s.runId,
            ...(s.parentRunId ? { parentRunId: s.parentRunId } : {}),
            callId: call.id,
            idempotencyKey: info.key,
            signal: s.ctx.signal,
            logger: s.runtime.log.child({ agentId: s.agentId, runId: s.runId, tool: tool.name }),
            ...(s.request.deadline !== undefined ? { deadline: s.request.deadline } : {}),
            ...(budgetGroup !== undefined ? { budgetGroup } : {}),
            ...(s.request.user !== undefined ? { user: s.request.user } : {}),
            ...(s.request.priority !== undefined ? { priority: s.request.priority } : {}),
          },
          s.runtime.maxResultBytes,
        );
        const rec: ToolCallRecord = {
          content: outcome.content,
          ok: outcome.status === "ok",
          ms: Math.round(performance.now() - started),
          ...(outcome.error ? { error: outcome.error } : {}),
        };
        // A cut call's outcome is not the tool's: the abort's reason is thrown instead. The
        // run's time limit fails the step (the run then ends on it); a stop, an interrupt or
        // a lost lease cuts the turn, and the journal records nothing for the step, so a
        // resumed turn runs the call again if it is idempotent, else hears outcome unknown.
        if (s.ctx.signal.aborted) throw s.ctx.signal.reason;
        await publish(
          s,
          "tool_result",
          {
            agentId: s.agentId,
            callId: call.id,
            tool: tool.name,
            ok: rec.ok,
            ms: rec.ms,
            ...(rec.error ? { error: { code: rec.error.code, message: rec.error.message } } : {}),
          },
          info.key,
        );
        return rec;
      },
      { idempotent },
    );
  } catch (err) {
    if (!(err instanceof StepOutcomeUnknownError)) throw err;
    // Started before a crash or a stop, no result recorded, not safe to run again: the model decides.
    const unknown = {
      code: "TOOL_OUTCOME_UNKNOWN",
      message: `the call of ${tool.name} started before a crash and its outcome is unknown: it may or may not have taken effect. Check before calling it again.`,
    };
    // Observers saw the call start; they hear how it ended too. Every replay of the turn
    // gives this answer again, so the event goes out under the step's own key (the form of
    // StepInfo.key) and the stream keeps it once.
    await publish(
      s,
      "tool_result",
      { agentId: s.agentId, callId: call.id, tool: tool.name, ok: false, ms: 0, error: unknown },
      `${s.agentId}.${s.ctx.message.id}.${err.index}`,
    );
    return { content: JSON.stringify({ error: unknown }), ok: false, ms: 0, error: toWire(err) };
  }
}

/** A call that does not run (unknown tool, invalid arguments, rejected by a human): its result is the error. */
function refuse(s: RunScope, call: ToolCall, tool: string, args: unknown, content: string, error: WireError): Promise<ToolCallRecord> {
  return s.ctx.step(
    `tool:${call.id}`,
    async ({ key }) => {
      await publish(s, "tool_call", { agentId: s.agentId, callId: call.id, tool, args }, key);
      await publish(s, "tool_result", { agentId: s.agentId, callId: call.id, tool, ok: false, error: { code: error.code, message: error.message } }, key);
      return { content, ok: false, ms: 0, error };
    },
    { idempotent: true },
  );
}
