/**
 * The cluster's shared state on NATS, as every process reads and writes it: the KV mirror,
 * the agents registry and its writes under `[cluster] max_actors`, leases, membership by
 * heartbeats, the agents' settings, the node control protocol (its subjects, message
 * shapes and client) and the `$SRV` micro service that answers it. Nodes, the gateway and
 * the CLI use it; it knows nothing of how a node is composed. See docs/cluster.md.
 */
export { ClusterErrorCode, FenceConflictError, QuotaExceededError } from "./errors.js";
export {
  KvMirror,
  encodeJson,
  mirrorTiming,
  openBucket,
  type KvMirrorOptions,
  type MirrorDecoder,
  type MirrorEntry,
  type MirrorListener,
  type MirrorTiming,
} from "./kv-mirror.js";
export { compactMarkers, type MarkerCompactionOptions, type MarkerCompactionReport } from "./marker-compaction.js";
export { AGENT_RECORD_READABLE, AGENT_RECORD_VERSION, AgentRegistry, agentsBucket, readAgentRecord, type AgentRecord } from "./registry.js";
export { RegistryWrites } from "./registry-writes.js";
export { ADMISSIONS_IN_FLIGHT, ActorAdmission, FENCE_MARGIN_PER_NODE, type AdmissionOptions, type AdmissionView } from "./admission.js";
export { LEASE_RECORD_READABLE, LEASE_RECORD_VERSION, LeaseTable, isCasConflict, leasesBucket, readLeaseRecord, type LeaseRecord } from "./lease.js";
export {
  Membership,
  NODE_RECORD_READABLE,
  NODE_RECORD_VERSION,
  nodesBucket,
  readNodeRecord,
  type MembershipOptions,
  type NodeRecord,
  type NodeView,
} from "./membership.js";
export { MirroredSettingsStore } from "./settings-mirror.js";
export {
  NODE_ENDPOINTS,
  approveSubject,
  controlRequest,
  nodeSubject,
  schedulesSubject,
  spawnSubject,
  type AgentStatusView,
  type ApproveReply,
  type ApproveRequest,
  type NodeEndpoint,
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
export {
  DEFAULT_QUEUE_GROUP,
  MicroResponseType,
  SERVICE_ERROR_CODE_HEADER,
  SERVICE_ERROR_HEADER,
  startMicroService,
  type MicroEndpoint,
  type MicroService,
  type MicroServiceOptions,
} from "./micro-service.js";
export { refuseNodeIdInUse } from "./node-id-check.js";
