/**
 * The model layer of `agents`: what the agent loop calls to talk to an LLM, and what the
 * node builds from `[models.<name>]`.
 */
export type {
  AcquireSlot,
  AssistantMessage,
  ChatMessage,
  FinishReason,
  ModelClient,
  ModelDelta,
  ModelFailureReason,
  ModelRequest,
  ModelResponse,
  RetryInfo,
  SystemMessage,
  ToolCall,
  ToolMessage,
  ToolSpec,
  Usage,
  UserMessage,
} from "./types.js";
export {
  createOpenAiModel,
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_MODEL_MAX_RETRIES,
  DEFAULT_MODEL_TIMEOUT_MS,
  OpenAiModel,
  type OpenAiModelConfig,
  type OpenAiModelOptions,
  publicEndpoint,
} from "./openai-model.js";
export { DEFAULT_RETRY_POLICY, type RetryPolicy } from "./retry.js";
export {
  DEFAULT_BASE_URL,
  DEFAULT_MAX_CONCURRENCY,
  type ModelConfig,
  type ModelPrice,
  type ParseModelsOptions,
  parseModelsConfig,
} from "./config.js";
export {
  ModelCallScheduler,
  type ModelCallSchedulerOptions,
  type ModelSlotStats,
  type ModelSlots,
  type QueuedInfo,
  type ReleaseSlot,
  SCHEDULE_POLICIES,
  type SchedulePolicy,
  type SlotTicket,
  type WaitStats,
} from "./scheduler.js";
export { type EncodingName, encodingForModel, loadTokenCounter, type TokenCounter } from "./tokens.js";
export { addCost, type Cost, costOf, ZERO_COST } from "./cost.js";
export {
  isModelCallError,
  ModelCallAbortedError,
  ModelCallError,
  type ModelCallErrorData,
  ModelErrorCode,
  ModelOutputTruncatedError,
  ModelResponseTooLargeError,
  SchedulerClosedError,
} from "./errors.js";
