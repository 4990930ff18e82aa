/**
 * Kova's actor runtime: actor definitions and types, lifecycle, supervision, journaled
 * turns with deterministic replay, checkpoints, and the per-node ActorHost.
 */
export { ActorHost, type ActorHostOptions, type ActorStatus } from "./actor-host.js";
export { defineActor } from "./definition.js";
export { ActorTypeRegistry } from "./registry.js";
export {
  ActorTemplateRegistry,
  DEFAULT_IDLE_AFTER_MS,
  validateTemplate,
  type ActorTemplate,
  type RegisteredTemplate,
  type TemplateBinding,
} from "./templates.js";
export { counterActor, type CounterState } from "./counter.js";
export { ActorLifecycle, ActorStates, canTransition, type ActorState } from "./lifecycle.js";
export { Signals, isSignal } from "./types.js";
export type {
  ActorContext,
  ActorDefinition,
  ActorHandler,
  ActorSendOptions,
  EmitOptions,
  RpcHandler,
  RpcType,
  Signal,
  StepInfo,
  StepOptions,
  SupervisionOptions,
  TurnFailure,
} from "./types.js";
export { DEFAULT_SUPERVISION, retryDelayMs, supervisionFor, type SupervisionPolicy } from "./supervision.js";
export {
  CHECKPOINT_VERSION,
  NatsCheckpointStore,
  PROCESSED_LIMIT,
  processedWindowLimit,
  type Checkpoint,
  type CheckpointStore,
  type NatsCheckpointStoreOptions,
} from "./checkpoint-store.js";
export { TURN_KIND, TURN_RECORD_VERSION, parseTurnRecord, type StepRecord, type TurnRecord } from "./turn-record.js";
export { describeReplay, replayTurn, type ReplayDivergence, type ReplayOptions, type ReplayReport } from "./replay.js";
export type { ActorWal } from "./ports.js";
export {
  ActorFailedError,
  CheckpointConflictError,
  InvalidTransitionError,
  LeaseLostError,
  NotHostedError,
  ReplayMismatchError,
  StepOutcomeUnknownError,
  TurnInterruptedError,
  UnknownActorTypeError,
  isLeaseLost,
} from "./errors.js";
export { ActorErrorCode } from "./errors.js";
export { ActorDlqReason } from "./errors.js";
