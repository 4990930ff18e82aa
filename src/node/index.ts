/**
 * Kova's cluster node: config, membership, placement, leases, the registry, graceful
 * shutdown and the composition root `KovaNode`. See docs/cluster.md.
 */
export { KovaNode, KOVA_VERSION, CLUSTER_EVENTS_SESSION, type StartNodeOptions } from "./node.js";
export { NodeErrorCode } from "./errors.js";
export { NodeControl, type ControlDeps } from "./control-handlers.js";
export { recoverPendingTurns, type NodeRecoveryReport } from "./recovery-policy.js";
export { loadConfig, parseConfig, defaultConfig, defaultNodeId, type NodeConfig, type ActorSpec, type WalConfig } from "./config.js";
export { loadActorModules } from "./actor-modules.js";
export { Membership, nodesBucket, type NodeRecord, type NodeView, type MembershipOptions } from "./membership.js";
export { LeaseTable, leasesBucket, isCasConflict, type LeaseRecord } from "./lease.js";
export { AgentRegistry, agentsBucket, type AgentRecord } from "./registry.js";
export { ownerOf, assign, rendezvousScore } from "./placement.js";
export { PlacementController, type HostPort, type PlacementOptions } from "./placement-controller.js";
export { installShutdown, type ShutdownOptions } from "./shutdown.js";
export {
  controlRequest,
  nodeSubject,
  spawnSubject,
  NODE_ENDPOINTS,
  type NodeEndpoint,
  type NodeStatusView,
  type AgentStatusView,
  type SpawnRequest,
  type SpawnReply,
  type SignalRequest,
  type SignalReply,
} from "./control.js";
export { startMicroService, type MicroService, type MicroServiceOptions, type MicroEndpoint } from "./micro-service.js";
export { resolveNats, type ResolvedNats, type ResolveNatsOptions, type NatsSource } from "./nats-bootstrap.js";
