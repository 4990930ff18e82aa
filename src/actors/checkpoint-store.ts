import { KvStore, type A2AEnvelope, type Bus, type KvConnection } from "../bus/index.js";
import { type WireError, checkFormatVersion, recordFormat } from "../core/index.js";
import { CheckpointConflictError } from "./errors.js";
import { crashPoint } from "./crash-points.js";
import { CorruptProcessedIdsError, packedTail, packIds, unpackIds } from "./processed-ids.js";

/**
 * Format version of a checkpoint; old versions keep loading. v2: `processed` is packed
 * (processed-ids.ts), base64 in the JSON on NATS, bytes in the WAL's local copy; v1 had
 * an array of strings. v3: the checkpoint may carry `owed` replies. A build that reads only
 * 1 and 2 would ignore them and lose those replies, so it must refuse such a checkpoint;
 * only a checkpoint that owes a reply is written as 3 (`checkpointVersion`), every other
 * one stays 2, which the build before 3 still reads (a rolling upgrade keeps working).
 * v4: the window is split (`Checkpoint.split`): `base` names the revision whose window is
 * stored apart, `recent` holds the packed ids of the turns after it; only a split
 * checkpoint is written as 4 (an actor past its first `CHECKPOINT_RECENT_IDS` turns, with a
 * window larger than that), and it may owe replies as 3 does.
 */
export const CHECKPOINT_VERSION = 4;
/** The version of a checkpoint that carries its whole window and owes no reply. */
const UNOWING_VERSION = 2;
const OWING_VERSION = 3;
/** Checkpoint versions this build reads. */
export const CHECKPOINT_READABLE: readonly number[] = [1, 2, 3, 4];
/** How many handled envelope ids a checkpoint keeps for deduplication by default (`[checkpoint] processed_window`). */
export const PROCESSED_LIMIT = 1000;
/**
 * How many ids of the newest turns a split checkpoint carries at most: every
 * `CHECKPOINT_RECENT_IDS` turns the window is stored apart again (docs/actors.md, "Dedupe
 * windows"). A checkpoint then carries ~32 ids on average instead of the whole window
 * (1,000 by default, ~23 KB), and the window's own write costs ~1/64 of it per turn.
 */
export const CHECKPOINT_RECENT_IDS = 64;
/** Format version of a stored window (the ids up to a split checkpoint's `base`). */
export const WINDOW_VERSION = 1;
const WINDOW_READABLE: readonly number[] = [1];

/**
 * The largest processed window whose ids leave at least half of `maxPayload` for the
 * rest of a checkpoint (the state, the reply). A UUID id is 17 bytes packed, 4/3 of that
 * in the checkpoint's base64 (docs/actors.md, "Dedupe windows"); a longer id costs more, so
 * this is the bound for UUID ids, the form Kova draws.
 */
export function processedWindowLimit(maxPayload: number): number {
  return Math.floor(maxPayload / 2 / ((17 * 4) / 3));
}

/** The answer to an asked message, kept with the checkpoint that ends its turn. */
export interface CheckpointReply {
  /** Envelope id of the message answered. */
  for: string;
  result?: unknown;
  error?: WireError;
  /** The asker wrote JSON, so the reply is JSON too. */
  encoding?: "json";
}

/** The fields of an asked message that its reply is addressed by (`bus.respond` reads them). */
export type ReplyAddress = Pick<A2AEnvelope, "id" | "from" | "to" | "type" | "replyTo" | "correlationId" | "traceId">;

/**
 * The reply of a committed turn whose publish failed, kept in the actor's checkpoint until
 * a host has sent it: with its address, because its message may be gone by then (moved to
 * the DLQ after max_deliver), and the host that sends it may be another node.
 */
export interface OwedReply extends CheckpointReply {
  asked: ReplyAddress;
}

/** An actor's memory at the end of a handled message. */
export interface Checkpoint {
  v?: number;
  state: unknown;
  /** Ids of the last handled envelopes (newest last, at most the processed window): a redelivery starts no second turn. */
  processed: readonly string[];
  /**
   * The reply of the last turn when its message asked for one: saved with the turn, so a
   * crash before the reply went out (on this node or any other) resends it instead of
   * leaving the asker waiting.
   */
  reply?: CheckpointReply;
  /**
   * Replies of committed turns that could not be published (docs/actors.md, "Owed
   * replies"): the host retries them while it hosts the actor, and a host that loads the
   * checkpoint sends them. Absent when none is owed (format v3 when present).
   */
  owed?: readonly OwedReply[];
  /** Counts handled messages; the newer of the NATS and local (WAL) copies wins. */
  revision: number;
  type?: string;
  nodeId?: string;
  ts?: number;
  /**
   * How the window is stored (format v4; absent: the checkpoint carries all of it). The
   * window as of revision `base` is stored apart (NATS: key `<actorId>.ids` of the same
   * bucket; WAL: `actors/<id>/ids`), and the checkpoint carries the ids of the turns after
   * it, one per revision. `ids`: on the turn that moves `base`, the window as of `base`,
   * which the store writes before the checkpoint that names it.
   */
  split?: { base: number; ids?: readonly string[] };
}

/** A window of processed ids as stored apart from the checkpoints that name it (format v4). */
export interface StoredWindow {
  /** The checkpoint revision whose window this is. */
  revision: number;
  ids: readonly string[];
}

/** A checkpoint as stored (JSON on NATS, msgpack in the WAL): the window whole (`processed`) or split (`base`, `recent`). */
export type StoredCheckpoint = Omit<Checkpoint, "processed" | "split"> & { processed?: unknown; base?: unknown; recent?: unknown };

/** Whether a stored checkpoint's window is split (v4): its reader needs the stored window too. */
export function isSplit(cp: Pick<StoredCheckpoint, "v">): boolean {
  return cp.v === 4;
}

/**
 * A checkpoint read from NATS or the local WAL, with fields older versions lacked filled in;
 * `window`: the stored window a split checkpoint names (readWindow), when there is one.
 * @throws UnsupportedFormatError for a checkpoint of a newer format version;
 *   CorruptProcessedIdsError when its ids cannot be read or its stored window does not fit it
 */
export function readCheckpoint(what: string, cp: StoredCheckpoint | Checkpoint, window?: StoredWindow): Checkpoint {
  const v = checkFormatVersion(what, cp.v, CHECKPOINT_READABLE);
  const { owed, base, recent, ...rest } = cp as StoredCheckpoint;
  const valid = Array.isArray(owed) ? owed.filter(isOwedReply) : [];
  const revision = cp.revision ?? 0;
  const processed = v === 4 ? readSplit(what, base, recent, revision, window) : readProcessed(what, v, cp.processed as unknown);
  return { ...rest, processed, revision, ...(valid.length ? { owed: valid } : {}) };
}

/** The version a checkpoint is written as (see CHECKPOINT_VERSION): 4 when split, else 3 only when it owes a reply. */
export function checkpointVersion(cp: Pick<Checkpoint, "owed" | "split">): number {
  return cp.split ? CHECKPOINT_VERSION : cp.owed?.length ? OWING_VERSION : UNOWING_VERSION;
}

/**
 * The window of a split checkpoint at `revision`: the stored window (of revision `w`, with
 * `base <= w <= revision`: a window newer than `base` was written by a turn whose own
 * checkpoint did not land, or by a host that had not noticed losing the actor yet, and is
 * the window at `w` all the same, since revisions follow one another) then the ids of the
 * turns after `w`, which the checkpoint carries (one per revision after `base`).
 */
function readSplit(what: string, base: unknown, recent: unknown, revision: number, window: StoredWindow | undefined): readonly string[] {
  if (typeof base !== "number" || !Number.isInteger(base) || base < 0 || base > revision) {
    throw new CorruptProcessedIdsError(what, `its window base ${String(base)} is not a revision from 0 to ${revision}`);
  }
  const ids = readPacked(what, recent);
  if (ids.length !== revision - base)
    throw new CorruptProcessedIdsError(what, `it holds ${ids.length} ids of the turns after revision ${base}, not ${revision - base}`);
  if (base === 0) return ids;
  if (!window) throw new CorruptProcessedIdsError(what, `the window of revision ${base} it names is not stored`);
  if (window.revision < base || window.revision > revision) {
    throw new CorruptProcessedIdsError(what, `the stored window is of revision ${window.revision}, not from ${base} to ${revision}`);
  }
  return [...window.ids, ...ids.slice(window.revision - base)];
}

/**
 * A stored window (NATS: JSON with its ids in base64; WAL: msgpack with bytes).
 * @throws UnsupportedFormatError for a newer format; CorruptProcessedIdsError for one that does not parse
 */
export function readWindow(what: string, value: unknown): StoredWindow {
  const w = value as { v?: unknown; revision?: unknown; ids?: unknown } | null;
  checkFormatVersion(what, w?.v, WINDOW_READABLE);
  if (typeof w?.revision !== "number" || !Number.isInteger(w.revision) || w.revision < 0) {
    throw new CorruptProcessedIdsError(what, `its revision ${String(w?.revision)} is not a revision`);
  }
  return { revision: w.revision, ids: readPacked(what, w.ids) };
}

/** A stored window as NATS KV stores it: JSON, its ids packed in base64. */
export function windowJson(revision: number, ids: readonly string[]): string {
  return JSON.stringify(natsWindow(revision, ids));
}

function natsWindow(revision: number, ids: readonly string[]): { v: number; revision: number; ids: string } {
  return { v: WINDOW_VERSION, revision, ids: packIds(ids).toString("base64") };
}

/** A stored window as the WAL's side table keeps it: its ids packed as bytes. */
export function localWindow(revision: number, ids: readonly string[]): { v: number; revision: number; ids: Uint8Array } {
  return { v: WINDOW_VERSION, revision, ids: packIds(ids) };
}

// An entry without the id it answers or an inbox to send to cannot be sent: it is not taken.
function isOwedReply(r: unknown): r is OwedReply {
  const o = r as Partial<OwedReply> | null;
  return typeof o === "object" && o !== null && typeof o.for === "string" && typeof o.asked?.id === "string" && typeof o.asked.replyTo === "string";
}

/** v1: an array of ids; v2, v3: packed ids, base64 in JSON or bytes in the WAL. */
function readProcessed(what: string, v: number, p: unknown): readonly string[] {
  if (v === 1) return Array.isArray(p) ? p : [];
  return readPacked(what, p);
}

function readPacked(what: string, p: unknown): readonly string[] {
  if (typeof p === "string") return unpackIds(Buffer.from(p, "base64"), what);
  if (p instanceof Uint8Array) return unpackIds(p, what);
  throw new CorruptProcessedIdsError(what, `expected packed ids, got ${p === null ? "null" : typeof p}`);
}

/** The stored form of a checkpoint with its ids (whole or split) as `pack` makes them. */
function stored(cp: Checkpoint, pack: (ids: Buffer) => unknown): StoredCheckpoint {
  const { split, processed, ...rest } = cp;
  const v = checkpointVersion(cp);
  if (!split) return { ...rest, v, processed: pack(packIds(processed)) };
  return { ...rest, v, base: split.base, recent: pack(packedTail(processed, cp.revision - split.base)) };
}

/** A checkpoint as NATS KV stores it: JSON, with the processed ids (or a split one's recent ids) packed in base64. */
export function checkpointJson(cp: Checkpoint): string {
  return JSON.stringify(natsCheckpoint(cp));
}

function natsCheckpoint(cp: Checkpoint): StoredCheckpoint {
  return stored(cp, (ids) => ids.toString("base64"));
}

/** A checkpoint as the WAL's side table keeps it (msgpack): the processed ids (or a split one's recent ids) packed as bytes. */
export function localCheckpoint(cp: Checkpoint): StoredCheckpoint {
  return stored(cp, (ids) => ids);
}

/** Where actor checkpoints live, shared by every node so that a takeover resumes from them. */
export interface CheckpointStore {
  load(actorId: string): Promise<Checkpoint | undefined>;
  /** @throws CheckpointConflictError (a LeaseLostError) when another writer saved since this store last loaded or saved the actor */
  save(actorId: string, cp: Checkpoint): Promise<void>;
  /** Drops what the store caches for an actor this node no longer hosts (a passivated instance); the next load reads it again. */
  forget?(actorId: string): void;
}

export interface NatsCheckpointStoreOptions {
  js: KvConnection;
  cluster: string;
  /** Bucket replicas: the number of servers in a clustered NATS (default 1). */
  replicas?: number;
  /** The bus of the connection: a node's saves (one per turn) then go through its request mux (KvStoreOptions.bus). */
  bus?: Pick<Bus, "publishToStream">;
}

/** How often a load reads a checkpoint again when its stored window is newer than it (a writer went on meanwhile). */
const LOAD_TRIES = 3;

/** The key of an actor's stored window (format v4): an actor id has no dot. */
const WINDOW_SUFFIX = ".ids";

/**
 * The bucket's records as stored: a checkpoint under the actor's id, a window under
 * `<actorId>.ids`; their readers (readCheckpoint, readWindow) check each kind's versions.
 */
const STORED_FORMAT = recordFormat<unknown>({
  describe: (key) =>
    key.endsWith(WINDOW_SUFFIX) ? `processed-ids window of actor ${key.slice(0, -WINDOW_SUFFIX.length)} in NATS KV` : `checkpoint of actor ${key} in NATS KV`,
  version: CHECKPOINT_VERSION,
  readable: [...new Set([...CHECKPOINT_READABLE, ...WINDOW_READABLE])],
});

/**
 * Checkpoints in NATS KV `kova_<cluster>_checkpoints`, one key per actor id, JSON so that
 * `nats kv get` shows them, and the stored window of a split one under `<actorId>.ids`
 * (an actor id has no dot). Saves are compare-and-set on the revision this store last
 * saw, the window's too: a node that lost an actor to another node cannot overwrite the
 * new owner's checkpoint or window, even if its lease check raced (a second fence).
 */
export class NatsCheckpointStore implements CheckpointStore {
  readonly #revisions = new Map<string, number>();
  /** KV revision of each actor's stored window, as this store last read or wrote it. */
  readonly #windowRevisions = new Map<string, number>();

  private constructor(readonly store: KvStore<unknown>) {}

  /** The key of an actor's stored window (format v4). */
  static windowKey(actorId: string): string {
    return `${actorId}${WINDOW_SUFFIX}`;
  }

  /**
   * Opens the bucket, creating it if needed.
   * @throws JetStream errors when JetStream is unavailable or the bucket exists with other settings
   */
  static async open(opts: NatsCheckpointStoreOptions): Promise<NatsCheckpointStore> {
    return new NatsCheckpointStore(await KvStore.open(opts.js, opts.cluster, "checkpoints", STORED_FORMAT, { replicas: opts.replicas, bus: opts.bus }));
  }

  async load(actorId: string): Promise<Checkpoint | undefined> {
    for (let attempt = 1; ; attempt++) {
      const entry = await this.store.get(actorId);
      if (!entry) {
        this.#revisions.delete(actorId);
        return undefined;
      }
      const raw = entry.value as StoredCheckpoint;
      let window: StoredWindow | undefined;
      if (isSplit(raw)) {
        const w = await this.store.get(NatsCheckpointStore.windowKey(actorId));
        if (w) {
          window = readWindow(`processed-ids window of actor ${actorId} in NATS KV`, w.value);
          // Written after the checkpoint was read, by a host whose turns went on meanwhile
          // (it has not noticed losing the actor yet): read both again.
          if (window.revision > (raw.revision ?? 0) && attempt < LOAD_TRIES) continue;
          this.#windowRevisions.set(actorId, w.revision);
        } else this.#windowRevisions.delete(actorId);
      }
      this.#revisions.set(actorId, entry.revision);
      return readCheckpoint(`checkpoint of actor ${actorId} in NATS KV`, raw, window);
    }
  }

  async save(actorId: string, cp: Checkpoint): Promise<void> {
    // The window a checkpoint names is stored before it.
    if (cp.split?.ids) {
      await this.#saveWindow(actorId, cp.split.base, cp.split.ids);
      crashPoint("after-window", actorId);
    }
    const known = this.#revisions.get(actorId);
    const value = natsCheckpoint(cp);
    const rev = known === undefined ? await this.store.create(actorId, value) : await this.store.update(actorId, value, known);
    if (rev === undefined) {
      this.#revisions.delete(actorId);
      throw new CheckpointConflictError(actorId, new Error(`the checkpoint moved past revision ${known ?? "none"} this node knew`));
    }
    this.#revisions.set(actorId, rev);
  }

  /**
   * Stores the window as of checkpoint revision `revision`, compare-and-set on the window's
   * KV revision this store knows. When it knows none (the actor's checkpoints it read held
   * their whole window), it reads the stored one first and replaces it only if it is not
   * newer: a window only moves forward, so that no checkpoint is left naming a window older
   * than the one it was written against.
   * @throws CheckpointConflictError when another writer stored a window since
   */
  async #saveWindow(actorId: string, revision: number, ids: readonly string[]): Promise<void> {
    const key = NatsCheckpointStore.windowKey(actorId);
    let known = this.#windowRevisions.get(actorId);
    let conflict: string | undefined;
    if (known === undefined) {
      const e = await this.store.get(key);
      if (e && readWindow(`processed-ids window of actor ${actorId} in NATS KV`, e.value).revision > revision)
        conflict = `a window newer than revision ${revision} is stored`;
      known = e?.revision;
    }
    const rev = conflict
      ? undefined
      : known === undefined
        ? await this.store.create(key, natsWindow(revision, ids))
        : await this.store.update(key, natsWindow(revision, ids), known);
    if (rev === undefined) {
      this.#windowRevisions.delete(actorId);
      this.#revisions.delete(actorId);
      throw new CheckpointConflictError(actorId, new Error(conflict ?? `the stored window moved past revision ${known ?? "none"} this node knew`));
    }
    this.#windowRevisions.set(actorId, rev);
  }

  forget(actorId: string): void {
    this.#revisions.delete(actorId);
    this.#windowRevisions.delete(actorId);
  }

  /** Removes an actor's checkpoint and its stored window (a deleted actor). */
  async delete(actorId: string): Promise<void> {
    await this.store.delete(actorId);
    await this.store.delete(NatsCheckpointStore.windowKey(actorId));
    this.forget(actorId);
  }
}
