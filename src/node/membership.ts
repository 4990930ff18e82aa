import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import type { Logger } from "../core/logger.js";
import { KvMirror, encodeJson, openBucket, type MirrorEntry } from "./kv-mirror.js";

/** What a node writes into `kova_<cluster>_nodes` at every heartbeat. */
export interface NodeRecord {
  id: string;
  /** Random per process start: tells a restarted node apart from its previous life. */
  incarnation: string;
  /**
   * `starting`: alive (its leases count) but not yet placing actors, so peers do not
   * hand actors to it; `up`: placing; `leaving`: a graceful stop is under way.
   */
  state: "starting" | "up" | "leaving";
  startedAt: number;
  heartbeatAt: number;
  version: string;
  /** Actors this node hosts (informational, for `kova nodes ls`). */
  actors: number;
  pid: number;
  host: string;
  /** Actor types this node can host; placement ranks only nodes that know an actor's type. */
  types?: string[];
}

export interface NodeView {
  record: NodeRecord;
  live: boolean;
  /** Milliseconds since this node last saw the record change. */
  silentMs: number;
}

export interface MembershipOptions {
  nc: NatsConnection;
  cluster: string;
  self: Omit<NodeRecord, "heartbeatAt" | "state" | "actors">;
  heartbeatMs: number;
  staleAfterMs: number;
  replicas?: number;
  logger: Logger;
  /** Called at each heartbeat for the informational fields. */
  actorCount?: () => number;
  /**
   * Records of nodes silent this long are deleted (default: 10 × staleAfterMs, at least
   * 60 s), so `kova nodes ls` does not list every node that ever ran.
   */
  pruneAfterMs?: number;
}

export function nodesBucket(cluster: string): string {
  return `kova_${cluster}_nodes`;
}

/**
 * Membership by heartbeats. nats-server 2.9 has neither per-key TTL nor expiry events,
 * so liveness is judged by each peer: a node is live while its record keeps changing.
 * Staleness is measured on the reader's own monotonic clock from the moment it saw the
 * last change, never by comparing wall clocks of two machines.
 */
export class Membership {
  private readonly lastSeen = new Map<string, number>();
  private readonly listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private lastOkStart = 0;
  /** When our last heartbeat write completed: the bucket was writable up to then. */
  private lastOkEnd = 0;
  private readonly inFlight = new Set<Promise<void>>();
  private liveKey = "";
  private state: NodeRecord["state"] = "starting";

  private constructor(
    private readonly opts: MembershipOptions,
    readonly kv: KV,
    private readonly mirror: KvMirror<NodeRecord>,
  ) {}

  /**
   * Opens the bucket, writes the first heartbeat and starts the loop.
   * @throws when the bucket cannot be opened or the first heartbeat fails
   */
  static async join(opts: MembershipOptions): Promise<Membership> {
    const kv = await openBucket(opts.nc, nodesBucket(opts.cluster), opts.replicas);
    const mirror = await KvMirror.start<NodeRecord>(kv, opts.logger.child({ bucket: "nodes" }));
    const m = new Membership(opts, kv, mirror);
    // Entries present at start count as just seen: a node that really is dead is found
    // out staleAfterMs later, and a live one is never mistaken for dead on our start.
    const now = performance.now();
    for (const [key] of mirror.entries()) m.lastSeen.set(key, now);
    mirror.onChange((key, entry) => m.onEntry(key, entry));
    await m.beat(m.state);
    m.schedule();
    return m;
  }

  get nodeId(): string {
    return this.opts.self.id;
  }

  get incarnation(): string {
    return this.opts.self.incarnation;
  }

  private onEntry(key: string, entry: MirrorEntry<NodeRecord> | undefined): void {
    if (entry && key === this.opts.self.id && entry.value.incarnation !== this.opts.self.incarnation && !this.stopped) {
      // Two processes with one node id would each take the other's leases for their own
      // previous life: say so loudly, it is a deployment error.
      this.opts.logger.error(
        { nodeId: key, otherPid: entry.value.pid, otherHost: entry.value.host },
        "another process is heartbeating with this node id: give every node its own [node] id / KOVA_NODE_ID",
      );
    }
    if (entry) this.lastSeen.set(key, performance.now());
    else this.lastSeen.delete(key);
    this.notifyIfChanged();
  }

  /**
   * Beats on a fixed cadence, up to two writes in flight: when the server is slow, writes
   * that land late still land about one interval apart, instead of each waiting for the
   * previous one and stretching the gaps until peers count this node dead.
   */
  private schedule(): void {
    if (this.stopped) return;
    this.timer = setInterval(() => {
      if (this.inFlight.size >= 2) return;
      const p: Promise<void> = this.beat(this.state)
        .catch((err: unknown) => this.opts.logger.warn({ err }, "heartbeat failed; peers will consider this node dead if it persists"))
        .finally(() => this.inFlight.delete(p));
      this.inFlight.add(p);
    }, this.opts.heartbeatMs);
    this.timer.unref();
  }


  private async beat(state: NodeRecord["state"]): Promise<void> {
    const start = performance.now();
    const record: NodeRecord = {
      ...this.opts.self,
      state,
      heartbeatAt: Date.now(),
      actors: this.opts.actorCount?.() ?? 0,
    };
    const revision = await this.kv.put(this.opts.self.id, encodeJson(record));
    if (this.lastOkStart > 0 && start - this.lastOkStart > this.opts.staleAfterMs) {
      // This node could not write (NATS down, process frozen), so it could not watch
      // either: silence it saw from peers meanwhile says nothing about them. Give every
      // peer a fresh window instead of taking over all their actors on the way back.
      const now = performance.now();
      for (const id of this.lastSeen.keys()) this.lastSeen.set(id, now);
      this.opts.logger.warn({ gapMs: Math.round(start - this.lastOkStart) }, "heartbeats resumed after a gap; peers get a fresh staleness window");
    }
    this.lastOkStart = Math.max(this.lastOkStart, start);
    this.lastOkEnd = performance.now();
    this.mirror.note(this.opts.self.id, record, revision);
    await this.prune();
    // Staleness of peers is re-evaluated on our own beat too: a silent peer changes no key.
    this.notifyIfChanged();
  }

  /** Deletes long-dead records, by compare-and-set so that a node that came back is kept. */
  private async prune(): Promise<void> {
    const after = this.opts.pruneAfterMs ?? Math.max(60_000, 10 * this.opts.staleAfterMs);
    const now = performance.now();
    for (const [id, e] of this.mirror.entries()) {
      const seen = this.lastSeen.get(id);
      if (id === this.opts.self.id || seen === undefined || now - seen < after) continue;
      this.lastSeen.delete(id); // one attempt; a failed CAS means the node wrote again
      await this.kv.delete(id, { previousSeq: e.revision }).catch(() => undefined);
      this.opts.logger.info({ nodeId: id, silentMs: Math.round(now - seen) }, "removed the record of a long-dead node");
    }
  }

  /**
   * True while this node's own heartbeats are fresh enough that no peer can have
   * declared it dead. A peer counts the staleness window from the moment it *saw* a
   * heartbeat, which is after the write started here, so no peer can act before
   * `lastOkStart + staleAfterMs`; one heartbeat interval is kept as margin. Used as the
   * fence: a node that was frozen or cut off that long runs no journaled step until a
   * heartbeat succeeds again (by then its lease mirror has caught up, see docs/cluster.md).
   */
  selfHealthy(): boolean {
    return !this.stopped && performance.now() - this.lastOkStart < this.opts.staleAfterMs - this.opts.heartbeatMs;
  }

  /** Whether `nodeId` is live as seen from here (its own node is live while healthy). */
  isLive(nodeId: string): boolean {
    if (nodeId === this.opts.self.id) return !this.stopped;
    const entry = this.mirror.get(nodeId);
    if (!entry || entry.value.state === "leaving") return false;
    const seen = this.lastSeen.get(nodeId);
    if (seen === undefined) return false;
    // Silence counts only while the bucket was demonstrably writable, i.e. up to our own
    // last successful write: when a NATS leader election stalls every heartbeat, nobody's
    // silence grows and nothing is taken over. This only ever delays a verdict.
    return Math.max(this.lastOkEnd, seen) - seen < this.opts.staleAfterMs;
  }

  /**
   * Announces that this node places actors now: peers start ranking it in rendezvous
   * hashing (and hand it its actors) from its next heartbeat on.
   */
  async markUp(): Promise<void> {
    this.state = "up";
    await this.beat("up");
  }

  /** Live nodes that place actors (state `up`), sorted; this node counts once it is up. */
  readyNodes(): string[] {
    return this.liveNodes().filter((id) =>
      id === this.opts.self.id ? this.state === "up" : this.mirror.get(id)?.value.state === "up",
    );
  }

  /** The live node ids, sorted; includes this node unless it is leaving. */
  liveNodes(): string[] {
    const out: string[] = [];
    for (const [id] of this.mirror.entries()) if (this.isLive(id)) out.push(id);
    if (!this.stopped && !out.includes(this.opts.self.id)) out.push(this.opts.self.id);
    return out.sort();
  }

  /** Whether `nodeId` can host actors of `type` (a record without a type list hosts any). */
  supports(nodeId: string, type: string): boolean {
    const types = nodeId === this.opts.self.id ? this.opts.self.types : this.mirror.get(nodeId)?.value.types;
    return types === undefined || types.includes(type);
  }

  record(nodeId: string): NodeRecord | undefined {
    return this.mirror.get(nodeId)?.value;
  }

  /** Every node record with its liveness, for `kova nodes ls`. */
  view(): NodeView[] {
    const now = performance.now();
    return [...this.mirror.entries()]
      .map(([id, e]) => ({ record: e.value, live: this.isLive(id), silentMs: Math.round(now - (this.lastSeen.get(id) ?? now)) }))
      .sort((a, b) => a.record.id.localeCompare(b.record.id));
  }

  /** Called when the live set changes (join, leave, staleness). */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private notifyIfChanged(): void {
    const key = `${this.liveNodes().join(",")}|${this.readyNodes().join(",")}`;
    if (key === this.liveKey) return;
    const before = this.liveKey;
    this.liveKey = key;
    this.opts.logger.info({ live: key, before }, "live nodes changed");
    for (const l of this.listeners) l();
  }

  /** Marks this node as leaving (peers stop counting it at once), then removes its record. */
  async leave(): Promise<void> {
    this.stopTimer();
    await Promise.all([...this.inFlight]);
    try {
      await this.beat("leaving");
      await this.kv.delete(this.opts.self.id);
    } finally {
      this.stop();
    }
  }

  private stopTimer(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
  }

  stop(): void {
    this.stopTimer();
    this.mirror.stop();
    this.listeners.clear();
  }
}
