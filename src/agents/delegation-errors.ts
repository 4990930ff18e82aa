import { defineErrorCodes, KovaError } from "../core/index.js";

/** Failures of a run delegated to another agent (agents as tools, swarm subtasks). */
export const DelegationErrorCode = defineErrorCodes("agents", {
  DELEGATED_RUN_FAILED: "DELEGATED_RUN_FAILED",
  DELEGATED_RUN_CANCELLED: "DELEGATED_RUN_CANCELLED",
  DELEGATED_RUN_TIMEOUT: "DELEGATED_RUN_TIMEOUT",
});

/** The agent ran the task and reported a failure (its own error is in `data.error`). */
export class DelegatedRunFailedError extends KovaError {
  constructor(agentId: string, runId: string, error: { code: string; message: string } | undefined) {
    super(DelegationErrorCode.DELEGATED_RUN_FAILED, `agent ${agentId} failed run ${runId}: ${error ? `${error.message} [${error.code}]` : "no reason given"}`, {
      data: { agentId, runId, error },
    });
  }
}

/** The agent's run was cancelled (an interrupt signal) before it produced a result. */
export class DelegatedRunCancelledError extends KovaError {
  constructor(agentId: string, runId: string) {
    super(DelegationErrorCode.DELEGATED_RUN_CANCELLED, `agent ${agentId} cancelled run ${runId} before it produced a result`, { data: { agentId, runId } });
  }
}

/** No outcome came in time. The run may still finish: its events will say so. */
export class DelegatedRunTimeoutError extends KovaError {
  constructor(agentId: string, runId: string, waitedMs: number) {
    super(
      DelegationErrorCode.DELEGATED_RUN_TIMEOUT,
      `agent ${agentId} gave no result for run ${runId} within ${waitedMs} ms; it may be busy or not hosted (kova agents ls), and its events on the run's subject will show if it finishes later`,
      { retryable: true, data: { agentId, runId, waitedMs } },
    );
  }
}
