import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { A2AEnvelope, Bus } from "../bus/index.js";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import type { WireError } from "../core/errors.js";
import { CheckpointConflictError } from "./errors.js";
import { checkFormatVersion } from "../core/format-version.js";
import { isWrongLastSequence } from "../bus/nats-errors.js";
import { CorruptProcessedIdsError, packIds, unpackIds } from "./processed-ids.js";

/**
 * Format version of a checkpoint; old versions keep loading. v2: `processed` is packed
 * (processed-ids.ts), base64 in the JSON on NATS, bytes in the WAL's local copy; v1 had
 * an array of strings. v3: the checkpoint may carry `owed` replies. A build that reads only
 * 1 and 2 would ignore them and lose those replies, so it must refuse such a checkpoint;
 * only a checkpoint that owes a reply is written as 3 (`checkpointVersion`), every other
 * one stays 2, which the build before 3 still reads (a rolling upgrade keeps working).
 */
export const CHECKPOINT_VERSION = 3;
/** The version of a checkpoint that owes no reply. */
const UNOWING_VERSION = 2;
/** Checkpoint versions this build reads. */
export const CHECKPOINT_READABLE: readonly number[] = [1, 2, 3];
/** How many handled envelope ids a checkpoint keeps for deduplication by default (`[checkpoint] processed_window`). */
export const PROCESSED_LIMIT = 1000;

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
}

/**
 * A checkpoint read from NATS or the local WAL, with fields older versions lacked filled in.
 * @throws UnsupportedFormatError for a checkpoint of a newer format version
 */
export function readCheckpoint(what: string, cp: Checkpoint): Checkpoint {
  const v = checkFormatVersion(what, cp.v, CHECKPOINT_READABLE);
  const { owed, ...rest } = cp;
  const valid = Array.isArray(owed) ? owed.filter(isOwedReply) : [];
  return { ...rest, processed: readProcessed(what, v, cp.processed as unknown), revision: cp.revision ?? 0, ...(valid.length ? { owed: valid } : {}) };
}

/** The version a checkpoint is written as: 3 only when it owes a reply (see CHECKPOINT_VERSION). */
export function checkpointVersion(cp: Pick<Checkpoint, "owed">): number {
  return cp.owed?.length ? CHECKPOINT_VERSION : UNOWING_VERSION;
}

// An entry without the id it answers or an inbox to send to cannot be sent: it is not taken.
function isOwedReply(r: unknown): r is OwedReply {
  const o = r as Partial<OwedReply> | null;
  return typeof o === "object" && o !== null && typeof o.for === "string" && typeof o.asked?.id === "string" && typeof o.asked.replyTo === "string";
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
  return JSON.stringify({ ...cp, v: checkpointVersion(cp), processed: packIds(cp.processed).toString("base64") });
}

/** A checkpoint as the WAL's side table keeps it (msgpack): the processed ids packed as bytes. */
export function localCheckpoint(cp: Checkpoint): Omit<Checkpoint, "processed"> & { processed: Uint8Array } {
  return { ...cp, v: checkpointVersion(cp), processed: packIds(cp.processed) };
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
