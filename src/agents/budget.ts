import type { BudgetPolicy } from "./definition.js";
import { BudgetExceededError, type BudgetName } from "./errors.js";
import type { GroupLedger } from "./budget-groups.js";

/** One group a run draws from: its ledger key, its limit, and the name errors use. */
export interface GroupLimit {
  key: string;
  limit: number;
  name: BudgetName;
}

/** Who a run is for, as budgets and the fair-share scheduler key it. */
export interface RunParty {
  sessionId: string;
  /** The envelope's sender. */
  from: string;
  /** The task's `constraints.user`: the end user, when the sender serves many. */
  user?: string;
  /** The task's `constraints.budget_group`. */
  budgetGroup?: string;
}

/**
 * The groups a run charges: the agent's named group (or its parent run's, for a child
 * run that names one), its session group, and its user's group (the task's
 * `constraints.user`, else the sender).
 * @param groupLimits `[budget_groups.<name>]` limits
 */
export function groupsOf(policy: BudgetPolicy, run: RunParty, groupLimits: ReadonlyMap<string, { maxTokens: number }>): GroupLimit[] {
  const out: GroupLimit[] = [];
  const named = run.budgetGroup ?? policy.group;
  if (named !== undefined) {
    const g = groupLimits.get(named);
    // A child run may name its parent's group even where this node's config lacks it: it is then only counted.
    out.push({ key: `group.${named}`, limit: g?.maxTokens ?? Number.POSITIVE_INFINITY, name: `group:${named}` });
  }
  if (policy.sessionMaxTokens !== undefined) out.push({ key: `session.${run.sessionId}`, limit: policy.sessionMaxTokens, name: `session:${run.sessionId}` });
  const user = run.user ?? run.from;
  if (policy.userMaxTokens !== undefined) out.push({ key: `user.${user}`, limit: policy.userMaxTokens, name: `user:${user}` });
  return out;
}

/**
 * The fair-share key of a run's model calls (`scheduling = "fair_share"`): the user the
 * task names (`constraints.user`), else the named budget group it draws from (the task's
 * or the agent's: a group is one tenant), else the sender. One user's backlog then waits
 * behind its own calls, not in front of everyone else's.
 */
export function shareKeyOf(policy: BudgetPolicy, run: RunParty): string {
  if (run.user !== undefined) return `user.${run.user}`;
  const named = run.budgetGroup ?? policy.group;
  return named !== undefined ? `group.${named}` : `user.${run.from}`;
}

/** Tokens used so far, as the checks need them. */
export interface UsedTokens {
  run: number;
  agentTotal: number;
}

/**
 * Checks every limit before a model call. The check is against what was used; a call may
 * go past a limit by its own tokens (providers report usage after the fact), and the next
 * call is refused: a group shared by agents on several nodes stops them all within one
 * request's tokens of its limit.
 * @throws BudgetExceededError naming the first budget over its limit
 */
export async function checkBudgets(
  policy: BudgetPolicy,
  used: UsedTokens,
  runMaxTokens: number | undefined,
  groups: readonly GroupLimit[],
  ledger: GroupLedger,
): Promise<void> {
  if (runMaxTokens !== undefined && used.run >= runMaxTokens) {
    throw new BudgetExceededError(
      "constraints.max_tokens",
      used.run,
      runMaxTokens,
      "the task's constraints.max_tokens caps this run; ask for more in the task",
    );
  }
  if (policy.maxTokensPerRun !== undefined && used.run >= policy.maxTokensPerRun) {
    throw new BudgetExceededError("max_tokens_per_run", used.run, policy.maxTokensPerRun, "raise budget.max_tokens_per_run of the agent or split the task");
  }
  if (policy.maxTokensTotal !== undefined && used.agentTotal >= policy.maxTokensTotal) {
    throw new BudgetExceededError(
      "max_tokens_total",
      used.agentTotal,
      policy.maxTokensTotal,
      "the agent has used its lifetime budget; raise budget.max_tokens_total",
    );
  }
  const totals = await Promise.all(groups.map((g) => ledger.used(g.key)));
  groups.forEach((g, i) => {
    if (totals[i]! >= g.limit)
      throw new BudgetExceededError(
        g.name,
        totals[i]!,
        g.limit,
        "the group's tokens are spent; raise its max_tokens in kova.toml or wait for a new budget period",
      );
  });
}
