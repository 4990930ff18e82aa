import type { NatsConnection } from "@nats-io/transport-node";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import type { Logger } from "../core/logger.js";

/**
 * The cluster's shared state lives in three small KV buckets (nodes, agents, leases).
 * Each node keeps a local mirror of a bucket, fed by one KV watch, so placement can
 * reason over thousands of actors without one request per actor; writes still go to
 * the server with compare-and-set where ownership matters.
 */
export interface MirrorEntry<T> {
  value: T;
  revision: number;
  /** Server time the entry was written. */
  created: Date;
}

export type MirrorListener<T> = (key: string, entry: MirrorEntry<T> | undefined) => void;

/**
 * Opens (creating when missing) a KV bucket with one value of history per key.
 * `replicas` must match the NATS cluster size for the bucket to survive a server loss.
 */
export async function openBucket(nc: NatsConnection, name: string, replicas = 1): Promise<KV> {
  return new Kvm(nc).create(name, { history: 1, replicas, storage: "file" });
}

/**
 * Turns a stored value into a record, or throws (an UnsupportedFormatError for a value a
 * newer Kova wrote). A value that does not decode is left out of the mirror: every write
 * that matters is a compare-and-set against the server, so a node that cannot read an
 * entry can never overwrite it by mistake.
 */
export type MirrorDecoder<T> = (key: string, value: unknown) => T;

export class KvMirror<T> {
  private readonly map = new Map<string, MirrorEntry<T>>();
  private readonly listeners = new Set<MirrorListener<T>>();
  private stopWatch: (() => void) | undefined;

  private constructor(
    readonly kv: KV,
    private readonly logger: Logger,
    private readonly decode: MirrorDecoder<T>,
  ) {}

  /** Starts watching and resolves once the mirror holds every key that existed at start. */
  static async start<T>(kv: KV, logger: Logger, decode: MirrorDecoder<T> = (_k, v) => v as T): Promise<KvMirror<T>> {
    const mirror = new KvMirror<T>(kv, logger, decode);
    await mirror.watch();
    return mirror;
  }

  private async watch(): Promise<void> {
    const status = await this.kv.status();
    // Caught up once the watch has delivered the bucket's last write as of now (or
    // anything newer), or reports nothing pending. The revision test matters on a busy
    // bucket (heartbeats), where a delivery with zero pending can take a while.
    const lastSeq = status.streamInfo.state.last_seq;
    let markReady!: () => void;
    const ready = new Promise<void>((resolve) => (markReady = resolve));
    if (status.values === 0) markReady();
    const iter = await this.kv.watch();
    this.stopWatch = () => iter.stop();
    let sawIdle = false;
    void (async () => {
      for await (const e of iter) {
        this.apply(e);
        if (e.revision >= lastSeq) markReady();
        if (e.delta === 0) sawIdle = true;
      }
    })().catch((err: unknown) => this.logger.error({ err, bucket: status.bucket }, "kv watch ended"));
    // The last write as of start may have been removed meanwhile (a purge, a limit):
    // then "nothing pending" for a few seconds is the best evidence of being caught up.
    const fallback = setInterval(() => {
      if (sawIdle) markReady();
    }, 3000);
    await ready;
    clearInterval(fallback);
  }

  private apply(e: KvEntry): void {
    if (e.operation !== "PUT") {
      this.map.delete(e.key);
      for (const l of this.listeners) l(e.key, undefined);
      return;
    }
    let value: T;
    try {
      value = this.decode(e.key, e.json<unknown>());
    } catch (err) {
      this.logger.error({ err, key: e.key, bucket: e.bucket }, "ignoring a KV value this node cannot read");
      this.map.delete(e.key);
      return;
    }
    const entry: MirrorEntry<T> = { value, revision: e.revision, created: e.created };
    const previous = this.map.get(e.key);
    // A CAS write we made ourselves may already be recorded with its revision (see note()).
    if (previous && previous.revision > entry.revision) return;
    this.map.set(e.key, entry);
    for (const l of this.listeners) l(e.key, entry);
  }

  /**
   * Records a write this node just made, so its own next CAS does not wait for the
   * watch to catch up. The watch later delivers the same revision (or a newer one).
   */
  note(key: string, value: T, revision: number): void {
    const previous = this.map.get(key);
    if (previous && previous.revision >= revision) return;
    const entry = { value, revision, created: new Date() };
    this.map.set(key, entry);
    for (const l of this.listeners) l(key, entry);
  }

  get(key: string): MirrorEntry<T> | undefined {
    return this.map.get(key);
  }

  entries(): IterableIterator<[string, MirrorEntry<T>]> {
    return this.map.entries();
  }

  get size(): number {
    return this.map.size;
  }

  onChange(listener: MirrorListener<T>): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  stop(): void {
    this.stopWatch?.();
    this.listeners.clear();
  }
}

export function encodeJson(value: unknown): string {
  return JSON.stringify(value);
}
