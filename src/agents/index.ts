/**
 * Kova's agents layer: an agent is an actor with a prompt, a model, tools and memory,
 * running a journaled decision loop. `defineAgent` / `[[agents]]` declare one;
 * `agentActor` turns a definition into the actor type a node hosts; `askAgent` runs one
 * from any service; the model layer (./model) talks to OpenAI-compatible endpoints.
 */
export {
  createOpenAiModel,
  costOf,
  loadTokenCounter,
  ModelCallAbortedError,
  ModelCallError,
  ModelCallScheduler,
  ModelErrorCode,
  parseModelsConfig,
  type ChatMessage,
  type ModelClient,
  type ModelConfig,
  type ModelRequest,
  type ModelResponse,
  type TokenCounter,
  type ToolCall,
  type Usage,
} from "./model/index.js";
export {
  defineAgent,
  isAgentDefinition,
  DEFAULT_MAX_TOOL_CALLS,
  DEFAULT_MAX_TURNS,
  DEFAULT_MEMORY,
  type AgentDefinition,
  type AgentHooks,
  type AgentSpec,
  type AgentTemplatePolicy,
  type BudgetPolicy,
  type HookContext,
  type HookResult,
  type MemoryPolicy,
  type RunPolicy,
} from "./definition.js";
export { agentsConfigFrom, agentTemplatesConfigFrom, budgetGroupsFrom, checkBudgetGroups, type BudgetGroupConfig } from "./config.js";
export { agentActor } from "./agent-actor.js";
export { AgentRuntime, type AgentRuntimeOptions } from "./runtime.js";
export { askAgent, delegateTask, type AskAgentOptions, type Delegation, type InterruptDelegation } from "./client.js";
export { emptyTotals } from "./usage.js";
export { RunWatcher, type RunOutcome, type RunWatcherOptions } from "./run-watcher.js";
export { DelegatedRunCancelledError, DelegatedRunFailedError, DelegatedRunTimeoutError, DelegationErrorCode } from "./delegation-errors.js";
// The agent-run protocol: payloads, results, usage, ids and deadlines.
export {
  addUsage,
  AGENT_CHAT,
  isRunStatus,
  MAX_HISTORY_TURNS,
  msUntilDeadline,
  parseDeadline,
  parseRunRequest,
  readTaskPayload,
  readUsage,
  reportedError,
  reportedUsage,
  runPayload,
  ZERO_USAGE,
  type AgentChatPayload,
  type AgentInfo,
  type AgentResult,
  type AgentTaskPayload,
  type AgentUsageTotals,
  type HistoryTurn,
  type ResultNotifyPayload,
  type RunRequest,
  type RunStatus,
  type RunUsage,
  type TaskConstraints,
  type TaskDelegatePayload,
} from "./run-protocol.js";
export { EventProfiles, forProfile, inProfile, isEventProfile, RunEventType, RunEventTypes, type EventProfile } from "./events.js";
export { fitContext, summaryRequest, withSummary, SUMMARY_PREFIX, type FitResult } from "./memory/policy.js";
export { hasNoOrphans, toUnits } from "./memory/units.js";
export { NatsMemoryStore, MEMORY_VERSION, type MemoryStore } from "./memory/store.js";
export { NatsGroupLedger, type GroupLedger } from "./budget-groups.js";
export { NatsSettingsStore, type AgentSettings, type SettingsStore } from "./settings.js";
export { TokenBucket } from "./token-bucket.js";
export type { AgentState } from "./run-scope.js";
export {
  AgentErrorCode,
  AgentHookFailedError,
  AgentInputInvalidError,
  BudgetExceededError,
  RunLimitExceededError,
  UnknownModelError,
  type BudgetName,
} from "./errors.js";
// For the layers above (every import from another layer comes through this file).
export { AGENT_TOOL_PREFIX, agentTool } from "./agent-tool.js";
export { needsApproval } from "./approval-gate.js";
export { APPROVAL_ID_FORM, ApprovalErrorCode, NatsApprovalStore, readDecision } from "./approvals.js";
export { idleAfterOf } from "./config.js";
export type { ModelPrice, ModelSlotStats } from "./model/index.js";
export type { SchedulePolicy } from "./model/scheduler.js";
export { modelScheduler } from "./runtime.js";
export { SETTINGS_FORMAT } from "./settings.js";
