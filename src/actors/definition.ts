import { ConfigError, isValidId } from "../core/index.js";
import { isWellFormedType, registerMessageTypes } from "../bus/index.js";
import type { ActorDefinition } from "./types.js";

const RPC_TYPES = ["info_request", "capability_query"];

/**
 * Declares an actor type. Validates at definition time, before any message can reach it.
 * @throws ConfigError naming the field at fault (type, handlers, rpc, maxAttempts, unrecorded, onTurnFailed)
 */
export function defineActor<S>(def: ActorDefinition<S>): ActorDefinition<S> {
  if (!isValidId(def.type)) {
    throw new ConfigError("type", `actor type ${JSON.stringify(def.type)} must be 1-128 characters of [A-Za-z0-9_-]`);
  }
  if (typeof def.initialState !== "function") {
    throw new ConfigError(`${def.type}.initialState`, "must be a function returning the initial state");
  }
  for (const [name, fn] of Object.entries(def.handlers ?? {})) {
    if (!isWellFormedType(name)) {
      throw new ConfigError(
        `${def.type}.handlers.${name}`,
        "not a message type; use a core A2A type (task_delegate, info_request, result_notify, capability_query, capability_reply) or a namespaced one such as app.ping",
      );
    }
    if (typeof fn !== "function") throw new ConfigError(`${def.type}.handlers.${name}`, "must be a function");
  }
  // The node hosting this actor takes the namespaced types its handlers name.
  registerMessageTypes(`actor type ${def.type}`, ...Object.keys(def.handlers ?? {}));
  for (const [name, fn] of Object.entries(def.rpc ?? {})) {
    if (!RPC_TYPES.includes(name)) {
      throw new ConfigError(`${def.type}.rpc.${name}`, `the fast path answers only ${RPC_TYPES.join(" and ")}`);
    }
    if (typeof fn !== "function") throw new ConfigError(`${def.type}.rpc.${name}`, "must be a function");
  }
  const attempts = def.supervision?.maxAttempts ?? def.maxAttempts;
  if (attempts !== undefined && (!Number.isInteger(attempts) || attempts < 1)) {
    throw new ConfigError(`${def.type}.maxAttempts`, "must be an integer of at least 1");
  }
  if (def.unrecorded !== undefined && typeof def.unrecorded !== "function") {
    throw new ConfigError(`${def.type}.unrecorded`, "must be a function");
  }
  if (def.onTurnFailed !== undefined && typeof def.onTurnFailed !== "function") {
    throw new ConfigError(`${def.type}.onTurnFailed`, "must be a function");
  }
  return Object.freeze({ ...def, handlers: { ...def.handlers } });
}
