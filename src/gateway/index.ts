/**
 * The gateway layer: HTTP in front of the cluster (A2A v1.0, OpenAI-compatible chat, web
 * view, API keys). docs/gateway.md describes it; `kova gateway start` runs it.
 */
export { Gateway, type GatewayOptions } from "./gateway.js";
export { parseGatewayConfig, DEFAULT_GATEWAY_PORT, type GatewayConfig, type ConfiguredKey, type OtelConfig } from "./config.js";
export { GatewayErrorCode, GatewayHttpError } from "./errors.js";
export { KeyAdmin, KeyRing, generateKey, hashKey, isKeyHash, keyIdOf, type ApiKey, type KeyLimits, type StoredKey } from "./keys.js";
export { NatsTaskStore, type StoredTask } from "./task-store.js";
export { RunClient, outcomeOf, type RunRequest, type RunEvent } from "./runs.js";
export { TaskProjection, type RunOutcome, type KovaTaskMeta } from "./task-projection.js";
export { sessionIdFor, scopedSessionId } from "./sessions.js";
export { principalOf, type Principal } from "./auth.js";
