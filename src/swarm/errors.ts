import { defineErrorCodes, KovaError } from "../core/index.js";
import type { ArgumentIssue } from "../tools/index.js";
import type { RunUsage } from "../agents/index.js";

export const SwarmErrorCode = defineErrorCodes("swarm", {
  /** The coordinator's model gave no valid plan within the repair budget. */
  SWARM_PLAN_INVALID: "SWARM_PLAN_INVALID",
  /** No live agent has a capability a subtask needs. */
  SWARM_NO_AGENT: "SWARM_NO_AGENT",
  /** The swarm ended without any subtask result to synthesize from. */
  SWARM_NO_RESULTS: "SWARM_NO_RESULTS",
  /** The swarm's run ended failed or cancelled (what `runSwarm` throws). */
  SWARM_RUN_FAILED: "SWARM_RUN_FAILED",
});

/** The plan the model produced failed validation after every repair attempt. */
export class SwarmPlanInvalidError extends KovaError {
  /**
   * @param spent the tokens of the `attempts` model calls and the model that answered: the
   * run still owes them to its usage (swarm runs count their own calls, docs/swarm.md)
   */
  constructor(coordinator: string, attempts: number, issues: readonly ArgumentIssue[], spent?: { usage: RunUsage; model: string }) {
    const list = issues.map((i) => `${i.path}: expected ${i.expected}, got ${i.given}`).join("; ");
    super(
      SwarmErrorCode.SWARM_PLAN_INVALID,
      `coordinator ${coordinator}: the model gave no valid plan after ${attempts} attempt(s) (${list}); give a static plan, raise plan_repairs, or use a model that follows tool schemas`,
      { data: { coordinator, attempts, issues, ...spent } },
    );
  }
}

/** No live agent offers a capability the plan needs. */
export class SwarmNoAgentError extends KovaError {
  constructor(coordinator: string, capabilities: string[], known: string[]) {
    super(
      SwarmErrorCode.SWARM_NO_AGENT,
      `coordinator ${coordinator}: no live agent (not Failed or Paused) has ${capabilities.map((c) => JSON.stringify(c)).join(", ")}; live agents offer ${known.length ? known.join(", ") : "nothing"} (kova agents ls)`,
      { retryable: true, data: { coordinator, capabilities, known } },
    );
  }
}

/** Every subtask went without a result (all failed, or the deadline passed first). */
export class SwarmNoResultsError extends KovaError {
  constructor(coordinator: string, missing: number) {
    super(SwarmErrorCode.SWARM_NO_RESULTS, `coordinator ${coordinator}: none of the ${missing} subtask(s) produced a result before the deadline`, {
      retryable: true,
      data: { coordinator, missing },
    });
  }
}

/** The swarm run ended without an answer. */
export class SwarmRunFailedError extends KovaError {
  constructor(runId: string, status: string, error: { code: string; message: string } | undefined) {
    super(SwarmErrorCode.SWARM_RUN_FAILED, `swarm run ${runId} ended ${status}${error ? `: ${error.message} [${error.code}]` : ""}`, {
      data: { runId, status, error },
    });
  }
}
