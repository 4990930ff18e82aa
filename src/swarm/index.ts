/**
 * Kova's swarm layer: a coordinator actor that decomposes a task with its model,
 * delegates the subtasks to agents found by capability on any node, collects their
 * results and synthesizes one answer (docs/swarm.md).
 */
export {
  defineCoordinator,
  DEFAULT_MAX_SUBTASKS,
  DEFAULT_SWARM_DEADLINE_MS,
  SwarmEventType,
  type CoordinatorOptions,
  type PlannedSubtask,
  type SwarmRequest,
  type SwarmResult,
} from "./coordinator.js";
export {
  assignSubtasks,
  natsAgentDirectory,
  staticAgentDirectory,
  type AgentCandidate,
  type AgentDirectory,
  type Assignment,
  type NatsDirectoryOptions,
} from "./directory.js";
export {
  decompose,
  planSchema,
  readStaticPlan,
  PLAN_TOOL,
  type DecomposeOptions,
  type DecomposeResult,
  type ModelCall,
  type StaticSubtask,
  type Subtask,
} from "./plan.js";
export { missingNote, synthesize, type MissingSubtask, type SubtaskResult, type SynthesizeOptions, type SynthesizeResult } from "./synthesize.js";
export { readRunEvents } from "./history.js";
export { runSwarm, type RunSwarmOptions } from "./run-swarm.js";
export { swarmActorType, swarmsConfigFrom, type SwarmSpec } from "./config.js";
export { SwarmErrorCode, SwarmNoAgentError, SwarmNoResultsError, SwarmPlanInvalidError, SwarmRunFailedError } from "./errors.js";
