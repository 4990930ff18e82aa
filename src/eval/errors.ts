import { classifyErrorCodes, defineErrorCodes, KovaError } from "../core/index.js";

/** The eval layer's error codes (stable: they appear in attempt records, events and scripts). */
export const EvalErrorCode = defineErrorCodes("eval", {
  /** No experiment of that id in the cluster. */
  EXPERIMENT_NOT_FOUND: "EXPERIMENT_NOT_FOUND",
  /** The experiment cannot take this message now (resume of a running one, start of an ended one). */
  EXPERIMENT_STATE: "EXPERIMENT_STATE",
  /** An attempt got no answer within the experiment's `timeout` (an infrastructure failure: replaced). */
  EVAL_ATTEMPT_TIMEOUT: "EVAL_ATTEMPT_TIMEOUT",
  /** The experiment reached a budget limit while the attempt ran. */
  EVAL_BUDGET_EXHAUSTED: "EVAL_BUDGET_EXHAUSTED",
  /** The experiment was cancelled while the attempt ran. */
  EVAL_CANCELLED: "EVAL_CANCELLED",
  /** The judge's answer held no score the verifier could read. */
  EVAL_JUDGE_UNREADABLE: "EVAL_JUDGE_UNREADABLE",
  /** A code verifier threw or returned something that is not a score. */
  EVAL_VERIFIER_FAILED: "EVAL_VERIFIER_FAILED",
  /** The node that runs a subject cannot run it (no such agent or model here, a bad endpoint setting). */
  EVAL_SUBJECT_UNAVAILABLE: "EVAL_SUBJECT_UNAVAILABLE",
  /** An external subject (OpenAI-compatible or A2A endpoint) failed in a way retrying may fix. */
  EVAL_EXTERNAL_FAILED: "EVAL_EXTERNAL_FAILED",
  /** An external subject refused the request or answered with something unreadable (retrying cannot help). */
  EVAL_EXTERNAL_REJECTED: "EVAL_EXTERNAL_REJECTED",
});
classifyErrorCodes({
  [EvalErrorCode.EXPERIMENT_NOT_FOUND]: "not_found",
  [EvalErrorCode.EXPERIMENT_STATE]: "bad_input",
  [EvalErrorCode.EVAL_ATTEMPT_TIMEOUT]: "timeout",
});

/** No experiment of that id: says where to look. */
export class ExperimentNotFoundError extends KovaError {
  constructor(experimentId: string, cluster: string) {
    super(EvalErrorCode.EXPERIMENT_NOT_FOUND, `no experiment ${experimentId} in cluster ${cluster}: see kova eval ls`, { data: { experimentId } });
  }
}

/** A control message the experiment cannot take in its state. */
export class ExperimentStateError extends KovaError {
  constructor(experimentId: string, status: string, what: string) {
    super(EvalErrorCode.EXPERIMENT_STATE, `experiment ${experimentId} is ${status}: ${what}`, { data: { experimentId, status } });
  }
}

/** The node hosting a subject cannot run it. */
export class SubjectUnavailableError extends KovaError {
  constructor(subject: string, why: string) {
    super(EvalErrorCode.EVAL_SUBJECT_UNAVAILABLE, `subject ${subject}: ${why}`, { data: { subject } });
  }
}

/** An external endpoint failed: `retryable` (5xx, connection, timeout, 429) or not (4xx, unreadable answer). */
export class ExternalSubjectError extends KovaError {
  constructor(subject: string, detail: string, retryable: boolean, status?: number) {
    super(retryable ? EvalErrorCode.EVAL_EXTERNAL_FAILED : EvalErrorCode.EVAL_EXTERNAL_REJECTED, `subject ${subject}: ${detail}`, {
      retryable,
      data: { subject, ...(status === undefined ? {} : { status }) },
    });
  }
}
