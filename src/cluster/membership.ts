import type { NatsConnection } from "@nats-io/transport-node";
import { elapsedSince, markTime, type TimeMark, type Logger, recordFormat } from "../core/index.js";
import { KvStore } from "../bus/index.js";
import { KvMirror, type MirrorEntry, type MirrorTiming } from "./kv-mirror.js";

/** What a node writes into `kova_<cluster>_nodes` at every heartbeat. */
export interface NodeRecord {
  /** Format version (NODE_RECORD_VERSION); absent in heartbeats written before versioning. */
  v?: number;
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

export const NODE_RECORD_VERSION = 1;

/** A heartbeat; a node whose heartbeat this build cannot read is left out of its view (docs/protocol.md, Format versions). */
export const NODE_RECORD_FORMAT = recordFormat<NodeRecord>({
  describe: (id) => `heartbeat of node ${id}`,
  version: NODE_RECORD_VERSION,
  readable: [1],
});

/** A watched copy of the nodes bucket, for a process that reads heartbeats without joining (the gateway's web view). */
export async function mirrorNodes(nc: NatsConnection, cluster: string, logger: Logger): Promise<KvMirror<NodeRecord>> {
  return KvMirror.start(await KvStore.open(nc, cluster, "nodes", NODE_RECORD_FORMAT), logger.child({ bucket: "nodes" }), { nc });
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
  self: Omit<NodeRecord, "v" | "heartbeatAt" | "state" | "actors">;
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
  /** How the nodes mirror checks its watch (default: a 1 s heartbeat's). */
  timing?: MirrorTiming;
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
  /** When our last heartbeat write that counts started, on both clocks (see selfHealthy and counts). */
  private lastOkStart: TimeMark | undefined;
  /**
   * When an ack last arrived after our heartbeat had gone stale (see counts): writes
   * started before it do not make this node healthy again.
   */
  private staleAckAt: TimeMark | undefined;
  /** Our heartbeat writes whose echo the watch has not delivered yet: revision and start. */
  private readonly unechoed: Array<{ revision: number; start: number }> = [];
  /**
   * Start of our newest heartbeat write that the watch has delivered back. Every write to
   * the bucket before it was delivered before it (one stream, in order), so a peer's
   * silence up to this moment is real, not a frozen or broken watch of ours.
   */
  private freshUntil = 0;
  private readonly inFlight = new Set<Promise<void>>();
  private liveKey = "";
  private state: NodeRecord["state"] = "starting";

  private constructor(
    private readonly opts: MembershipOptions,
    readonly store: KvStore<NodeRecord>,
    private readonly mirror: KvMirror<NodeRecord>,
  ) {}

  /**
   * Opens the bucket, writes the first heartbeat and starts the loop.
   * @throws when the bucket cannot be opened or the first heartbeat fails
   */
  static async join(opts: MembershipOptions): Promise<Membership> {
    const store = await KvStore.open(opts.nc, opts.cluster, "nodes", NODE_RECORD_FORMAT, { replicas: opts.replicas });
    const mirror = await KvMirror.start(store, opts.logger.child({ bucket: "nodes" }), { nc: opts.nc, ...opts.timing });
    const m = new Membership(opts, store, mirror);
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
    const start = markTime();
    const record: NodeRecord = {
      v: NODE_RECORD_VERSION,
      ...this.opts.self,
      state,
      heartbeatAt: Date.now(),
      actors: this.opts.actorCount?.() ?? 0,
    };
    const revision = await this.store.put(this.opts.self.id, record);
    if (this.counts(start, markTime())) this.lastOkStart = start;
    this.unechoed.push({ revision, start: start.mono });
    this.unechoed.sort((a, b) => a.revision - b.revision);
    // A watch that never delivers is restarted by the mirror; meanwhile keep the newest.
    if (this.unechoed.length > 64) this.unechoed.shift();
    this.mirror.note(this.opts.self.id, record, revision);
    await this.prune();
    // Staleness of peers is re-evaluated on our own beat too: a silent peer changes no key.
    this.notifyIfChanged();
  }

  /**
   * Whether a heartbeat write that started at `start` and was acked at `ack` makes this
   * node healthy from `start` on. Peers count a node dead once they saw nothing from it for
   * the staleness window, so a write restores health only if no peer can have done so
   * before it landed:
   * - the ack came while we were still healthy by the write before it: no gap that long;
   * - or the write started after the first ack that came once we were stale
   *   (`staleAckAt`): the gap is over and was noticed, this node has been unhealthy since
   *   (its fence refused steps), and its lease view is re-checked as after any gap.
   * A write that started before or during a gap and was acked after it (a stalled link
   * that came back, a frozen process) does not count, although its start may be recent:
   * peers saw nothing during the gap and may have taken this node's actors over. After
   * any gap, health therefore comes back one heartbeat after the link does.
   */
  private counts(start: TimeMark, ack: TimeMark): boolean {
    const last = this.lastOkStart;
    if (last === undefined) return true;
    if (start.mono <= last.mono) return false;
    if (elapsedSince(last, ack) < this.healthyForMs()) return true;
    // Kept from the first stale ack of this gap on: moved with every late ack, it would
    // run ahead of writes that overlap (up to two are in flight) and none would count.
    const noticed = this.staleAckAt !== undefined && this.staleAckAt.mono > last.mono ? this.staleAckAt : undefined;
    if (noticed !== undefined && start.mono >= noticed.mono) return true;
    if (noticed === undefined) this.staleAckAt = ack;
    this.opts.logger.debug({ latencyMs: Math.round(ack.mono - start.mono) }, "a heartbeat acked after this node went stale does not count; the next one will");
    return false;
  }

  private healthyForMs(): number {
    return this.opts.staleAfterMs - this.opts.heartbeatMs;
  }

  /**
   * Advances `freshUntil` to the newest heartbeat of ours the watch delivered back.
   * After a gap longer than the staleness window (NATS down, this process frozen, the
   * watch stuck) this node could not see its peers, so silence it noted meanwhile says
   * nothing about them: every peer gets a fresh window instead of being declared dead
   * and having its actors taken on the way back.
   */
  private fresh(): number {
    const delivered = this.mirror.watchedRevision;
    let echoed: { revision: number; start: number } | undefined;
    while (this.unechoed.length > 0 && this.unechoed[0]!.revision <= delivered) echoed = this.unechoed.shift();
    if (echoed !== undefined && echoed.start > this.freshUntil) {
      if (this.freshUntil > 0 && echoed.start - this.freshUntil > this.opts.staleAfterMs) {
        const now = performance.now();
        for (const id of this.lastSeen.keys()) this.lastSeen.set(id, now);
        this.opts.logger.warn({ gapMs: Math.round(echoed.start - this.freshUntil) }, "the nodes view resumed after a gap; peers get a fresh staleness window");
      }
      this.freshUntil = echoed.start;
    }
    return this.freshUntil;
  }

  /** Deletes long-dead records, by compare-and-set so that a node that came back is kept. */
  private async prune(): Promise<void> {
    const after = this.opts.pruneAfterMs ?? Math.max(60_000, 10 * this.opts.staleAfterMs);
    const now = this.fresh();
    for (const [id, e] of this.mirror.entries()) {
      const seen = this.lastSeen.get(id);
      if (id === this.opts.self.id || seen === undefined || now - seen < after) continue;
      this.lastSeen.delete(id); // one attempt; a failed CAS means the node wrote again
      await this.store.delete(id, e.revision).catch(() => undefined);
      this.opts.logger.info({ nodeId: id, silentMs: Math.round(now - seen) }, "removed the record of a long-dead node");
    }
  }

  /**
   * True while this node's own heartbeats are fresh enough that no peer can have
   * declared it dead. A peer counts the staleness window from the moment it *saw* a
   * heartbeat, which is after the write started here, so no peer can act before
   * `lastOkStart + staleAfterMs`; one heartbeat interval is kept as margin. Used as the
   * fence: a node that was frozen or cut off that long runs no journaled step until a
   * heartbeat succeeds again (and, the fence's other rule, its lease view has been
   * re-checked against the server; see docs/cluster.md, Fencing).
   *
   * The interval is measured on the monotonic and the wall clock and the larger is
   * taken: the monotonic clock stops while the machine is suspended (a VM paused, a
   * laptop asleep), and a node that wakes after its peers took over must not take
   * that pause for no time at all (core/clock.ts, elapsedSince).
   */
  selfHealthy(): boolean {
    if (this.stopped || this.lastOkStart === undefined) return false;
    return elapsedSince(this.lastOkStart) < this.healthyForMs();
  }

  /** Whether the nodes mirror is current (see KvMirror.healthy). */
  viewHealthy(): boolean {
    return this.mirror.healthy();
  }

  onViewHealth(listener: (healthy: boolean) => void): () => void {
    return this.mirror.onHealth(listener);
  }

  /** Whether `nodeId` is live as seen from here (its own node is live while healthy). */
  isLive(nodeId: string): boolean {
    if (nodeId === this.opts.self.id) return !this.stopped;
    const entry = this.mirror.get(nodeId);
    if (!entry || entry.value.state === "leaving") return false;
    const seen = this.lastSeen.get(nodeId);
    if (seen === undefined) return false;
    // Silence counts only as far as this node demonstrably saw the bucket: up to the
    // start of its last heartbeat that its own watch delivered back. When a NATS leader
    // election stalls every write, or this node's watch is stuck on a dead server, nobody's
    // silence grows and nothing is taken over. This only ever delays a verdict.
    return Math.max(this.fresh(), seen) - seen < this.opts.staleAfterMs;
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
    return this.liveNodes().filter((id) => (id === this.opts.self.id ? this.state === "up" : this.mirror.get(id)?.value.state === "up"));
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
      await this.store.delete(this.opts.self.id);
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
