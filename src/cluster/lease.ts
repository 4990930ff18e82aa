import type { NatsConnection } from "@nats-io/transport-node";
import { LeaseLostError } from "../actors/index.js";
import { type Logger, componentLogger, recordFormat } from "../core/index.js";
import { KvStore } from "../bus/index.js";
import { KvMirror, type MirrorEntry, type MirrorTiming } from "./kv-mirror.js";

/**
 * One lease per actor in KV `kova_<cluster>_leases`, changed only by compare-and-set
 * (create when absent, update with the revision last read), so two nodes racing for an
 * actor cannot both win. A lease is not renewed key by key: it is valid while its
 * holder's heartbeat in the nodes bucket is fresh, so one heartbeat renews every lease
 * a node holds (2,000 actors cost one write per interval, not 2,000). The revision of
 * the lease entry is the fencing token.
 */
export interface LeaseRecord {
  /** Format version (LEASE_RECORD_VERSION). */
  v?: number;
  /** Holder node id, or null when released. */
  node: string | null;
  /** Holder's incarnation (process start), so a restarted node knows its old leases. */
  incarnation: string | null;
  at: number;
  /** Why the last holder released it (e.g. `rebalance`, `shutdown`, `killed`). */
  reason?: string;
}

export const LEASE_RECORD_VERSION = 1;

export const LEASE_RECORD_FORMAT = recordFormat<LeaseRecord>({
  describe: (actorId) => `lease of actor ${actorId}`,
  version: LEASE_RECORD_VERSION,
  readable: [1],
});

export class LeaseTable {
  private constructor(
    readonly store: KvStore<LeaseRecord>,
    private readonly mirror: KvMirror<LeaseRecord>,
    private readonly nodeId: string,
    private readonly incarnation: string,
  ) {}

  /** @throws when the bucket cannot be opened */
  static async open(opts: {
    nc: NatsConnection;
    cluster: string;
    nodeId: string;
    incarnation: string;
    replicas?: number;
    logger: Logger;
    /** How the lease mirror checks its watch (default: a 1 s heartbeat's). */
    timing?: MirrorTiming;
  }): Promise<LeaseTable> {
    const store = await KvStore.open(opts.nc, opts.cluster, "leases", LEASE_RECORD_FORMAT, { replicas: opts.replicas });
    const mirror = await KvMirror.start(store, componentLogger(opts.logger, "lease"), { nc: opts.nc, ...opts.timing });
    return new LeaseTable(store, mirror, opts.nodeId, opts.incarnation);
  }

  get(actorId: string): MirrorEntry<LeaseRecord> | undefined {
    return this.mirror.get(actorId);
  }

  /**
   * True when the mirror says this very process holds the lease, and the mirror is
   * current (see {@link healthy}): a frozen view must not vouch for a lease.
   */
  holds(actorId: string): boolean {
    if (!this.mirror.healthy()) return false;
    const e = this.mirror.get(actorId);
    return e?.value.node === this.nodeId && e.value.incarnation === this.incarnation;
  }

  /**
   * Whether the lease mirror is current: its watch runs and nothing says it is behind
   * (no restart, reconnect or process freeze since it was last checked against the
   * server). While it is not, `holds()` is false for every actor.
   */
  healthy(): boolean {
    return this.mirror.healthy();
  }

  /** Resolves true once the lease mirror is healthy, false after `timeoutMs`. */
  whenHealthy(timeoutMs: number): Promise<boolean> {
    return this.mirror.whenHealthy(timeoutMs);
  }

  onHealth(listener: (healthy: boolean) => void): () => void {
    return this.mirror.onHealth(listener);
  }

  /** Actor ids whose lease, as last seen, names this very process (whatever the mirror's health). */
  heldHere(): string[] {
    return this.heldBy(this.nodeId, this.incarnation);
  }

  /** Actor ids whose lease names `nodeId` (any incarnation, unless one is given). */
  heldBy(nodeId: string, incarnation?: string): string[] {
    const out: string[] = [];
    for (const [id, e] of this.mirror.entries())
      if (e.value.node === nodeId && (incarnation === undefined || e.value.incarnation === incarnation)) out.push(id);
    return out;
  }

  entries(): IterableIterator<[string, MirrorEntry<LeaseRecord>]> {
    return this.mirror.entries();
  }

  onChange(listener: (actorId: string, entry: MirrorEntry<LeaseRecord> | undefined) => void): () => void {
    return this.mirror.onChange(listener);
  }

  /**
   * Takes the lease if it is free or `mayTake(current)` allows it, by compare-and-set
   * against the revision in the mirror. Returns false when another node won the race
   * (the mirror catches up through the watch).
   */
  async acquire(actorId: string, mayTake: (current: LeaseRecord) => boolean): Promise<boolean> {
    const current = this.mirror.get(actorId);
    if (current && current.value.node !== null && !mayTake(current.value)) return false;
    const record: LeaseRecord = { v: LEASE_RECORD_VERSION, node: this.nodeId, incarnation: this.incarnation, at: Date.now() };
    const revision = current ? await this.store.update(actorId, record, current.revision) : await this.store.create(actorId, record);
    if (revision === undefined) return false;
    this.mirror.note(actorId, record, revision);
    return true;
  }

  /**
   * Gives the lease up (CAS against our revision), so the next owner can take it at once
   * instead of waiting for staleness. Returns false when it was not ours any more.
   */
  async release(actorId: string, reason: string, opts: { anyIncarnation?: boolean } = {}): Promise<boolean> {
    const current = this.mirror.get(actorId);
    if (!current || current.value.node !== this.nodeId) return false;
    // anyIncarnation: a restarted node frees the leases its previous life left behind.
    if (!opts.anyIncarnation && current.value.incarnation !== this.incarnation) return false;
    const record: LeaseRecord = { v: LEASE_RECORD_VERSION, node: null, incarnation: null, at: Date.now(), reason };
    const revision = await this.store.update(actorId, record, current.revision);
    if (revision === undefined) return false;
    this.mirror.note(actorId, record, revision);
    return true;
  }

  /**
   * Deletes the lease of an actor that stops existing here for good (a passivated
   * instance), CAS against our revision, so that the lease table (and every node's mirror
   * of it) holds active actors only. Returns false when it was not ours any more.
   */
  async remove(actorId: string): Promise<boolean> {
    const current = this.mirror.get(actorId);
    if (!current || current.value.node !== this.nodeId || current.value.incarnation !== this.incarnation) return false;
    if (!(await this.store.delete(actorId, current.revision))) return false;
    this.mirror.forget(actorId, current.revision);
    return true;
  }

  /**
   * Reads the lease from the server (not the mirror) and throws unless this process
   * holds it: the authoritative check used before recovery decisions.
   * @throws LeaseLostError
   */
  async verify(actorId: string): Promise<void> {
    const value = (await this.store.get(actorId))?.value;
    if (value?.node !== this.nodeId || value.incarnation !== this.incarnation) {
      throw new LeaseLostError(actorId, { data: { holder: value?.node ?? null } });
    }
  }

  stop(): void {
    this.mirror.stop();
  }
}
