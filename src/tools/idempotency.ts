import type { Tool } from "./types.js";

/**
 * How a tool behaves on replay, as `kova tools ls` shows it: `idempotent` (a started call
 * with no recorded result runs again), `not_idempotent` (the model is told the outcome is
 * unknown), `per_call` (decided from the call's arguments, e.g. http_request by method).
 */
export type IdempotencyClass = "idempotent" | "not_idempotent" | "per_call";

export function idempotencyClass(tool: Tool): IdempotencyClass {
  if (tool.idempotentFor) return "per_call";
  return tool.idempotent ? "idempotent" : "not_idempotent";
}

/**
 * Whether this call may run again when it started before a crash and recorded no result.
 * A rule that throws counts as "no": when in doubt, the model hears "outcome unknown"
 * rather than a side effect happening twice.
 * @param args the call's validated arguments (as journaled)
 */
export function isIdempotentCall<A>(tool: Tool<A>, args: A): boolean {
  if (!tool.idempotentFor) return tool.idempotent;
  try {
    return tool.idempotentFor(args) === true;
  } catch {
    return false;
  }
}
