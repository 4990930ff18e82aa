/**
 * The cluster's shared state on NATS, as every process reads and writes it: the KV mirror,
 * the agents registry and its writes under `[cluster] max_actors`, leases, membership by
 * heartbeats, the agents' settings, the node control protocol (its subjects, message
 * shapes and client) and the `$SRV` micro service that answers it. Nodes, the gateway and
 * the CLI use it; it knows nothing of how a node is composed. See docs/cluster.md.
 */
export { ClusterErrorCode, QuotaExceededError } from "./errors.js";
export { KvMirror, mirrorTiming } from "./kv-mirror.js";
export { compactMarkers } from "./marker-compaction.js";
export { AgentRegistry, type AgentRecord } from "./registry.js";
export { RegistryWrites } from "./registry-writes.js";
export { ADMISSIONS_IN_FLIGHT, ActorAdmission } from "./admission.js";
export { LEASE_RECORD_VERSION, LeaseTable, LEASE_RECORD_FORMAT, type LeaseRecord } from "./lease.js";
export { Membership, NODE_RECORD_VERSION, mirrorNodes, NODE_RECORD_FORMAT, type NodeRecord } from "./membership.js";
export { MirroredSettingsStore } from "./settings-mirror.js";
export { readAgent, readNodes, readRegistry } from "./reads.js";
export {
  approveSubject,
  controlRequest,
  nodeSubject,
  schedulesSubject,
  spawnSubject,
  type AgentStatusView,
  type ApproveReply,
  type ApproveRequest,
  type NodeStatusView,
  type SchedulesRequest,
  type SignalReply,
  type SignalRequest,
  type SkippedToolView,
  type SpawnReply,
  type SpawnRequest,
  type ToolView,
  type ToolsReply,
  type ToolsRequest,
  type VirtualActorsView,
} from "./control.js";
export { startMicroService, type MicroEndpoint, type MicroService } from "./micro-service.js";
export { refuseNodeIdInUse } from "./node-id-check.js";
