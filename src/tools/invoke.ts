import { ErrorCode, KovaError, toWire, type WireError, describeError } from "../core/index.js";
import { ToolFailedError, ToolsErrorCode } from "./errors.js";
import type { ArgumentRepairBudget, RepairVerdict } from "./repair-budget.js";
import { DEFAULT_RESULT_MAX_BYTES, capText, serializeToolResult } from "./result-cap.js";
import type { Tool, ToolContext } from "./types.js";
import { validateArguments, type ArgumentIssue } from "./validate.js";

/**
 * The agent loop's entry to a tool call, in the pieces it journals between: validate
 * (`checkToolCall`), then run (`runTool`). Every outcome carries `content`, the capped
 * text that goes back to the model as the tool message; errors are JSON
 * `{"error":{code,message,retryable,...}}` the model can reason about.
 */

export interface ToolRunOutcome {
  readonly status: "ok" | "error";
  /** The tool message for the model, capped. */
  readonly content: string;
  readonly truncated: boolean;
  /** The tool's return value (status ok). */
  readonly value?: unknown;
  /** The failure (status error), in wire form for the journal and events. */
  readonly error?: WireError;
}

export type ToolCallCheck<A = unknown> =
  | { readonly status: "valid"; readonly args: A }
  | {
      readonly status: "invalid";
      readonly issues: readonly ArgumentIssue[];
      /** `repair`: send `content` to the model; `fail`: end the run with `verdict.error`. */
      readonly verdict: RepairVerdict;
      readonly content: string;
    };

/**
 * Validates a call's raw arguments and, when invalid, spends one repair attempt.
 * @throws ToolDefinitionError when the tool's own schema does not compile (a broken tool, not a model error)
 */
export function checkToolCall<A>(tool: Tool<A>, rawArgs: unknown, budget: ArgumentRepairBudget): ToolCallCheck<A> {
  const check = validateArguments(tool, rawArgs);
  if (check.ok) return { status: "valid", args: check.args };
  const verdict = budget.onInvalid(tool.name, check.issues);
  const advice =
    verdict.action === "repair"
      ? `fix them and call ${tool.name} again (${verdict.remaining} repair attempt(s) left in this run)`
      : "no repair attempts are left in this run";
  const content = JSON.stringify({
    error: {
      code: ToolsErrorCode.TOOL_ARGUMENTS_INVALID,
      message: `the arguments do not match the schema of ${tool.name}: ${advice}`,
      issues: check.issues,
    },
  });
  return { status: "invalid", issues: check.issues, verdict, content };
}

/**
 * Runs a tool with validated arguments and caps its result. Never throws: a failure of the
 * tool becomes an `error` outcome. Stops waiting when `ctx.signal` aborts, even if the tool
 * ignores the signal.
 */
export async function runTool<A>(tool: Tool<A>, args: A, ctx: ToolContext, maxResultBytes = DEFAULT_RESULT_MAX_BYTES): Promise<ToolRunOutcome> {
  try {
    if (ctx.signal.aborted) throw interrupted(ctx.signal);
    const pending = tool.run(args, ctx);
    // Only a tool that returns a promise can outlive an abort; a synchronous one is done.
    const value = isPromiseLike(pending) ? await untilAborted(Promise.resolve(pending), ctx.signal) : pending;
    const capped = capText(serializeToolResult(value), maxResultBytes);
    return { status: "ok", content: capped.text, truncated: capped.truncated, value };
  } catch (err) {
    return failed(tool.name, err, maxResultBytes);
  }
}

/** The `error` outcome of a tool that threw; whatever it threw, this does not throw. */
function failed(toolName: string, err: unknown, maxResultBytes: number): ToolRunOutcome {
  let wire: WireError;
  try {
    wire = toWire(isKovaErrorSafe(err) ? err : new ToolFailedError(toolName, err));
  } catch {
    // A KovaError subclass whose data or message cannot be read: describe it plainly.
    wire = toWire(new ToolFailedError(toolName, describeError(err)));
  }
  const capped = capText(JSON.stringify({ error: wire }), maxResultBytes);
  return { status: "error", content: capped.text, truncated: capped.truncated, error: wire };
}

function isKovaErrorSafe(err: unknown): err is KovaError {
  try {
    return err instanceof KovaError;
  } catch {
    // A Proxy whose getPrototypeOf trap throws.
    return false;
  }
}

function isPromiseLike(v: unknown): v is PromiseLike<unknown> {
  return typeof (v as { then?: unknown } | null)?.then === "function";
}

function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(interrupted(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

function interrupted(signal: AbortSignal): KovaError {
  if (signal.reason instanceof KovaError) return signal.reason;
  const reason = signal.reason === undefined ? "aborted" : describeError(signal.reason);
  return new KovaError(ErrorCode.INTERRUPTED, `tool call stopped: ${reason}`, { cause: signal.reason });
}
