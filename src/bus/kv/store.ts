import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry, type KvOptions } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Bus } from "../bus.js";
import { backoffMs, sleep, KovaError, KovaTimeoutError, type RecordFormat, type Logger } from "../../core/index.js";
import { BusErrorCode } from "../errors.js";
import { type KvListOptions, readKvEntries } from "./keys.js";
import { isStreamNameInUse, isSubjectOverlap, isWrongLastSequence } from "../nats-errors.js";
import { bucketName, type KvBucket } from "../subjects.js";

/** What a KV store is opened on: a connection, or a JetStream client (its timeouts apply). */
export type KvConnection = NatsConnection | JetStreamClient;

/** A record as stored: its value and the revision that is its compare-and-set token. */
export interface StoredRecord<T> {
  value: T;
  revision: number;
}

export interface KvStoreOptions {
  /** The error for a stored value that is not JSON at all (default KV_RECORD_CORRUPT naming the record). */
  unreadable?: (key: string, text: string) => Error;
  /** Replicas of a bucket this call creates (the NATS cluster's size for it to survive a server loss). Default 1. */
  replicas?: number;
  /** Values older than this are removed by the server (set when the bucket is created). */
  ttlMs?: number;
  /** For hot writes (a checkpoint per turn): puts and updates go through the bus's request mux, not the KV client, which builds an Error per call. */
  bus?: Pick<Bus, "publishToStream">;
}

/** How long a write through the bus waits for JetStream's ack (nats.js's default for KV writes). */
const BUS_WRITE_TIMEOUT_MS = 5_000;

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * A KV bucket of one kind of versioned record (docs/architecture.md, "KV buckets"): every
 * KV-backed store of Kova is one of these. Values are JSON with the format version `v`;
 * reading checks it (a record a newer Kova wrote is refused with UnsupportedFormatError,
 * never misread, and so never overwritten by a compare-and-set built on it); writing sets
 * it unless the record carries its own. One value per key is kept (history 1).
 */
export class KvStore<T> {
  private constructor(
    /** The bucket: mirrors and listings read it directly. */
    readonly kv: KV,
    readonly conn: KvConnection,
    /** The bucket's name, `kova_<cluster>_<role>`. */
    readonly name: string,
    readonly format: RecordFormat<T>,
    private readonly opts: KvStoreOptions = {},
  ) {}

  /**
   * Opens the cluster's bucket of that role, creating it when missing.
   * @param opts.unreadable the error for a stored value that is not JSON at all
   * @throws JetStream errors when JetStream is unavailable or the bucket cannot be created
   */
  static async open<T>(conn: KvConnection, cluster: string, bucket: KvBucket, format: RecordFormat<T>, opts: KvStoreOptions = {}): Promise<KvStore<T>> {
    const name = bucketName(cluster, bucket);
    const kv = await openOrCreateBucket(conn, name, {
      history: 1,
      replicas: opts.replicas ?? 1,
      storage: "file",
      ...(opts.ttlMs !== undefined ? { ttl: opts.ttlMs } : {}),
    });
    return new KvStore(kv, conn, name, format, opts);
  }

  /** The bucket bound without asking the server, for a reader that must not create it (the CLI): a missing one fails the first read. */
  static async bind<T>(conn: KvConnection, cluster: string, bucket: KvBucket, format: RecordFormat<T>): Promise<KvStore<T>> {
    const name = bucketName(cluster, bucket);
    return new KvStore(await new Kvm(conn).open(name), conn, name, format);
  }

  /** A stored value as this build reads it. @throws UnsupportedFormatError; the format's errors */
  decode(key: string, value: unknown): T {
    return this.format.decode(key, value);
  }

  /** A record as stored: JSON, with the format's version unless the record carries its own `v`. */
  encode(value: T): Uint8Array {
    return enc.encode(JSON.stringify({ v: this.format.version, ...(value as object) }));
  }

  /** A KV entry's record; undefined for a deletion marker. */
  entryOf(e: KvEntry): StoredRecord<T> | undefined {
    if (e.operation !== "PUT") return undefined;
    const text = dec.decode(e.value);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw (
        this.opts.unreadable?.(e.key, text) ??
        new KovaError(
          BusErrorCode.KV_RECORD_CORRUPT,
          `${this.format.describe(e.key)} in KV bucket ${this.name} is not JSON (${JSON.stringify(text.slice(0, 80))}): delete the key (nats kv del ${this.name} ${e.key}) or put a valid record`,
          { data: { bucket: this.name, key: e.key } },
        )
      );
    }
    return { value: this.decode(e.key, value), revision: e.revision };
  }

  /** @returns the key's record, undefined when it has none */
  async get(key: string): Promise<StoredRecord<T> | undefined> {
    const e = await this.kv.get(key);
    return e === null ? undefined : this.entryOf(e);
  }

  /** Writes the record whatever the key holds. @returns its revision */
  put(key: string, value: T): Promise<number> {
    return this.write(key, value);
  }

  /** Writes the record if the key has none (or a deletion marker). @returns its revision, undefined when the key has a record */
  create(key: string, value: T): Promise<number | undefined> {
    return casLost(this.kv.create(key, this.encode(value)));
  }

  /** Writes the record if the key is still at `revision`. @returns its revision, undefined when another write came first */
  update(key: string, value: T, revision: number): Promise<number | undefined> {
    return casLost(this.write(key, value, revision));
  }

  /** A put, or (`expected`) an update on that revision, through the bus when the store has one. */
  private async write(key: string, value: T, expected?: number): Promise<number> {
    const data = this.encode(value);
    const bus = this.opts.bus;
    if (!bus) return expected === undefined ? this.kv.put(key, data) : this.kv.update(key, data, expected);
    return (await bus.publishToStream(`$KV.${this.name}.${key}`, data, { expectLastSubjectSequence: expected, timeoutMs: BUS_WRITE_TIMEOUT_MS })).seq;
  }

  /** Writes the record only if nothing was written to the whole bucket since revision `fence`. @returns its revision, undefined when something was */
  async putFenced(key: string, value: T, fence: number): Promise<number | undefined> {
    const js = "jetstreamManager" in this.conn ? this.conn : jetstream(this.conn);
    return casLost(js.publish(`$KV.${this.name}.${key}`, this.encode(value), { expect: { lastSequence: fence } }).then((ack) => ack.seq));
  }

  /**
   * Deletes the key's record, if it is still at `revision` when one is given (a marker, not a
   * purge: a purge makes other nodes' watches skip entries on nats-server < 2.10.11).
   * @returns false when another write came first
   */
  async delete(key: string, revision?: number): Promise<boolean> {
    return (await casLost(this.kv.delete(key, revision === undefined ? undefined : { previousSeq: revision }).then(() => 0))) !== undefined;
  }

  /**
   * Read-modify-write by compare-and-set. `next` gets the key's record (undefined when it
   * has none) and returns the record to store, undefined to leave the key as it is, or null
   * to delete it; a write that loses to another writer reads again and calls `next` again,
   * up to `attempts` times (default 10) with a short backoff.
   * @param opts.first the record to try first instead of reading it (a mirror's copy)
   * @returns the key's record after the call (undefined when it has none)
   * @throws KovaError KV_CONFLICT (retryable) when every attempt lost; what `next` throws
   */
  async change(
    key: string,
    next: (current: StoredRecord<T> | undefined) => T | null | undefined | Promise<T | null | undefined>,
    opts: { attempts?: number; first?: StoredRecord<T> } = {},
  ): Promise<StoredRecord<T> | undefined> {
    const attempts = opts.attempts ?? 10;
    for (let n = 0; n < attempts; n++) {
      if (n > 0) await sleep(backoffMs(n, 5, 200));
      const current = n === 0 && opts.first ? opts.first : await this.get(key);
      const wanted = await next(current);
      if (wanted === undefined) return current;
      if (wanted === null) {
        if (!current || (await this.delete(key, current.revision))) return undefined;
        continue;
      }
      const revision = current ? await this.update(key, wanted, current.revision) : await this.create(key, wanted);
      if (revision !== undefined) return { value: wanted, revision };
    }
    throw new KovaError(BusErrorCode.KV_CONFLICT, `${this.format.describe(key)} kept changing under this update (${attempts} tries); try again`, {
      retryable: true,
      data: { bucket: this.name, key, attempts },
    });
  }

  /**
   * The records of the keys matching `opts.filter` (default all), in key order: a one-shot
   * listing by plain requests (bus readKvEntries), no consumer. With `skipUnreadable`, a
   * record this build cannot read is left out instead.
   * @throws BucketNotFoundError; KovaTimeoutError; UnsupportedFormatError for a record a newer Kova wrote
   */
  async entries(opts: KvListOptions & { skipUnreadable?: boolean } = {}): Promise<Map<string, StoredRecord<T>>> {
    const out = new Map<string, StoredRecord<T>>();
    for (const [key, e] of await readKvEntries(this.conn, this.name, opts)) {
      try {
        const r = this.entryOf(e);
        if (r) out.set(key, r);
      } catch (err) {
        if (!opts.skipUnreadable) throw err;
      }
    }
    return out;
  }

  /** The keys that hold a record, sorted; see {@link entries}. */
  async keys(opts: KvListOptions = {}): Promise<string[]> {
    return [...(await readKvEntries(this.conn, this.name, opts)).keys()];
  }

  /**
   * Runs `fn` holding a lock: the key, created by compare-and-set holding `{ owner, at }` (a
   * plain value, not one of the store's records), taken over when its holder has not
   * released it for `opts.staleMs` (it died), deleted at its own revision after `fn`.
   * @param opts.what names the lock in the timeout's message
   * @throws KovaTimeoutError when the lock stays taken for `opts.waitMs`; what `fn` throws
   */
  async locked<R>(key: string, owner: string, fn: () => Promise<R>, opts: { staleMs: number; waitMs: number; what: string }): Promise<R> {
    const deadline = Date.now() + opts.waitMs;
    const mine = () => enc.encode(JSON.stringify({ owner, at: Date.now() }));
    let revision: number | undefined;
    while (revision === undefined) {
      revision = await casLost(this.kv.create(key, mine()));
      if (revision !== undefined) break;
      const held = await this.kv.get(key);
      if (held && held.operation === "PUT" && Date.now() - held.json<{ at: number }>().at > opts.staleMs) {
        revision = await casLost(this.kv.update(key, mine(), held.revision));
      }
      if (revision === undefined) {
        if (Date.now() > deadline) throw new KovaTimeoutError(opts.what, opts.waitMs, { data: { holder: held?.string() } });
        await sleep(20 + Math.random() * 30);
      }
    }
    try {
      return await fn();
    } finally {
      await this.kv.delete(key, { previousSeq: revision }).catch(() => undefined);
    }
  }

  /**
   * Follows the keys matching `key`, every current record then each change (one this build
   * cannot read is logged and skipped); a watch that ends (its server went away) starts
   * again a second later. Resolves once the first watch runs.
   * @throws JetStream errors when the first watch cannot start
   */
  async follow(key: string, handlers: { onPut: (key: string, value: T) => void; onDelete?: (key: string) => void }, log: Logger): Promise<{ stop(): void }> {
    let stopped = false;
    let current: { stop(): void } | undefined;
    const start = async (): Promise<void> => {
      const iter = await this.kv.watch({ key });
      current = iter;
      if (stopped) iter.stop();
      void (async () => {
        try {
          for await (const e of iter) {
            let r: StoredRecord<T> | undefined;
            try {
              r = this.entryOf(e);
            } catch (err) {
              log.warn({ err, key: e.key }, "unreadable entry skipped");
              continue;
            }
            if (r) handlers.onPut(e.key, r.value);
            else handlers.onDelete?.(e.key);
          }
        } catch (err) {
          log.warn({ err }, "bucket watch ended");
        }
        if (!stopped) setTimeout(() => void start().catch((err: unknown) => log.warn({ err }, "bucket watch restart failed")), 1000).unref();
      })();
    };
    await start();
    return {
      stop: () => {
        stopped = true;
        current?.stop();
      },
    };
  }
}

/** A write's revision, or undefined when its compare-and-set lost. */
async function casLost(write: Promise<number>): Promise<number | undefined> {
  try {
    return await write;
  } catch (err) {
    if (isWrongLastSequence(err)) return undefined;
    throw err;
  }
}

/**
 * Opens a KV bucket, creating it when missing. Nodes that start together create the same
 * buckets at the same moment, and nats-server 2.9 registers a new stream only once its store
 * is set up: the loser of two concurrent creates then hears "subjects overlap with an
 * existing stream" (10065) — or "stream name already in use" (10058) — although the bucket
 * it wanted now exists. Such a loss is retried (the retry finds the bucket and opens it), so
 * a node does not exit at start because a peer was a few milliseconds faster (seen in
 * test/e2e/workflow-sigkill.test.ts: a node exited with that message about one start in 15
 * on a loaded machine).
 * @throws JetStream errors other than a lost creation race, or the race's error after 3 tries
 */
export async function openOrCreateBucket(conn: KvConnection, name: string, opts: Partial<KvOptions>): Promise<KV> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await new Kvm(conn).create(name, opts);
    } catch (err) {
      if (attempt >= 3 || !(isSubjectOverlap(err) || isStreamNameInUse(err))) throw err;
      await sleep(50 * attempt);
    }
  }
}
