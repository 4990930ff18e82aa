import { InvalidEnvelopeError, UnknownMessageTypeError } from "./errors.js";

/**
 * The envelope's `type` is an open set: the five core A2A types, plus namespaced types
 * (`<namespace>.<name>`, lowercase, e.g. `agent.chat`, `workflow.signal`) that layers and
 * applications register. A sender may send any well-formed type; a receiving node takes
 * only types that something in its process registered, and dead-letters the rest with
 * reason `unknown_type` — so a node that predates a type never misreads it.
 */
export const CORE_MESSAGE_TYPES = ["task_delegate", "info_request", "result_notify", "capability_query", "capability_reply"] as const;

export type CoreMessageType = (typeof CORE_MESSAGE_TYPES)[number];
/** A core type or a namespaced one (`agent.chat`). */
export type MessageType = CoreMessageType | `${string}.${string}`;

const CORE: ReadonlySet<string> = new Set(CORE_MESSAGE_TYPES);
const NAMESPACED = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/;
const MAX_TYPE = 64;
const registered = new Map<string, string>();

/** True for a core type or a well-formed namespaced type, registered or not. */
export function isWellFormedType(value: unknown): value is MessageType {
  return typeof value === "string" && (CORE.has(value) || (value.length <= MAX_TYPE && NAMESPACED.test(value)));
}

/** True for a type this process takes: core, or registered. */
export function isMessageType(value: unknown): value is MessageType {
  return typeof value === "string" && (CORE.has(value) || registered.has(value));
}

/**
 * Registers namespaced message types so this process accepts them (layers call it at
 * import; `defineActor` calls it for the types its handlers name). Idempotent.
 * @throws InvalidEnvelopeError for a malformed name (a programming error)
 */
export function registerMessageTypes(owner: string, ...types: string[]): void {
  for (const type of types) {
    if (CORE.has(type)) continue;
    if (!isWellFormedType(type)) {
      throw new InvalidEnvelopeError(
        "type",
        `${JSON.stringify(type)} (from ${owner}) is not a namespaced type: use <namespace>.<name>, lowercase [a-z0-9_], up to ${MAX_TYPE} characters, e.g. "agent.chat"`,
      );
    }
    if (!registered.has(type)) registered.set(type, owner);
  }
}

/** Every type this process takes, core first. */
export function knownMessageTypes(): string[] {
  return [...CORE_MESSAGE_TYPES, ...[...registered.keys()].sort()];
}

/**
 * @param known when true, the type must also be one this process takes
 * @throws InvalidEnvelopeError for a malformed type; UnknownMessageTypeError for an unknown one
 */
export function checkMessageType(value: unknown, known: boolean): MessageType {
  if (typeof value !== "string") throw new InvalidEnvelopeError("type", `must be a string, got ${value === null ? "null" : typeof value}`);
  if (known ? !isMessageType(value) : !isWellFormedType(value)) throw new UnknownMessageTypeError(value);
  return value as MessageType;
}
