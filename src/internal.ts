/**
 * `kova/internal`: every production layer's door as a namespace (the Bus, the WAL, the
 * ActorHost, the tool registry, the agent runtime, the run engine, membership, leases,
 * placement, the gateway, ...), for tools, benchmarks and advanced embedding. Unstable:
 * names here may change in any release. Applications use `kova`; each layer is also a
 * subpath of its own (`kova/wal`, `kova/bus`, ...), which loads that layer and the ones
 * below it only (docs/api.md, "Feature levels").
 */
export * as core from "./core/index.js";
export * as wal from "./wal/index.js";
export * as bus from "./bus/index.js";
export * as actors from "./actors/index.js";
export * as tools from "./tools/index.js";
export * as agents from "./agents/index.js";
export * as workflow from "./workflow/index.js";
export * as swarm from "./swarm/index.js";
export * as evals from "./eval/index.js";
export * as cluster from "./cluster/index.js";
export * as node from "./node/index.js";
export * as gateway from "./gateway/index.js";
