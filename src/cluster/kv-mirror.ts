import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import { KvStore } from "../bus/index.js";
import { backoffMs, elapsedSince, markTime, sleep, type TimeMark, KovaTimeoutError, type Logger } from "../core/index.js";
import { WatchGapChecker } from "./kv-watch-gaps.js";

/**
 * The cluster's shared state lives in three small KV buckets (nodes, agents, leases).
 * Each node keeps a local mirror of a bucket, fed by one KV watch, so placement can
 * reason over thousands of actors without one request per actor; writes still go to
 * the server with compare-and-set where ownership matters.
 */
export interface MirrorEntry<T> {
  value: T;
  revision: number;
}

export type MirrorListener<T> = (key: string, entry: MirrorEntry<T> | undefined) => void;

/**
 * Turns a stored value into a record, or throws (an UnsupportedFormatError for a value a
 * newer Kova wrote). A value that does not decode is left out of the mirror: every write
 * that matters is a compare-and-set against the server, so a node that cannot read an
 * entry can never overwrite it by mistake.
 */
export type MirrorDecoder<T> = (key: string, value: unknown) => T;

/** How a mirror watches its watch; {@link mirrorTiming} derives it from the heartbeat. */
export type MirrorTiming = Pick<KvMirrorOptions<unknown>, "checkMs" | "stallMs" | "idleCheckMs">;

/**
 * Mirror checks scaled to the cluster's heartbeat: a stuck watch is found within about
 * three heartbeats, well inside the staleness window, and an idle bucket costs one
 * stream-info request per two heartbeats (at least a second apart).
 */
export function mirrorTiming(heartbeatMs: number): MirrorTiming {
  return { checkMs: Math.min(1000, heartbeatMs), stallMs: Math.max(1000, 3 * heartbeatMs), idleCheckMs: Math.max(1000, 2 * heartbeatMs) };
}

export interface KvMirrorOptions<T> {
  decode?: MirrorDecoder<T>;
  /**
   * The bucket's connection: the mirror's own watch and checks use it, and a reconnect
   * makes the mirror re-check that it is current.
   */
  nc: NatsConnection;
  /** How often the mirror checks its watch (default 1000 ms). */
  checkMs?: number;
  /**
   * A revision the server is known to hold (a write of ours, or the stream's last
   * sequence read by a check) that the watch has not delivered after this long means
   * the watch is stuck: it is restarted (default 3000 ms).
   */
  stallMs?: number;
  /** A watch that delivered nothing for this long is checked against the server (default 2000 ms). */
  idleCheckMs?: number;
  /** How long a (re)started watch may take to catch up before it is retried (default 30 s). */
  readyTimeoutMs?: number;
  /**
   * Timeout of the mirror's own JetStream requests (checks, watch restarts; default 2 s).
   * Short, because a request sent during a leader election gets no answer at all, and a
   * retry after the election is what brings the watch back.
   */
  requestTimeoutMs?: number;
}

/**
 * A local copy of one KV bucket that keeps itself current, or says that it is not.
 *
 * A KV watch is an ordered push consumer with one replica. When the server that holds
 * it dies (a NATS cluster losing a server), nats.js notices only after two missed
 * idle heartbeats (10-15 s for a KV watch) and the watch can also end for good (its
 * consumer never recreated); a mirror fed by it would answer from a frozen view, and
 * placement would decide from it: never seeing a lease it acquired by a write whose
 * reply was lost, or a release by a peer. So the mirror checks its watch itself:
 * every write this node makes (`note`) and, when the watch is idle, the stream's last
 * sequence tell it a revision the watch must deliver; one that does not come within
 * `stallMs` restarts the watch (with backoff) from a fresh snapshot. After a disconnect
 * or reconnect, or a gap in its own timer (the process was frozen or the machine
 * suspended), the mirror is unhealthy until a check against the server shows it current.
 *
 * A watch can also skip entries and go on: a KV purge (a rollup) on nats-server before
 * 2.10.11 moves every consumer of the bucket that has not yet delivered up to the purge
 * marker straight to it, past other keys' writes stored just before it, and later
 * revisions still arrive, so no revision check notices. Kova itself deletes instead of
 * purging, and against purges by anyone else (an operator, an older node) the mirror
 * verifies the gaps in what its watch delivers (`WatchGapChecker`); a watch that skipped
 * a message is resumed from before the gap.
 */
export class KvMirror<T> {
  private readonly map = new Map<string, MirrorEntry<T>>();
  /** Keys this node removed (`forget`) → the revision removed, until the watch passes it. */
  private readonly removed = new Map<string, number>();
  private readonly listeners = new Set<MirrorListener<T>>();
  private readonly healthListeners = new Set<(healthy: boolean) => void>();
  private readonly decode: MirrorDecoder<T>;
  private readonly checkMs: number;
  private readonly stallMs: number;
  private readonly idleCheckMs: number;
  private readonly readyTimeoutMs: number;
  /** A timer tick this late means the process did not run (frozen, suspended, starved). */
  private readonly gapMs: number;
  private stopWatch: (() => void) | undefined;
  /** The bucket's name, for logs (read at the first watch). */
  private bucket = "";
  private readonly gaps: WatchGapChecker;
  /** The watch skipped a message: the revision to resume it from. */
  private resumeFrom: number | undefined;
  /** Generation of the current watch; deliveries of a replaced one are ignored. */
  private gen = 0;
  /** Highest revision a watch delivered. */
  private applied = 0;
  /** A revision the server holds that the watch has not delivered yet, and since when. */
  private expected: { revision: number; since: TimeMark } | undefined;
  private watching = false;
  private restarting: Promise<void> | undefined;
  /** Set by a reconnect or a timer gap; cleared by a check that finds the mirror current. */
  private suspect = false;
  private suspectGen = 0;
  /** A check that found a suspect mirror behind: the suspicion ends when the watch delivers this. */
  private pendingClear: { revision: number; gen: number } | undefined;
  private checking = false;
  private lastTick: TimeMark = markTime();
  private lastDelivery: TimeMark = markTime();
  private lastCheck: TimeMark = markTime();
  private lastHealthy = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  private constructor(
    private readonly kv: KV,
    private readonly logger: Logger,
    jsm: JetStreamManager,
    opts: KvMirrorOptions<T>,
  ) {
    this.gaps = new WatchGapChecker(jsm, logger, {
      isCurrent: (gen) => gen === this.gen && !this.stopped,
      skipped: (from, detail) => this.skipped(from, detail),
      checkFailed: () => void this.restart("gap check failed"),
    });
    this.decode = opts.decode ?? ((_k, v) => v as T);
    this.checkMs = opts.checkMs ?? 1000;
    this.stallMs = opts.stallMs ?? 3000;
    this.idleCheckMs = opts.idleCheckMs ?? 2000;
    this.readyTimeoutMs = opts.readyTimeoutMs ?? 30_000;
    this.gapMs = Math.max(3 * this.checkMs, 2000);
  }

  /**
   * Starts watching and resolves once the mirror holds every key that existed at start.
   * @throws KovaTimeoutError when the watch does not catch up within `readyTimeoutMs`;
   *   NATS errors when the bucket cannot be read
   */
  static async start<T>(source: KV | KvStore<T>, logger: Logger, opts: KvMirrorOptions<T>): Promise<KvMirror<T>> {
    const timeout = opts.requestTimeoutMs ?? 2000;
    const kv = source instanceof KvStore ? source.kv : source;
    if (source instanceof KvStore) opts = { decode: (key, value) => source.decode(key, value), ...opts };
    const watchKv = await new Kvm(jetstream(opts.nc, { timeout })).open((await kv.status()).bucket);
    // No API check: the bucket's status was just read, so JetStream answers.
    const mirror = new KvMirror<T>(watchKv, logger, await jetstreamManager(opts.nc, { timeout, checkAPI: false }), opts);
    await mirror.watch();
    mirror.timer = setInterval(() => mirror.tick(), mirror.checkMs);
    mirror.timer.unref();
    mirror.followReconnects(opts.nc);
    // A gap check of the first watch found a skip while it caught up.
    if (mirror.resumeFrom !== undefined) await mirror.restart("skipped");
    mirror.notifyHealth();
    return mirror;
  }

  /** Highest revision the watch has delivered (writes noted by this node do not count). */
  get watchedRevision(): number {
    return this.applied;
  }

  /**
   * True while the watch runs and nothing says it is behind: no restart under way, no
   * reconnect or timer gap since the last check against the server, no known revision
   * overdue. A mirror that is not healthy may be missing changes of any age.
   */
  healthy(): boolean {
    if (this.stopped || !this.watching || this.suspect) return false;
    // Checked here too, not only by the timer: after a suspend, code that wakes before
    // the timer fires must not read the frozen view as current.
    if (elapsedSince(this.lastTick) > this.gapMs) {
      this.markSuspect("timer gap: the process was frozen or the machine suspended");
      return false;
    }
    return true;
  }

  /** Told when `healthy()` changes (checked on each delivery, check and restart). */
  onHealth(listener: (healthy: boolean) => void): () => void {
    this.healthListeners.add(listener);
    return () => this.healthListeners.delete(listener);
  }

  /**
   * Resolves true once the mirror is healthy, false after `timeoutMs`.
   */
  async whenHealthy(timeoutMs: number): Promise<boolean> {
    if (this.healthy()) return true;
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        off();
        resolve(this.healthy());
      }, timeoutMs);
      const off = this.onHealth((ok) => {
        if (!ok) return;
        clearTimeout(timer);
        off();
        resolve(true);
      });
    });
  }

  /**
   * One watch from a snapshot of the bucket, or resumed at revision `from`: resolves once
   * it has delivered the last write as of its start. Keys a snapshot no longer has
   * (removed while no watch ran) are dropped from the mirror.
   */
  private async watch(from?: number): Promise<void> {
    const gen = ++this.gen;
    const status = await this.kv.status();
    this.bucket = status.bucket;
    // Gaps are checked only where every stored message must be delivered: one value per key.
    const config = status.streamInfo.config;
    this.gaps.configure(config.name, config.subjects?.[0] ?? `$KV.${status.bucket}.>`, config.max_msgs_per_subject === 1);
    // Caught up once the watch has delivered the bucket's last write as of now (or
    // anything newer), or reports nothing pending. The revision test matters on a busy
    // bucket (heartbeats), where a delivery with zero pending can take a while.
    const lastSeq = status.values === 0 ? 0 : status.streamInfo.state.last_seq;
    let markReady!: () => void;
    const ready = new Promise<void>((resolve) => (markReady = resolve));
    if (lastSeq < (from ?? 1)) markReady();
    const iter = await this.kv.watch(from === undefined ? {} : { resumeFromRevision: from });
    this.stopWatch = () => iter.stop();
    const seen = new Set<string>();
    let sawIdle = false;
    let caughtUp = lastSeq < (from ?? 1);
    /** This watch's last delivered revision. */
    let last = (from ?? 1) - 1;
    void (async () => {
      for await (const e of iter) {
        if (gen !== this.gen) return;
        if (!caughtUp) seen.add(e.key);
        // Only past the bucket's end as of this watch's start: a purge stored after the
        // consumer was made lands it there, while before it a snapshot's deliveries have
        // gaps by design (one per overwritten value), which would cost a check each.
        if (e.revision > lastSeq && e.revision > last + 1) this.gaps.add(gen, last, e.revision);
        if (e.revision > last) last = e.revision;
        this.apply(e);
        if (e.revision >= lastSeq) markReady();
        if (e.delta === 0) sawIdle = true;
      }
      if (gen === this.gen && !this.stopped) this.watchEnded(new Error("the watch iterator finished"));
    })().catch((err: unknown) => {
      if (gen === this.gen && !this.stopped) this.watchEnded(err);
    });
    // The last write as of start may have been removed meanwhile (a purge, a limit):
    // then "nothing pending" for a few seconds is the best evidence of being caught up.
    const fallback = setInterval(
      () => {
        if (sawIdle) markReady();
      },
      Math.min(3000, this.stallMs),
    );
    let limit: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        ready,
        new Promise<never>((_, reject) => {
          limit = setTimeout(() => reject(new KovaTimeoutError(`KV watch of ${status.bucket} catching up`, this.readyTimeoutMs)), this.readyTimeoutMs);
        }),
      ]);
    } catch (err) {
      iter.stop();
      throw err;
    } finally {
      clearInterval(fallback);
      clearTimeout(limit);
    }
    caughtUp = true;
    if (this.applied < lastSeq) this.applied = lastSeq; // caught up by the idle rule
    if (this.expected && this.applied >= this.expected.revision) this.expected = undefined;
    if (from === undefined) {
      for (const [key, e] of this.map) {
        if (!seen.has(key) && e.revision <= lastSeq) {
          this.map.delete(key);
          this.emit(key, undefined);
        }
      }
    }
    this.watching = true;
    this.lastDelivery = markTime();
  }

  private watchEnded(err: unknown): void {
    this.logger.warn({ err, bucket: this.bucket }, "kv watch ended; restarting it");
    void this.restart("ended");
  }

  /**
   * Replaces the watch (stuck, ended, or found to have skipped a message), retrying with
   * backoff until one catches up. A `skipped` restart resumes at `resumeFrom`; the others
   * start from a snapshot, which covers any resume as well.
   */
  private restart(reason: string): Promise<void> {
    this.restarting ??= (async () => {
      this.watching = false;
      this.gen++; // deliveries of the old watch are ignored from now on
      this.stopWatch?.();
      this.notifyHealth();
      for (let attempt = 1; !this.stopped; attempt++) {
        const from = reason === "skipped" ? this.resumeFrom : undefined;
        this.resumeFrom = undefined;
        const tried = markTime();
        try {
          await this.watch(from);
          this.logger.info({ bucket: this.bucket, reason, attempt, ...(from === undefined ? {} : { from }) }, "kv watch restarted");
          break;
        } catch (err) {
          if (from !== undefined) this.resumeAt(from);
          this.logger.warn({ err, bucket: this.bucket, reason, attempt }, "kv watch could not be restarted yet");
          // An attempt that timed out has waited already: while a dead server still gets
          // the new consumer (nats-server places it there until it marks the peer offline,
          // several seconds after a SIGKILL), a full backoff on top of each 2 s timeout
          // stretched the recovery past 15 s on a loaded machine.
          await sleep(Math.max(0, backoffMs(attempt, 250, 5000) - elapsedSince(tried)));
        }
      }
    })().finally(() => {
      this.restarting = undefined;
      // The new watch itself skipped a message while it caught up: resume it.
      if (this.resumeFrom !== undefined && !this.stopped) void this.restart("skipped");
      this.notifyHealth();
    });
    return this.restarting;
  }

  private skipped(from: number, detail: string): void {
    this.logger.warn(
      { bucket: this.bucket, from, detail },
      "the kv watch skipped entries (a KV purge does that on nats-server before 2.10.11); resuming it from before them",
    );
    this.resumeAt(from);
    // While the first watch catches up, start() resumes it; during a restart, its end does.
    if (this.watching) void this.restart("skipped");
  }

  /** The next `skipped` restart resumes at `from` or earlier. */
  private resumeAt(from: number): void {
    this.resumeFrom = Math.min(from, this.resumeFrom ?? from);
  }

  private tick(): void {
    if (this.stopped) return;
    if (elapsedSince(this.lastTick) > this.gapMs) this.markSuspect("timer gap: the process was frozen or the machine suspended");
    this.lastTick = markTime();
    if (this.restarting) return;
    // A watch that delivers nothing at all while it owes a revision is stuck (its consumer
    // died with its server); one that is still working through a backlog is not.
    const overdue =
      this.expected !== undefined &&
      this.applied < this.expected.revision &&
      elapsedSince(this.expected.since) > this.stallMs &&
      elapsedSince(this.lastDelivery) > this.stallMs;
    if (overdue) {
      this.logger.warn(
        { bucket: this.bucket, delivered: this.applied, expected: this.expected?.revision },
        "kv watch is stuck (a known revision was not delivered); restarting it",
      );
      this.expected = undefined;
      void this.restart("stalled");
      return;
    }
    const idle = elapsedSince(this.lastDelivery) > this.idleCheckMs && elapsedSince(this.lastCheck) > this.idleCheckMs;
    if ((this.suspect || idle) && !this.checking) void this.check();
    this.notifyHealth();
  }

  /**
   * Reads the stream's last sequence and expects the watch to deliver it: a watch that
   * died with its server on an idle bucket shows up as overdue here. A suspect mirror is
   * healthy again once the revision read arrives (or it had it already).
   */
  private async check(): Promise<void> {
    this.checking = true;
    const gen = this.suspectGen;
    const since = markTime();
    try {
      const status = await this.kv.status();
      const last = status.values === 0 ? 0 : status.streamInfo.state.last_seq;
      if (last > this.applied) {
        this.expect(last, since);
        if (this.suspect) this.pendingClear = { revision: last, gen };
      } else if (this.suspect && gen === this.suspectGen) {
        this.suspect = false;
        this.notifyHealth();
      }
    } catch (err) {
      this.logger.debug({ err, bucket: this.bucket }, "kv mirror check failed; trying again");
    } finally {
      this.lastCheck = markTime();
      this.checking = false;
    }
  }

  private markSuspect(why: string): void {
    this.suspectGen++;
    this.pendingClear = undefined;
    if (!this.suspect) this.logger.info({ bucket: this.bucket, why }, "kv mirror may be behind; checking it against the server");
    this.suspect = true;
    this.notifyHealth();
    if (!this.checking && !this.restarting && !this.stopped) void this.check();
  }

  private followReconnects(nc: NatsConnection): void {
    void (async () => {
      for await (const s of nc.status()) {
        if (this.stopped) return;
        // Push deliveries sent while the connection was down are lost; the ordered
        // consumer notices only at its next delivery. Until a check after the reconnect
        // says otherwise, the view may be missing changes.
        if (s.type === "disconnect") this.markSuspect("NATS disconnected");
        else if (s.type === "reconnect") this.markSuspect("NATS reconnected");
      }
    })().catch(() => undefined);
  }

  private expect(revision: number, since: TimeMark): void {
    if (revision <= this.applied) return;
    if (this.expected && this.expected.revision >= revision) return;
    // Keep the older start: the watch has owed us something since then.
    this.expected = { revision, since: this.expected?.since ?? since };
  }

  private apply(e: KvEntry): void {
    if (e.revision > this.applied) this.applied = e.revision;
    this.lastDelivery = markTime();
    if (this.expected && this.applied >= this.expected.revision) this.expected = undefined;
    if (this.pendingClear && this.applied >= this.pendingClear.revision) {
      if (this.pendingClear.gen === this.suspectGen) this.suspect = false;
      this.pendingClear = undefined;
      this.notifyHealth();
    }
    const removed = this.removed.get(e.key);
    if (removed !== undefined) {
      if (e.revision <= removed) return; // a value this node removed, delivered late
      this.removed.delete(e.key);
    }
    const previous = this.map.get(e.key);
    // A write we noted ourselves, or a watch restart re-delivering what we have: not a change.
    if (previous && previous.revision >= e.revision) return;
    if (e.operation !== "PUT") {
      this.map.delete(e.key);
      this.emit(e.key, undefined);
      return;
    }
    let value: T;
    try {
      value = this.decode(e.key, e.json<unknown>());
    } catch (err) {
      this.logger.error({ err, key: e.key, bucket: e.bucket }, "ignoring a KV value this node cannot read");
      // A readable value it replaces is gone from this view: listeners learn it as a removal
      // (placement stops counting that actor as ours, a registry listener forgets it).
      if (this.map.delete(e.key)) this.emit(e.key, undefined);
      return;
    }
    const entry: MirrorEntry<T> = { value, revision: e.revision };
    this.map.set(e.key, entry);
    this.emit(e.key, entry);
  }

  /** A listener that throws must not end the watch (it did: the mirror then froze). */
  private emit(key: string, entry: MirrorEntry<T> | undefined): void {
    for (const l of this.listeners) {
      try {
        l(key, entry);
      } catch (err) {
        this.logger.error({ err, key, bucket: this.bucket }, "kv mirror listener threw");
      }
    }
  }

  private notifyHealth(): void {
    const now = this.healthy();
    if (now === this.lastHealthy) return;
    this.lastHealthy = now;
    for (const l of this.healthListeners) {
      try {
        l(now);
      } catch (err) {
        this.logger.error({ err, bucket: this.bucket }, "kv mirror health listener threw");
      }
    }
  }

  /**
   * Drops a key this node just deleted or purged on the server, so that its own next
   * decisions do not wait for the watch (which then delivers the deletion as a no-op).
   * `removed` is the revision the deletion removed (its compare-and-set revision).
   *
   * The watch and the deletion's reply are separate subscriptions: by the time the
   * caller runs again, the watch may already have delivered the deletion and another
   * node's new write of the key. That entry is newer than `removed` and stays. (Dropping
   * it unconditionally was why a re-declared instance could go missing from its owner's
   * registry mirror in the passivation storm, docs/cluster.md.) Until the watch delivers
   * something newer than `removed` for the key, a late delivery of the removed value
   * itself is ignored, so it cannot come back for a moment either.
   */
  forget(key: string, removed: number): void {
    const current = this.map.get(key);
    if (current && current.revision > removed) return;
    this.removed.set(key, removed);
    if (!current) return;
    this.map.delete(key);
    this.emit(key, undefined);
  }

  /**
   * Records a write this node just made, so its own next CAS does not wait for the
   * watch to catch up. The watch must deliver the same revision (or a newer one) within
   * `stallMs`, or it is restarted.
   */
  note(key: string, value: T, revision: number): void {
    this.expect(revision, markTime());
    const previous = this.map.get(key);
    if (previous && previous.revision >= revision) return;
    const entry = { value, revision };
    this.map.set(key, entry);
    this.emit(key, entry);
  }

  get(key: string): MirrorEntry<T> | undefined {
    return this.map.get(key);
  }

  entries(): IterableIterator<[string, MirrorEntry<T>]> {
    return this.map.entries();
  }

  values(): IterableIterator<MirrorEntry<T>> {
    return this.map.values();
  }

  get size(): number {
    return this.map.size;
  }

  onChange(listener: MirrorListener<T>): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  stop(): void {
    this.stopped = true;
    this.gen++;
    if (this.timer) clearInterval(this.timer);
    this.stopWatch?.();
    this.listeners.clear();
    this.healthListeners.clear();
  }
}
