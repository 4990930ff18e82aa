import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { backoffMs, sleep } from "../core/clock.js";
import { type Logger, componentLogger } from "../core/logger.js";
import { AGENT_RECORD_VERSION, readAgentRecord, type AgentRecord } from "../bus/registry-record.js";
import { FenceConflictError } from "./errors.js";
import { isCasConflict } from "./lease.js";
import { KvMirror, encodeJson, openBucket, type MirrorEntry, type MirrorTiming } from "./kv-mirror.js";

// The record's format lives with the bus, so that every reader of the bucket checks it.
export { AGENT_RECORD_READABLE, AGENT_RECORD_VERSION, readAgentRecord, type AgentRecord } from "../bus/registry-record.js";

export function agentsBucket(cluster: string): string {
  return `kova_${cluster}_agents`;
}

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
    readonly kv: KV,
    private readonly mirror: KvMirror<AgentRecord>,
    private readonly logger: Logger,
    private readonly js: JetStreamClient,
    private readonly bucket: string,
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
    const bucket = agentsBucket(opts.cluster);
    const kv = await openBucket(opts.nc, bucket, opts.replicas);
    const logger = componentLogger(opts.logger, "registry");
    const mirror = await KvMirror.start<AgentRecord>(kv, logger, { decode: readAgentRecord, nc: opts.nc, ...opts.timing });
    return new AgentRegistry(kv, mirror, logger, jetstream(opts.nc), bucket);
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
    try {
      const revision = await this.kv.create(spec.id, encodeJson(record));
      this.mirror.note(spec.id, record, revision);
      return true;
    } catch (err) {
      if (!isCasConflict(err)) throw err;
      await this.adoptExisting(spec.id);
      return false;
    }
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
    try {
      const ack = await this.js.publish(`$KV.${this.bucket}.${id}`, encodeJson(record), { expect: { lastSequence: fence } });
      this.mirror.note(id, record, ack.seq);
      return true;
    } catch (err) {
      if (isCasConflict(err)) throw new FenceConflictError(id, fence, { cause: err });
      throw err;
    }
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
    const e = await this.kv.get(id).catch(() => null);
    if (e?.operation !== "PUT" || (this.mirror.get(id)?.revision ?? 0) >= e.revision) return;
    if (this.mirror.watchedRevision > e.revision) {
      this.logger.warn({ id, revision: e.revision, watched: this.mirror.watchedRevision }, "registry watch missed an entry; taken from the server");
    }
    try {
      this.mirror.note(id, readAgentRecord(id, e.json<unknown>()), e.revision);
    } catch (err) {
      this.logger.debug({ err, id }, "registry entry not readable here; left out of the mirror");
    }
  }

  /**
   * Read-modify-write with compare-and-set, retried on conflict. `change` returns the
   * new record, or undefined to leave the entry as it is.
   */
  async update(id: string, change: (current: AgentRecord) => AgentRecord | undefined): Promise<AgentRecord | undefined> {
    const out = await this.casLoop(id, "update", async (current) => {
      const next = change(current.value);
      if (!next) return { done: current.value };
      next.v = AGENT_RECORD_VERSION;
      next.updatedAt = Date.now();
      const revision = await this.kv.update(id, encodeJson(next), current.revision);
      this.mirror.note(id, next, revision);
      return { done: next };
    });
    return out ?? undefined;
  }

  /**
   * Removes an entry (a passivated instance) by compare-and-set, retried on conflict while
   * `mayRemove` still agrees with the current record.
   * @returns true when this call removed it
   */
  async remove(id: string, mayRemove: (current: AgentRecord) => boolean): Promise<boolean> {
    const out = await this.casLoop(id, "removal", async (current) => {
      if (!mayRemove(current.value)) return { done: false };
      // A delete, not a purge: in this one-value-per-key bucket both leave one marker, but a
      // purge makes other nodes' watches skip entries on nats-server < 2.10.11 (KvMirror).
      await this.kv.delete(id, { previousSeq: current.revision });
      this.mirror.forget(id, current.revision);
      return { done: true };
    });
    return out === true;
  }

  /**
   * Runs `attempt` against the current entry (the mirror's first, then the server's),
   * again after a CAS conflict, up to 20 times with backoff.
   * @returns what `attempt` settled on; null when the entry does not exist or the conflicts never ended
   */
  private async casLoop<R>(id: string, what: string, attempt: (current: MirrorEntry<AgentRecord>) => Promise<{ done: R }>): Promise<R | null> {
    for (let n = 0; n < 20; n++) {
      if (n > 0) await sleep(backoffMs(n, 5, 200));
      let current = this.mirror.get(id);
      if (n > 0 || !current) {
        const e = await this.kv.get(id);
        current = e && e.operation === "PUT" ? { value: readAgentRecord(id, e.json<unknown>()), revision: e.revision } : undefined;
      }
      if (!current) return null;
      try {
        return (await attempt(current)).done;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
    this.logger.warn({ id }, `registry ${what} kept conflicting; giving up this change`);
    return null;
  }

  stop(): void {
    this.mirror.stop();
  }
}
