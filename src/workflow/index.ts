/**
 * Declarative workflows: definitions (TOML, JSON or code), templates and conditions, the
 * interpreter, the run actor and its durable timers. docs/workflows.md describes them.
 */
export {
  allSteps,
  waitSubjectProblem,
  checkInput,
  defineWorkflow,
  loadWorkflowFile,
  parseWorkflow,
  parseWorkflowText,
  WORKFLOW_DEFINITION_VERSION,
  type AgentStep,
  type BranchStep,
  type ErrorStrategy,
  type FailStep,
  type InputSpec,
  type InputType,
  type LoopStep,
  type ParallelStep,
  type StepDef,
  type StepType,
  type WaitStep,
  type WorkflowDefinition,
} from "./definition.js";
export { parseTemplate, renderTemplate, templateValue, type PathResolver } from "./template.js";
export { evaluateCondition, parseCondition, truthy, type Condition } from "./condition.js";
export {
  emptyRunState,
  readRunState,
  RUN_STATE_VERSION,
  RunEngine,
  stepMetadata,
  type Effect,
  type RunState,
  type WorkflowRunStatus,
  type SignalPayload,
  type StartPayload,
  type WorkflowStepRecord,
} from "./engine.js";
export { runSummary, workflowActor, type RunSummary, type WorkflowActorPorts } from "./run-actor.js";
export {
  messageData,
  SubjectWaits,
  SubjectWaitService,
  type SubjectWaitEntry,
  type SubjectWaitServiceOptions,
} from "./subject-waits.js";
export { TimerService, WorkflowTimers, type TimerEntry, type TimerServiceOptions } from "./timers.js";
export { assertRunId, MAX_RUN_ID, newRunId, parseSignal, startMessageId, WORKFLOW_ACTOR_TYPE, WorkflowMessageType } from "./protocol.js";
export { TemplateError, WorkflowDefinitionError, WorkflowErrorCode, WorkflowInputError } from "./errors.js";
