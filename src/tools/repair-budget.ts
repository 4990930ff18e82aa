import { ToolArgumentsInvalidError } from "./errors.js";
import type { ArgumentIssue } from "./validate.js";

/** Repair attempts a run allows by default (two, then the run ends: docs/tools.md). */
export const DEFAULT_ARGUMENT_REPAIRS = 2;

export type RepairVerdict =
  | { readonly action: "repair"; readonly attempt: number; readonly remaining: number }
  | { readonly action: "fail"; readonly error: ToolArgumentsInvalidError };

/**
 * The bounded repair policy for invalid tool arguments, one per run. Each invalid call
 * costs one attempt, whatever the tool, and a valid call does not refund it: a model that
 * keeps getting arguments wrong ends the run instead of looping. Pure state (a count), so
 * replay rebuilds it by feeding the journaled invalid calls in again, or from `used`.
 */
export class ArgumentRepairBudget {
  #used: number;

  /**
   * @param maxRepairs invalid calls the model may repair per run (0: the first one ends the run)
   * @param used attempts already spent (when rebuilding from a journal)
   */
  constructor(
    readonly maxRepairs = DEFAULT_ARGUMENT_REPAIRS,
    used = 0,
  ) {
    if (!Number.isInteger(maxRepairs) || maxRepairs < 0) throw new RangeError("maxRepairs must be a non-negative integer");
    this.#used = used;
  }

  get used(): number {
    return this.#used;
  }

  get remaining(): number {
    return Math.max(0, this.maxRepairs - this.#used);
  }

  /**
   * Records one invalid call: `repair` sends the issues back to the model as the tool's
   * result; `fail` ends the run with TOOL_ARGUMENTS_INVALID.
   */
  onInvalid(tool: string, issues: readonly ArgumentIssue[], opts: { unknownTool?: boolean } = {}): RepairVerdict {
    if (this.#used >= this.maxRepairs) {
      return { action: "fail", error: new ToolArgumentsInvalidError(tool, this.#used, issues, opts.unknownTool === true) };
    }
    this.#used++;
    return { action: "repair", attempt: this.#used, remaining: this.maxRepairs - this.#used };
  }
}
