/**
 * Kova's evaluation layer: experiments of subjects × tasks × repetitions, run as durable
 * work on the cluster, scored by verifiers, reported side by side (docs/evals.md).
 */
export {
  agentsNamed,
  cellCount,
  cellIndex,
  cellRef,
  compileRegex,
  defineExperiment,
  DEFAULT_CONCURRENCY,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_TIMEOUT_MS,
  EXPERIMENT_SPEC_VERSION,
  loadExperimentFile,
  MAX_CELLS,
  parseExperimentText,
  specDigest,
  VERIFIER_TYPES,
  type A2aSubject,
  type ActorSubject,
  type AgentOverrides,
  type AgentSubject,
  type CellRef,
  type ExpandOptions,
  type ExperimentBudget,
  type ExperimentSpec,
  type OpenAiSubject,
  type SubjectSpec,
  type TaskSpec,
  type VerifierSpec,
  type VerifierType,
} from "./spec.js";
export {
  answerNumber,
  combineVerdicts,
  isDeterministic,
  judgePrompt,
  loadCodeVerifier,
  normalizeAnswer,
  readJudgeReply,
  runCodeVerifier,
  verifyAnswer,
  type CodeVerifier,
  type CodeVerifierInput,
  type CodeVerifierResult,
  type Verdict,
} from "./verifiers.js";
export {
  EvalErrorCode,
  ExperimentNotFoundError,
  ExperimentStateError,
  ExternalSubjectError,
  SubjectUnavailableError,
} from "./errors.js";
export {
  assertExperimentId,
  attemptId,
  EvalMessageType,
  EXPERIMENT_IDLE_AFTER_MS,
  EXPERIMENT_TEMPLATE,
  experimentActorId,
  experimentOfActor,
  isExperimentId,
  judgeId,
  evalControlSubject,
  experimentOwnerProblem,
  newExperimentId,
  ownedExperimentId,
  ownsExperiment,
  parseRunnerKey,
  runnerActorId,
  SUBJECT_IDLE_AFTER_MS,
  SUBJECT_TEMPLATE,
  type RunnerKey,
} from "./protocol.js";
export {
  ATTEMPT_RECORD_VERSION,
  ENDED_STATUSES,
  OUTPUT_MAX_CHARS,
  readAttemptRecord,
  readStatusRecord,
  STATUS_RECORD_VERSION,
  type AttemptRecord,
  type AttemptStatus,
  type EvalUsage,
  type ExperimentStatus,
  type StatusRecord,
} from "./records.js";
export { attemptKey, EvalStore, evalsBucket, readStoredSpec, specParts, type StoredSpecHead } from "./store.js";
export { ExperimentsNotForPrincipalsError, handleEvalSpecRequest, type EvalSpecReply, type EvalSpecRequest } from "./spec-requests.js";
export { SpecCache } from "./spec-cache.js";
export {
  classifyAnswer,
  emptyExperimentState,
  EXPERIMENT_STATE_VERSION,
  PLAIN_STATE_VERSION,
  ExperimentEngine,
  readExperimentState,
  type Answer,
  type Effect,
  type ExperimentState,
  type InFlight,
  type Outcome,
} from "./engine.js";
export { evalExperimentActor, experimentSummary, type ExperimentActorPorts, type ExperimentSummary } from "./experiment-actor.js";
export { evalSubjectActor, subjectDefinition, type EvalAgentsPort, type SubjectActorPorts } from "./subject-actor.js";
export { checkSpecOnCluster } from "./check.js";
export { checkEndpoint } from "./endpoint-guard.js";
export { a2aHeaders, openAiConfig, runExternalSubject, type ExternalDeps } from "./external.js";
export { evalTrustFrom, NO_EVAL_TRUST, trustedEnvValue, trustedVerifierModule, type EvalTrust } from "./node-trust.js";
export { bootstrapInterval, passAtK, percentile, seededRandom, seedOf, t975, tInterval } from "./stats.js";
export {
  authoritative,
  compareSubjects,
  summarize,
  type CompareSide,
  type Comparison,
  type ExperimentReport,
  type SubjectReport,
  type TaskRow,
} from "./report.js";
export {
  cancelExperiment,
  compareExperiments,
  evalStore,
  followExperiment,
  listExperiments,
  readExperimentSummary,
  readReport,
  resumeExperiment,
  runExperiment,
  startExperiment,
  type ExperimentProgress,
  type FollowOptions,
  type RunExperimentOptions,
  type StartedExperiment,
  type StartExperimentOptions,
} from "./client.js";
