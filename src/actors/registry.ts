import { ConfigError } from "../core/index.js";
import { UnknownActorTypeError } from "./errors.js";
import type { ActorDefinition } from "./types.js";

/**
 * The actor types a node can host, by type name. It starts with what the caller gives it:
 * the runtime registers nothing by itself (`kova node start` adds the example `counter`).
 */
export class ActorTypeRegistry {
  // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
  readonly #defs = new Map<string, ActorDefinition<any>>();

  // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
  constructor(defs: Iterable<ActorDefinition<any>> = []) {
    for (const def of defs) this.register(def);
  }

  /**
   * Registers a type (made with `defineActor`). Registering the same definition twice is a no-op.
   * @throws ConfigError when another definition already uses the type name
   */
  register<S>(def: ActorDefinition<S>): void {
    const existing = this.#defs.get(def.type);
    if (existing !== undefined && existing !== def) {
      throw new ConfigError(`actors.type`, `actor type ${JSON.stringify(def.type)} is registered twice`);
    }
    this.#defs.set(def.type, def);
  }

  /** @throws UnknownActorTypeError when the type is not registered */
  get(type: string): ActorDefinition<unknown> {
    const def = this.#defs.get(type);
    if (def === undefined) throw new UnknownActorTypeError(type, this.types());
    return def;
  }

  has(type: string): boolean {
    return this.#defs.has(type);
  }

  types(): string[] {
    return [...this.#defs.keys()].sort();
  }
}
