import { CHECKPOINT_VERSION, PROCESSED_LIMIT, type Checkpoint, type CheckpointReply } from "./checkpoint-store.js";
import { extendIds } from "./processed-ids.js";

/** Key of an actor's local checkpoint in the WAL's side table (written with the turn's completion). */
export function localCheckpointKey(actorId: string): string {
  return `actors/${actorId}/checkpoint`;
}

/**
 * An actor's committed memory: the state after its last handled message and the ids of
 * the messages whose turns have ended (for deduplication). Only a finished turn changes it.
 */
export class ActorMemory<S = unknown> {
  /** Never mutated: each turn makes a new window (extendIds), which keeps its packed form. */
  #processed: readonly string[];
  #seen: Set<string>;
  #reply: CheckpointReply | undefined;
  /** The window the last next() proposed from this one: apply() adopts it instead of extending again. */
  #proposed: readonly string[] | undefined;

  private constructor(
    public state: S,
    processed: readonly string[],
    public revision: number,
    reply: CheckpointReply | undefined,
    private readonly window: number,
  ) {
    this.#processed = processed.length > window ? processed.slice(-window) : processed;
    this.#seen = new Set(this.#processed);
    this.#reply = reply;
  }

  /**
   * The newer (by revision) of the shared and the local checkpoint, else the initial state.
   * `window`: how many processed ids to keep (`[checkpoint] processed_window`).
   */
  static from<S>(shared: Checkpoint | undefined, local: Checkpoint | undefined, initial: () => S, window = PROCESSED_LIMIT): ActorMemory<S> {
    const best = !local ? shared : !shared ? local : local.revision > shared.revision ? local : shared;
    if (!best) return new ActorMemory(initial(), [], 0, undefined, window);
    return new ActorMemory(best.state as S, best.processed ?? [], best.revision ?? 0, best.reply, window);
  }

  /** The saved reply to `envelopeId` when it was the last message handled and asked for one. */
  replyFor(envelopeId: string): CheckpointReply | undefined {
    return this.#reply?.for === envelopeId ? this.#reply : undefined;
  }

  has(envelopeId: string): boolean {
    return this.#seen.has(envelopeId);
  }

  get processed(): readonly string[] {
    return this.#processed;
  }

  /** The checkpoint that ending a turn on `envelopeId` with `state` (and `reply`, if asked) produces (not applied yet). */
  next(state: S, envelopeId: string, meta: { type: string; nodeId: string; ts: number }, reply?: CheckpointReply): Checkpoint {
    const processed = extendIds(this.#processed, envelopeId, this.window);
    this.#proposed = processed;
    return { v: CHECKPOINT_VERSION, state, processed, revision: this.revision + 1, ...meta, ...(reply ? { reply } : {}) };
  }

  /** Makes a saved checkpoint the committed memory. */
  apply(cp: Checkpoint): void {
    this.state = cp.state as S;
    this.revision = cp.revision;
    this.#reply = cp.reply;
    const id = cp.processed.at(-1);
    if (id === undefined || this.#seen.has(id)) return;
    const next = cp.processed === this.#proposed ? cp.processed : extendIds(this.#processed, id, this.window);
    this.#proposed = undefined;
    for (const dropped of this.#processed.slice(0, this.#processed.length + 1 - next.length)) this.#seen.delete(dropped);
    this.#processed = next;
    this.#seen.add(id);
  }
}
