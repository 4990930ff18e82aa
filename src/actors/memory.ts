import { CHECKPOINT_RECENT_IDS, checkpointVersion, PROCESSED_LIMIT, type Checkpoint, type CheckpointReply, type OwedReply } from "./checkpoint-store.js";
import { extendIds } from "./processed-ids.js";

/** Key of an actor's local checkpoint in the WAL's side table (written with the turn's completion). */
export function localCheckpointKey(actorId: string): string {
  return `actors/${actorId}/checkpoint`;
}

/** Key of the window a split local checkpoint names (written in the same transaction as the checkpoint that moves it). */
export function localWindowKey(actorId: string): string {
  return `actors/${actorId}/ids`;
}

/**
 * An actor's committed memory: the state after its last handled message, the ids of
 * the messages whose turns have ended (for deduplication) and the replies it still owes.
 * Only a finished turn changes the state and the ids.
 */
export class ActorMemory<S = unknown> {
  /** Never mutated: each turn makes a new window (extendIds), which keeps its packed form. */
  #processed: readonly string[];
  #seen: Set<string>;
  #reply: CheckpointReply | undefined;
  /** Replies of committed turns not known to be sent (by envelope id): carried by every checkpoint until sent. */
  readonly #owed: Map<string, OwedReply>;
  /** The window the last next() proposed from this one: apply() adopts it instead of extending again. */
  #proposed: readonly string[] | undefined;
  /**
   * The revision whose window the stores hold apart, as the last checkpoint this memory
   * applied named it (split: Checkpoint.split). Unknown after a load: the first turn then
   * stores the window again, to the NATS and the local store alike, whichever it came from.
   */
  #base: number | undefined;

  private constructor(
    public state: S,
    processed: readonly string[],
    public revision: number,
    reply: CheckpointReply | undefined,
    owed: readonly OwedReply[],
    private readonly window: number,
  ) {
    this.#processed = processed.length > window ? processed.slice(-window) : processed;
    this.#seen = new Set(this.#processed);
    this.#reply = reply;
    this.#owed = new Map(owed.map((r) => [r.for, r]));
  }

  /**
   * The newer (by revision) of the shared and the local checkpoint, else the initial state.
   * `window`: how many processed ids to keep (`[checkpoint] processed_window`).
   */
  static from<S>(shared: Checkpoint | undefined, local: Checkpoint | undefined, initial: () => S, window = PROCESSED_LIMIT): ActorMemory<S> {
    const best = !local ? shared : !shared ? local : local.revision > shared.revision ? local : shared;
    if (!best) return new ActorMemory(initial(), [], 0, undefined, [], window);
    return new ActorMemory(best.state as S, best.processed ?? [], best.revision ?? 0, best.reply, best.owed ?? [], window);
  }

  /** The saved reply to `envelopeId`: the last asked message's, or one still owed. */
  replyFor(envelopeId: string): CheckpointReply | undefined {
    return this.#reply?.for === envelopeId ? this.#reply : this.#owed.get(envelopeId);
  }

  /** Whether the turn of `envelopeId` is committed: in the processed window, or owing its reply (however old). */
  has(envelopeId: string): boolean {
    return this.#seen.has(envelopeId) || this.#owed.has(envelopeId);
  }

  /** The replies still owed, oldest first. */
  owed(): OwedReply[] {
    return [...this.#owed.values()];
  }

  /** A committed turn's reply could not be published: every checkpoint from here on carries it, until `replied`. */
  owe(reply: OwedReply): void {
    this.#owed.set(reply.for, reply);
  }

  /** The reply to `envelopeId` went out: the next checkpoint no longer carries it. */
  replied(envelopeId: string): void {
    if (this.#owed.size > 0) this.#owed.delete(envelopeId);
  }

  /** The committed checkpoint as it stands, with the replies owed now (saved when a reply is owed outside a commit). */
  current(meta: { type: string; nodeId: string; ts: number }): Checkpoint {
    return this.#withOwed({
      state: this.state,
      processed: this.#processed,
      revision: this.revision,
      ...meta,
      ...(this.#reply ? { reply: this.#reply } : {}),
      ...(this.#base !== undefined ? { split: { base: this.#base } } : {}),
    });
  }

  get processed(): readonly string[] {
    return this.#processed;
  }

  /** The checkpoint that ending a turn on `envelopeId` with `state` (and `reply`, if asked) produces (not applied yet). */
  next(state: S, envelopeId: string, meta: { type: string; nodeId: string; ts: number }, reply?: CheckpointReply): Checkpoint {
    const processed = extendIds(this.#processed, envelopeId, this.window);
    this.#proposed = processed;
    const revision = this.revision + 1;
    const split = this.#split(revision, processed);
    return this.#withOwed({ state, processed, revision, ...meta, ...(reply ? { reply } : {}), ...(split ? { split } : {}) });
  }

  /**
   * How the checkpoint of `revision` stores its window (docs/actors.md, "Dedupe windows"):
   * whole while the window, or the actor's whole history, is at most CHECKPOINT_RECENT_IDS
   * ids; else split, the ids after the stored window's revision in the checkpoint, and every
   * CHECKPOINT_RECENT_IDS turns (or first after a load) the committed window stored again.
   */
  #split(revision: number, processed: readonly string[]): Checkpoint["split"] {
    if (this.window <= CHECKPOINT_RECENT_IDS) return undefined;
    if (this.#base !== undefined && revision - this.#base <= CHECKPOINT_RECENT_IDS) return { base: this.#base };
    if (this.revision === 0 || (revision <= CHECKPOINT_RECENT_IDS && processed.length === revision)) return undefined;
    return { base: this.revision, ids: this.#processed };
  }

  #withOwed(body: Omit<Checkpoint, "v" | "owed">): Checkpoint {
    const owed = this.#owed.size > 0 ? this.owed() : undefined;
    return { v: checkpointVersion({ owed, split: body.split }), ...body, ...(owed ? { owed } : {}) };
  }

  /** Makes a saved checkpoint the committed memory (the owed replies stay this memory's own: some may have gone out meanwhile). */
  apply(cp: Checkpoint): void {
    this.state = cp.state as S;
    this.revision = cp.revision;
    this.#reply = cp.reply;
    this.#base = cp.split?.base;
    const id = cp.processed.at(-1);
    if (id === undefined || this.#seen.has(id)) return;
    const next = cp.processed === this.#proposed ? cp.processed : extendIds(this.#processed, id, this.window);
    this.#proposed = undefined;
    for (const dropped of this.#processed.slice(0, this.#processed.length + 1 - next.length)) this.#seen.delete(dropped);
    this.#processed = next;
    this.#seen.add(id);
  }
}
