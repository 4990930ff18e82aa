import { classifyErrorCodes, defineErrorCodes, KovaError, describeError } from "../core/index.js";

/** Error codes of the agent loop (the model layer's live in model/errors.ts). */
export const AgentErrorCode = defineErrorCodes("agents", {
  BUDGET_EXCEEDED: "BUDGET_EXCEEDED",
  RUN_LIMIT_EXCEEDED: "RUN_LIMIT_EXCEEDED",
  AGENT_INPUT_INVALID: "AGENT_INPUT_INVALID",
  AGENT_HOOK_FAILED: "AGENT_HOOK_FAILED",
  UNKNOWN_MODEL: "UNKNOWN_MODEL",
  RUN_CANCELLED: "RUN_CANCELLED",
});
classifyErrorCodes({ [AgentErrorCode.AGENT_INPUT_INVALID]: "bad_input", [AgentErrorCode.UNKNOWN_MODEL]: "bad_input" });

/** Which budget stopped a run: names the config key a user would raise. */
export type BudgetName =
  | "tokens_per_minute"
  | "max_tokens_per_run"
  | "max_tokens_total"
  | "constraints.max_tokens"
  | `group:${string}`
  | `session:${string}`
  | `user:${string}`;

/** A run would go over one of its token budgets; checked before each model call. */
export class BudgetExceededError extends KovaError {
  constructor(
    readonly budget: BudgetName,
    readonly used: number,
    readonly limit: number,
    hint: string,
  ) {
    super(AgentErrorCode.BUDGET_EXCEEDED, `budget ${budget} exceeded: ${used} of ${limit} tokens used; ${hint}`, {
      data: { budget, used, limit },
    });
  }
}

/** A run policy (`max_turns`, `max_tool_calls`, `time_budget_ms`, a deadline) ended the run. */
export class RunLimitExceededError extends KovaError {
  constructor(
    readonly limit: "max_turns" | "max_tool_calls" | "time_budget_ms" | "deadline",
    readonly value: number,
    hint: string,
  ) {
    super(AgentErrorCode.RUN_LIMIT_EXCEEDED, `run stopped by ${limit} (${value}): ${hint}`, { data: { limit, value } });
  }
}

/** The message a run was asked for is not one the agent can take. */
export class AgentInputInvalidError extends KovaError {
  constructor(field: string, why: string) {
    super(AgentErrorCode.AGENT_INPUT_INVALID, `invalid agent input: ${field} ${why}`, { data: { field } });
  }
}

/** A hook of the agent's definition threw. */
export class AgentHookFailedError extends KovaError {
  constructor(hook: string, agentId: string, cause: unknown) {
    super(AgentErrorCode.AGENT_HOOK_FAILED, `hook ${hook} of agent ${agentId} failed: ${describeError(cause)}`, {
      cause,
      data: { hook, agentId },
    });
  }
}

/** An agent or a model switch names a model no `[models.<name>]` table defines. */
export class UnknownModelError extends KovaError {
  constructor(name: string, known: readonly string[], where: string) {
    super(
      AgentErrorCode.UNKNOWN_MODEL,
      `${where}: unknown model ${JSON.stringify(name)}; configured models: ${known.join(", ") || "(none: add a [models.<name>] table)"}`,
      { data: { model: name, known: [...known] } },
    );
  }
}
