/**
 * Kova's cluster node: config, the composition root `KovaNode`, placement, the nats-server
 * it may start, schedules and graceful shutdown. The cluster's shared state (registry,
 * leases, membership, the control protocol) is the cluster layer's. See docs/cluster.md.
 */
export { KovaNode, KOVA_VERSION, CLUSTER_EVENTS_SESSION, type StartNodeOptions } from "./node.js";
export { NodeErrorCode } from "./errors.js";
export { NodeControl, type ControlDeps } from "./control-handlers.js";
export { recoverPendingTurns, type NodeRecoveryReport } from "./recovery-policy.js";
export { loadConfig, parseConfig, defaultConfig, defaultNodeId, type NodeConfig, type ActorSpec, type WalConfig } from "./config.js";
export { loadActorModules } from "./actor-modules.js";
export { ownerOf, assign, rendezvousScore } from "./placement/rendezvous.js";
export { PlacementController, type HostPort, type PlacementOptions } from "./placement/controller.js";
export { installShutdown, type ShutdownOptions } from "./shutdown.js";
export { resolveNats, type ResolvedNats, type ResolveNatsOptions, type NatsSource } from "./nats/bootstrap.js";
export { scheduleTarget, type ScheduleSpec } from "./schedules/spec.js";
export type { ScheduleView } from "./schedules/service.js";
// For the layers above (every import from another layer comes through this file).
export {
  NatsLaunchError,
  NatsPortInUseError,
  type NatsServerHandle,
  type RestartOptions,
  SERVER_PING,
  type SpawnedNatsServer,
  type StartNatsServerOptions,
  findNatsServerBinary,
  freePort,
  launchNatsServer,
  spawnNatsServer,
  terminateServer,
} from "./nats/launcher.js";
