import type { NatsConnection } from "@nats-io/transport-node";
import { isKovaError, type Logger, componentLogger } from "../core/index.js";
import { AGENT_RECORD_FORMAT, AGENT_RECORD_VERSION, BusErrorCode, KvStore, type AgentRecord, type StoredRecord } from "../bus/index.js";
import { FenceConflictError } from "./errors.js";
import { KvMirror, type MirrorEntry, type MirrorTiming } from "./kv-mirror.js";

// The record's format lives with the bus, so that every reader of the bucket checks it.
export { AGENT_RECORD_VERSION, AGENT_RECORD_FORMAT, type AgentRecord } from "../bus/index.js";

/**
 * The agents registry, KV `kova_<cluster>_agents`: actor id → where it runs, its
 * lifecycle state and capabilities. It is also the cluster's list of actors that
 * should exist: config and `kova spawn` create entries, placement hosts every entry
 * whose `desired` is not `killed`. `nats kv watch kova_<cluster>_agents` shows it live.
 */
export class AgentRegistry {
  /**
   * Ids the mirror shows registered and not killed, kept with every change of the mirror:
   * an admission counts them (liveCount) once per spawn or activation, and a walk of the
   * whole list each time made a burst of 5,000 activations quadratic.
   */
  private readonly live = new Set<string>();

  private constructor(
    readonly store: KvStore<AgentRecord>,
    private readonly mirror: KvMirror<AgentRecord>,
    private readonly logger: Logger,
  ) {
    // Read and subscribed in one synchronous step: no change falls in between.
    for (const [id, e] of mirror.entries()) if (e.value.desired !== "killed") this.live.add(id);
    mirror.onChange((id, e) => {
      if (e && e.value.desired !== "killed") this.live.add(id);
      else this.live.delete(id);
    });
  }

  /** @throws when the bucket cannot be opened */
  static async open(opts: { nc: NatsConnection; cluster: string; replicas?: number; logger: Logger; timing?: MirrorTiming }): Promise<AgentRegistry> {
    const store = await KvStore.open(opts.nc, opts.cluster, "agents", AGENT_RECORD_FORMAT, { replicas: opts.replicas });
    const logger = componentLogger(opts.logger, "registry");
    const mirror = await KvMirror.start(store, logger, { nc: opts.nc, ...opts.timing });
    return new AgentRegistry(store, mirror, logger);
  }

  /** Whether the registry mirror is current (see KvMirror.healthy). */
  healthy(): boolean {
    return this.mirror.healthy();
  }

  onHealth(listener: (healthy: boolean) => void): () => void {
    return this.mirror.onHealth(listener);
  }

  get(id: string): AgentRecord | undefined {
    return this.mirror.get(id)?.value;
  }

  /** The last bucket revision the mirror's watch applied (a fence for declare). */
  watchedRevision(): number {
    return this.mirror.watchedRevision;
  }

  /** Actors registered and not killed, as the mirror shows them (O(1)). */
  liveCount(): number {
    return this.live.size;
  }

  list(): AgentRecord[] {
    return [...this.mirror.entries()].map(([, e]) => e.value);
  }

  /** Calls `fn` with every record the mirror holds, without copying them into a list (a placement pass visits them all). */
  forEach(fn: (record: AgentRecord) => void): void {
    for (const e of this.mirror.values()) fn(e.value);
  }

  ids(): string[] {
    return [...this.mirror.entries()].map(([id]) => id);
  }

  onChange(listener: (id: string, entry: MirrorEntry<AgentRecord> | undefined) => void): () => void {
    return this.mirror.onChange(listener);
  }

  /**
   * Declares an actor (config or spawn). An existing entry is kept as it is, so a
   * restart never resets state or revives an actor that was killed.
   * @returns true when the entry was created now
   */
  async declare(spec: { id: string; type: string; capabilities?: string[]; template?: string }, opts: { fence?: number } = {}): Promise<boolean> {
    if (this.mirror.get(spec.id)) return false;
    const record: AgentRecord = {
      v: AGENT_RECORD_VERSION,
      id: spec.id,
      type: spec.type,
      node: null,
      state: "Created",
      capabilities: spec.capabilities ?? [],
      desired: "running",
      updatedAt: Date.now(),
      ...(spec.template ? { template: spec.template } : {}),
    };
    if (opts.fence !== undefined) return this.declareFenced(spec.id, record, opts.fence);
    const revision = await this.store.create(spec.id, record);
    if (revision === undefined) {
      await this.adoptExisting(spec.id);
      return false;
    }
    this.mirror.note(spec.id, record, revision);
    return true;
  }

  /**
   * Writes a new entry only if the bucket's last revision is still `fence`: then nothing
   * happened since the mirror applied it, so the mirror's view (no entry for this id, the
   * count an admission was judged on) was exact when the entry landed. No per-key check
   * is needed on top: at `fence` the key had no entry, or a removed one (a passivated
   * instance coming back), which a plain create would trip over.
   * @throws FenceConflictError when another write came first
   */
  private async declareFenced(id: string, record: AgentRecord, fence: number): Promise<boolean> {
    const revision = await this.store.putFenced(id, record, fence);
    if (revision === undefined) throw new FenceConflictError(id, fence);
    this.mirror.note(id, record, revision);
    return true;
  }

  /**
   * The entry exists on the server although the mirror did not show it: another node's
   * declaration in flight to this node's watch, or one the mirror lost (docs/cluster.md:
   * passivation's KV purges made watches skip entries on nats-server < 2.10.11, and a
   * removal's `forget` dropped a newer declaration the watch had delivered first; the
   * instance then stayed registered and unplaced, since its owner never saw it). Both are
   * fixed; taking the server's entry here still heals any such miss at the next activation
   * attempt (the A2A sweep makes one every activation_sweep_ms while messages wait).
   */
  private async adoptExisting(id: string): Promise<void> {
    let e: StoredRecord<AgentRecord> | undefined;
    try {
      e = await this.store.get(id);
    } catch (err) {
      this.logger.debug({ err, id }, "registry entry not readable here; left out of the mirror");
      return;
    }
    if (!e || (this.mirror.get(id)?.revision ?? 0) >= e.revision) return;
    if (this.mirror.watchedRevision > e.revision) {
      this.logger.warn({ id, revision: e.revision, watched: this.mirror.watchedRevision }, "registry watch missed an entry; taken from the server");
    }
    this.mirror.note(id, e.value, e.revision);
  }

  /**
   * Read-modify-write with compare-and-set (the mirror's entry first, then the server's),
   * retried on conflict. `change` returns the new record, or undefined to leave the entry
   * as it is.
   * @returns the entry after the call; undefined when there is none or the conflicts never ended
   */
  async update(id: string, change: (current: AgentRecord) => AgentRecord | undefined): Promise<AgentRecord | undefined> {
    const out = await this.change(id, "update", (cur) => {
      const next = cur && change(cur.value);
      return next ? { ...next, v: AGENT_RECORD_VERSION, updatedAt: Date.now() } : undefined;
    });
    if (out) this.mirror.note(id, out.value, out.revision);
    return out?.value;
  }

  /**
   * Removes an entry (a passivated instance) by compare-and-set, retried on conflict while
   * `mayRemove` still agrees with the current record.
   * @returns true when this call removed it
   */
  async remove(id: string, mayRemove: (current: AgentRecord) => boolean): Promise<boolean> {
    let removed: number | undefined;
    await this.change(id, "removal", (cur) => {
      removed = cur && mayRemove(cur.value) ? cur.revision : undefined;
      return removed === undefined ? undefined : null;
    });
    if (removed === undefined) return false;
    this.mirror.forget(id, removed);
    return true;
  }

  /** KvStore.change from the mirror's entry, 20 tries; a change whose conflicts never end is logged and given up. */
  private async change(
    id: string,
    what: string,
    next: (current: StoredRecord<AgentRecord> | undefined) => AgentRecord | null | undefined,
  ): Promise<StoredRecord<AgentRecord> | undefined> {
    try {
      return await this.store.change(id, next, { attempts: 20, first: this.mirror.get(id) });
    } catch (err) {
      if (!isKovaError(err, BusErrorCode.KV_CONFLICT)) throw err;
      this.logger.warn({ id }, `registry ${what} kept conflicting; giving up this change`);
      return undefined;
    }
  }

  stop(): void {
    this.mirror.stop();
  }
}
