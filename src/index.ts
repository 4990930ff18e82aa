/**
 * The `kova` package: core (errors, ids, clock, logger), the A2A bus and KovaClient,
 * the WAL, the actor runtime and the cluster node. Sub-layers stay importable on
 * their own through this one entry; `kova/testing` holds the test harness.
 */
export * from "./core/index.js";
export * from "./bus/index.js";
export * from "./wal/index.js";
export * from "./actors/index.js";
export * from "./node/index.js";
// Both layers name their fast-path handler type: the bus's (raw envelope) keeps the plain
// name, the actor definition's (envelope + state) is exported as ActorRpcHandler.
export type { RpcHandler } from "./bus/index.js";
export type { RpcHandler as ActorRpcHandler } from "./actors/index.js";
