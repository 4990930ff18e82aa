import { CHECKPOINT_VERSION, PROCESSED_LIMIT, type Checkpoint } from "./checkpoint-store.js";

/** Key of an actor's local checkpoint in the WAL's side table (written with the turn's completion). */
export function localCheckpointKey(actorId: string): string {
  return `actors/${actorId}/checkpoint`;
}

/**
 * An actor's committed memory: the state after its last handled message and the ids of
 * the messages whose turns have ended (for deduplication). Only a finished turn changes it.
 */
export class ActorMemory<S = unknown> {
  #processed: string[];
  #seen: Set<string>;

  private constructor(
    public state: S,
    processed: string[],
    public revision: number,
  ) {
    this.#processed = processed.slice(-PROCESSED_LIMIT);
    this.#seen = new Set(this.#processed);
  }

  /** The newer (by revision) of the shared and the local checkpoint, else the initial state. */
  static from<S>(shared: Checkpoint | undefined, local: Checkpoint | undefined, initial: () => S): ActorMemory<S> {
    const best = !local ? shared : !shared ? local : local.revision > shared.revision ? local : shared;
    if (!best) return new ActorMemory(initial(), [], 0);
    return new ActorMemory(best.state as S, best.processed ?? [], best.revision ?? 0);
  }

  has(envelopeId: string): boolean {
    return this.#seen.has(envelopeId);
  }

  get processed(): readonly string[] {
    return this.#processed;
  }

  /** The checkpoint that ending a turn on `envelopeId` with `state` produces (not applied yet). */
  next(state: S, envelopeId: string, meta: { type: string; nodeId: string; ts: number }): Checkpoint {
    const processed = [...this.#processed, envelopeId].slice(-PROCESSED_LIMIT);
    return { v: CHECKPOINT_VERSION, state, processed, revision: this.revision + 1, ...meta };
  }

  /** Makes a saved checkpoint the committed memory. */
  apply(cp: Checkpoint): void {
    this.state = cp.state as S;
    this.revision = cp.revision;
    const id = cp.processed.at(-1);
    if (id !== undefined && !this.#seen.has(id)) {
      this.#processed.push(id);
      this.#seen.add(id);
      if (this.#processed.length > PROCESSED_LIMIT) this.#seen.delete(this.#processed.shift()!);
    }
  }
}
