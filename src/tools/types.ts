import type { Logger } from "../core/index.js";

/** A JSON Schema (draft 2020-12 or draft-07) describing a tool's arguments. */
export type JsonSchema = Record<string, unknown>;

/**
 * What a tool call sees while it runs. The agent layer builds it from the journaled step
 * that wraps the call, so `idempotencyKey` is the same on every re-run of the same call
 * (after a crash or on the node that took the agent over): hand it to external APIs that
 * take an idempotency key.
 */
export interface ToolContext {
  readonly agentId: string;
  readonly sessionId: string;
  readonly runId: string;
  /** The calling run's own parent, when it is a child run: events a tool publishes on the run's subject carry it. */
  readonly parentRunId?: string;
  /** The model's tool call id. */
  readonly callId: string;
  readonly idempotencyKey: string;
  /** Aborted on interrupt, kill, lease loss and at the tool's own time limit. */
  readonly signal: AbortSignal;
  readonly logger: Logger;
  /** Epoch milliseconds after which nobody waits for the result. */
  readonly deadline?: number;
  /**
   * The named budget group the calling run draws from (its task's `budget_group`, else its
   * agent's `budget.group`): a tool that starts child runs passes it on, so that they draw
   * from their parent's group.
   */
  readonly budgetGroup?: string;
  /**
   * The end user the calling run is for (its task's `constraints.user`): a tool that starts
   * child runs passes it on, so they count toward that user's fair share and
   * `user_max_tokens` instead of the calling agent's.
   */
  readonly user?: string;
  /** The calling run's own model-call priority (its task's `constraints.priority`), passed on to child runs like `user`. */
  readonly priority?: number;
}

/**
 * A tool an agent can call. `parameters` is what the model sees and what the arguments are
 * validated against before `run` is called; `idempotent` decides replay: a call that started
 * before a crash and recorded no result runs again only if it is idempotent, otherwise the
 * model gets an "outcome unknown" result.
 */
// biome-ignore lint/suspicious/noExplicitAny: a list of tools holds every argument type; `run` takes A, so only any accepts them all
export interface Tool<A = any, R = unknown> {
  /** `[A-Za-z0-9_-]+`, or `<server>/<tool>` for MCP tools, `agent:<id>` for agents as tools. */
  readonly name: string;
  readonly description: string;
  readonly parameters: JsonSchema;
  readonly idempotent: boolean;
  /**
   * For a tool whose replay safety depends on the call (http_request: GET yes, POST no):
   * decides for one call from its validated arguments, in place of `idempotent`, which
   * then states the conservative answer for callers that do not look here. Use
   * `isIdempotentCall(tool, args)` rather than reading either field.
   */
  idempotentFor?(args: A): boolean;
  /** The call waits for a human's approval before it runs (agent config may also ask for it). */
  readonly requiresApproval?: boolean;
  /**
   * Runs the call with validated arguments. The result must be JSON-serializable.
   * @throws any error: it goes back to the model as a structured tool error
   */
  run(args: A, ctx: ToolContext): Promise<R> | R;
}
