import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { Bus } from "../bus/index.js";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import type { WireError } from "../core/errors.js";
import { CheckpointConflictError } from "./errors.js";
import { checkFormatVersion } from "../core/format-version.js";
import { isWrongLastSequence } from "../bus/nats-errors.js";
import { CorruptProcessedIdsError, packIds, unpackIds } from "./processed-ids.js";

/**
 * Format version of a checkpoint; old versions keep loading. v2: `processed` is packed
 * (processed-ids.ts), base64 in the JSON on NATS, bytes in the WAL's local copy; v1 had
 * an array of strings.
 */
export const CHECKPOINT_VERSION = 2;
/** Checkpoint versions this build reads. */
export const CHECKPOINT_READABLE: readonly number[] = [1, 2];
/** How many handled envelope ids a checkpoint keeps for deduplication by default (`[checkpoint] processed_window`). */
export const PROCESSED_LIMIT = 1000;

/** The answer to an asked message, kept with the checkpoint that ends its turn. */
export interface CheckpointReply {
  /** Envelope id of the message answered. */
  for: string;
  result?: unknown;
  error?: WireError;
  /** The asker wrote JSON, so the reply is JSON too. */
  encoding?: "json";
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
  /** Counts handled messages; the newer of the NATS and local (WAL) copies wins. */
  revision: number;
  type?: string;
  nodeId?: string;
  ts?: number;
}

/**
 * A checkpoint read from NATS or the local WAL, with fields older versions lacked filled in.
 * @throws UnsupportedFormatError for a checkpoint of a newer format version
 */
export function readCheckpoint(what: string, cp: Checkpoint): Checkpoint {
  const v = checkFormatVersion(what, cp.v, CHECKPOINT_READABLE);
  return { ...cp, processed: readProcessed(what, v, cp.processed as unknown), revision: cp.revision ?? 0 };
}

/** v1: an array of ids; v2: packed ids, base64 in JSON or bytes in the WAL. */
function readProcessed(what: string, v: number, p: unknown): readonly string[] {
  if (v === 1) return Array.isArray(p) ? p : [];
  if (typeof p === "string") return unpackIds(Buffer.from(p, "base64"), what);
  if (p instanceof Uint8Array) return unpackIds(p, what);
  throw new CorruptProcessedIdsError(what, `expected packed ids, got ${p === null ? "null" : typeof p}`);
}

/** A checkpoint as NATS KV stores it: JSON, with the processed ids packed in base64. */
export function checkpointJson(cp: Checkpoint): string {
  return JSON.stringify({ ...cp, v: CHECKPOINT_VERSION, processed: packIds(cp.processed).toString("base64") });
}

/** A checkpoint as the WAL's side table keeps it (msgpack): the processed ids packed as bytes. */
export function localCheckpoint(cp: Checkpoint): Omit<Checkpoint, "processed"> & { processed: Uint8Array } {
  return { ...cp, v: CHECKPOINT_VERSION, processed: packIds(cp.processed) };
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
  js: JetStreamClient;
  cluster: string;
  /** Bucket replicas: the number of servers in a clustered NATS (default 1). */
  replicas?: number;
  /**
   * The bus of the connection: a node's saves (one per turn) then go through its request
   * mux (Bus.publishToStream) instead of `kv.update`, which builds an Error per call.
   */
  bus?: Pick<Bus, "publishToStream">;
}

/** How long a checkpoint save waits for JetStream's ack (nats.js's default for KV writes). */
const SAVE_TIMEOUT_MS = 5_000;

const enc = new TextEncoder();

/**
 * Checkpoints in NATS KV `kova_<cluster>_checkpoints`, one key per actor id, JSON so that
 * `nats kv get` shows them. Saves are compare-and-set on the revision this store last
 * saw: a node that lost an actor to another node cannot overwrite the new owner's
 * checkpoint, even if its lease check raced (a second fence).
 */
export class NatsCheckpointStore implements CheckpointStore {
  readonly #revisions = new Map<string, number>();

  private constructor(
    readonly kv: KV,
    private readonly bucket: string,
    private readonly bus: Pick<Bus, "publishToStream"> | undefined,
  ) {}

  static bucketName(cluster: string): string {
    return `kova_${cluster}_checkpoints`;
  }

  /**
   * Opens the bucket, creating it if needed.
   * @throws JetStream errors when JetStream is unavailable or the bucket exists with other settings
   */
  static async open(opts: NatsCheckpointStoreOptions): Promise<NatsCheckpointStore> {
    const bucket = NatsCheckpointStore.bucketName(opts.cluster);
    const kv = await openOrCreateBucket(opts.js, bucket, {
      history: 1,
      replicas: opts.replicas ?? 1,
    });
    return new NatsCheckpointStore(kv, bucket, opts.bus);
  }

  async load(actorId: string): Promise<Checkpoint | undefined> {
    const entry = await this.kv.get(actorId);
    if (entry === null || entry.operation !== "PUT") {
      if (entry === null) this.#revisions.delete(actorId);
      else this.#revisions.set(actorId, entry.revision);
      return undefined;
    }
    this.#revisions.set(actorId, entry.revision);
    return readCheckpoint(`checkpoint of actor ${actorId} in NATS KV`, entry.json<Checkpoint>());
  }

  async save(actorId: string, cp: Checkpoint): Promise<void> {
    const data = enc.encode(checkpointJson(cp));
    const known = this.#revisions.get(actorId);
    try {
      const rev = known === undefined ? await this.kv.create(actorId, data) : await this.#update(actorId, data, known);
      this.#revisions.set(actorId, rev);
    } catch (err) {
      if (isWrongLastSequence(err)) {
        this.#revisions.delete(actorId);
        throw new CheckpointConflictError(actorId, err);
      }
      throw err;
    }
  }

  /** `kv.update(actorId, data, known)`: a publish to the key's subject expecting `known` as its last revision. */
  async #update(actorId: string, data: Uint8Array, known: number): Promise<number> {
    if (!this.bus) return this.kv.update(actorId, data, known);
    const h = natsHeaders();
    h.set("Nats-Expected-Last-Subject-Sequence", String(known));
    return (await this.bus.publishToStream(`$KV.${this.bucket}.${actorId}`, data, { headers: h, timeoutMs: SAVE_TIMEOUT_MS })).seq;
  }

  forget(actorId: string): void {
    this.#revisions.delete(actorId);
  }

  /** Removes an actor's checkpoint (a deleted actor). */
  async delete(actorId: string): Promise<void> {
    await this.kv.delete(actorId);
    this.#revisions.delete(actorId);
  }
}
