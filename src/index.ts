/**
 * The `kova` package: what applications use. Send A2A messages from any service
 * (`KovaClient`), run a node in-process (`KovaNode`), define actor types (`defineActor`),
 * and handle Kova's typed errors. The list is chosen, not accumulated: docs/api.md
 * describes each name, and `kova/internal` holds the layers' lower-level parts (unstable).
 * `kova/testing` holds the test harness (nats-server launcher, scripted model server).
 */

// Version
export { KOVA_VERSION } from "./core/version.js";

// Errors: one class per failure, stable codes per layer
export {
  ConfigError,
  ErrorCode,
  ArgumentError,
  InvalidIdError,
  KovaError,
  KovaTimeoutError,
  RemoteError,
  errorFamilyOf,
  fromWire,
  isKovaError,
  isTimeout,
  toWire,
  type ErrorFamily,
  type KovaErrorOptions,
  type WireError,
} from "./core/errors.js";
export type { Logger } from "./core/logger.js";

// The A2A bus, seen from a client
export { KovaClient, type KovaClientOptions, type MessageOptions } from "./bus/client.js";
export { createEnvelope, type A2AEnvelope, type EnvelopeFields, type MessageType } from "./bus/envelope.js";
export { CORE_MESSAGE_TYPES, registerMessageTypes, type CoreMessageType } from "./bus/message-types.js";
export { subjectsFor, type Subjects } from "./bus/subjects.js";
export type { KovaEvent, EventStream } from "./bus/events.js";
export type { AskOptions } from "./bus/ask.js";
export type { RequestOptions } from "./bus/rpc.js";
export type { SendOptions } from "./bus/send.js";
export type { DlqEntry } from "./bus/dlq.js";
export type { ActivationReply } from "./bus/activation.js";
export { ContentType, DlqReason, Header } from "./bus/wire.js";
export {
  BusClosedError,
  BusErrorCode,
  DecodeError,
  InvalidEnvelopeError,
  JetStreamUnavailableError,
  KovaNoRespondersError,
  NatsUnreachableError,
  PayloadTooLargeError,
  PermissionDeniedError,
  StreamConflictError,
  UnknownMessageTypeError,
  isInfrastructureFailure,
  isNoResponders,
} from "./bus/errors.js";

// Actors
export { defineActor } from "./actors/definition.js";
export { ActorTypeRegistry } from "./actors/registry.js";
export { ActorTemplateRegistry, type ActorTemplate, type RegisteredTemplate, type TemplateBinding } from "./actors/templates.js";
export { instanceId, parseInstanceId } from "./core/ids.js";
export { counterActor, type CounterState } from "./actors/counter.js";
export { ActorStates, type ActorState } from "./actors/lifecycle.js";
export { Signals, isSignal } from "./actors/types.js";
export type {
  ActorContext,
  ActorDefinition,
  ActorHandler,
  ActorSendOptions,
  EmitOptions,
  RpcHandler as ActorRpcHandler,
  RpcType,
  Signal,
  StepInfo,
  StepOptions,
  SupervisionOptions,
} from "./actors/types.js";
export {
  ActorDlqReason,
  ActorErrorCode,
  ActorFailedError,
  LeaseLostError,
  NotHostedError,
  ReplayMismatchError,
  StepOutcomeUnknownError,
  TurnInterruptedError,
  UnknownActorTypeError,
  isLeaseLost,
} from "./actors/errors.js";

// Workflows (docs/workflows.md)
export {
  defineWorkflow,
  loadWorkflowFile,
  parseWorkflow,
  parseWorkflowText,
  checkInput,
  type WorkflowDefinition,
  type StepDef,
  type ErrorStrategy,
} from "./workflow/definition.js";
export { workflowActor, runSummary, type RunSummary, type WorkflowActorPorts } from "./workflow/run-actor.js";
export { WorkflowMessageType, WORKFLOW_ACTOR_TYPE, newRunId } from "./workflow/protocol.js";
export { WorkflowErrorCode, WorkflowDefinitionError, WorkflowInputError, TemplateError } from "./workflow/errors.js";

// WAL errors a node can surface at start (wrong key, corrupt records)
export { WalBadKeyError, WalCorruptError, WalErrorCode, WalFailedError } from "./wal/errors.js";

// The node
export { KovaNode, CLUSTER_EVENTS_SESSION, type StartNodeOptions } from "./node/node.js";
export { defaultConfig, loadConfig, parseConfig, type ActorSpec, type NodeConfig, type WalConfig } from "./node/config.js";
export { NodeErrorCode } from "./node/errors.js";
export type { AgentStatusView, NodeStatusView, SignalReply, SpawnReply } from "./cluster/control.js";

// Tools
export { defineTool, type JsonSchemaToolSpec, type ZodToolSpec } from "./tools/define-tool.js";
export { ToolRegistry, type ToolDescription, type ToolProvider } from "./tools/registry.js";
export type { JsonSchema, Tool, ToolContext } from "./tools/types.js";
export { ToolsErrorCode, ToolArgumentsInvalidError } from "./tools/errors.js";

// Agents
export { defineAgent } from "./agents/definition.js";
export type {
  AgentDefinition,
  AgentSpec,
  AgentTemplatePolicy,
  AgentHooks,
  HookContext,
  HookResult,
  MemoryPolicy,
  BudgetPolicy,
  RunPolicy,
} from "./agents/definition.js";
export { askAgent, type AskAgentOptions } from "./agents/client.js";
export { AGENT_CHAT } from "./agents/run-protocol.js";
export type {
  AgentChatPayload,
  AgentInfo,
  AgentResult,
  AgentTaskPayload,
  AgentUsageTotals,
  RunStatus,
  RunUsage,
  TaskConstraints,
} from "./agents/run-protocol.js";
export { EventProfiles, inProfile, RunEventType, type EventProfile } from "./agents/events.js";
export { AgentErrorCode, BudgetExceededError, RunLimitExceededError } from "./agents/errors.js";
export { ApprovalErrorCode, type ApprovalDecision, type ApprovalRecord } from "./agents/approvals.js";
export { ModelErrorCode, ModelCallError } from "./agents/model/errors.js";

// Agents as tools, and the agent protocol as callers see it
export { agentTool, type AgentToolArgs, type AgentToolOptions, type AgentToolResult } from "./agents/agent-tool.js";
export type { ResultNotifyPayload, TaskDelegatePayload } from "./agents/run-protocol.js";
export { DelegatedRunCancelledError, DelegatedRunFailedError, DelegatedRunTimeoutError, DelegationErrorCode } from "./agents/delegation-errors.js";

// Swarms
export { defineCoordinator, SwarmEventType, type CoordinatorOptions, type PlannedSubtask, type SwarmRequest, type SwarmResult } from "./swarm/coordinator.js";
export { runSwarm, type RunSwarmOptions } from "./swarm/run-swarm.js";
export { natsAgentDirectory, staticAgentDirectory, type AgentCandidate, type AgentDirectory } from "./swarm/directory.js";
export type { MissingSubtask } from "./swarm/synthesize.js";
export type { StaticSubtask } from "./swarm/plan.js";
export { SwarmErrorCode, SwarmNoAgentError, SwarmNoResultsError, SwarmPlanInvalidError, SwarmRunFailedError } from "./swarm/errors.js";

// Evaluations (docs/evals.md)
export {
  cancelExperiment,
  compareExperiments,
  compareSubjects,
  defineExperiment,
  EvalErrorCode,
  evalsBucket,
  ExperimentNotFoundError,
  ExperimentStateError,
  followExperiment,
  listExperiments,
  loadExperimentFile,
  parseExperimentText,
  readExperimentSummary,
  readReport,
  resumeExperiment,
  runExperiment,
  startExperiment,
  summarize,
  type AttemptRecord,
  type CodeVerifier,
  type CodeVerifierInput,
  type CodeVerifierResult,
  type Comparison,
  type ExperimentBudget,
  type ExperimentProgress,
  type ExperimentReport,
  type ExperimentSpec,
  type ExperimentSummary,
  type FollowOptions,
  type RunExperimentOptions,
  type StartedExperiment,
  type StartExperimentOptions,
  type StatusRecord,
  type SubjectReport,
  type SubjectSpec,
  type TaskSpec,
  type Verdict,
  type VerifierSpec,
} from "./eval/index.js";
