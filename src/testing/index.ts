/**
 * `kova/testing`: what Kova's own suites use, exported for users' tests.
 */
export * from "./nats-server.js";
export {
  type RecordedRequest,
  type ScriptedHandler,
  ScriptedModelServer,
  type ScriptedModelServerOptions,
  type ScriptedOutcome,
  type ScriptedRequest,
  startScriptedModelServer,
  type WireChatMessage,
  type WireTool,
} from "./scripted-model-server.js";
export {
  type ScriptedCompletion,
  type ScriptedDrop,
  type ScriptedError,
  type ScriptedReply,
  scriptedReply,
  type ScriptedTiming,
  type ScriptedToolCall,
  type ScriptedUsage,
} from "./scripted-model-replies.js";
export { type ModelCallLoad, type ModelCallLoadOptions, type ModelCallTask, startModelCallLoad } from "./model-call-load.js";
// Replay as a tool: re-run a recorded turn against today's code (docs/actors.md).
export { describeReplay, replayTurn, type ReplayDivergence, type ReplayOptions, type ReplayReport } from "../actors/index.js";
export { parseTurnRecord, type TurnRecord } from "../actors/index.js";
export { createNetworkTopology, type NetworkTopology, type NetworkTopologyOptions, networkNamespacesAvailable } from "./netns.js";
export { startNatsServersIn, type TopologyNatsOptions, type TopologyNatsServer } from "./nats-in-topology.js";
export { createFreezer, type Freezer, type FreezeMethod, freezeMethod } from "./freezer.js";
export {
  createToolLoopLoad,
  type JobRecord,
  LEDGER_TOOL_MODULE,
  type LedgerEntry,
  type ModelCall,
  type Prober,
  type ProbeSample,
  type ProbeWindow,
  ToolLoopLoad,
  type ToolLoopLoadOptions,
  type ToolLoopReport,
} from "./tool-loop-load.js";
