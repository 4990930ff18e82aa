/**
 * `kova/internal`: every layer's lower-level parts (the Bus, the WAL, the ActorHost,
 * membership, leases, placement, codecs, ...), for tools, benchmarks and advanced
 * embedding. Unstable: names here may change in any release. Applications use `kova`.
 */
export * as core from "./core/index.js";
export * as bus from "./bus/index.js";
export * as wal from "./wal/index.js";
export * as actors from "./actors/index.js";
export * as cluster from "./cluster/index.js";
export * as node from "./node/index.js";
