import { ErrorCode, type Logger, backoffMs, componentLogger, isKovaError, sleep } from "../../core/index.js";
import { BusErrorCode, isTransientNatsError } from "../../bus/index.js";
import type { LeaseRecord, LeaseTable, Membership, AgentRecord, AgentRegistry } from "../../cluster/index.js";
import { ownerOf } from "./rendezvous.js";

/** What placement needs from the actor host; the node adapts ActorHost to it. */
export interface HostPort {
  /**
   * Starts hosting (loads the checkpoint, finishes pending WAL turns, opens the mailbox).
   * `takeover` is true when the actor was hosted before (by another node, or by this
   * node's previous life): pull requests of the previous host may still be parked on the
   * actor's consumer — a frozen node's, or a stopped mailbox's last pull, which the
   * server answers into a dead inbox — so the node resets the consumer first.
   */
  start(actorId: string, type: string, record: AgentRecord, opts: { takeover: boolean }): Promise<void>;
  /**
   * Stops taking messages, waits for (or checkpoints) the in-flight turn, closes. The wait
   * is bounded by the node's drain timeout (past it the turn is cut and its message
   * redelivered to the next host), unless `waitForTurn`: then the turn always finishes here.
   */
  stop(actorId: string, reason: string, opts?: { waitForTurn?: boolean }): Promise<void>;
  /** The ids hosted here (starting, running or leaving). */
  hosted(): Iterable<string>;
  hosts(actorId: string): boolean;
  hostedCount(): number;
  /** Whether stopping the actor now could cut work: starting, a turn running, a delivery in hand and not finished. */
  busy(actorId: string): boolean;
  /** How many turns the actor's current hosting here has ended (0 when not hosted). */
  turnsEnded(actorId: string): number;
  /** Messages of the actor's mailbox not yet acknowledged (waiting or delivered). @throws NATS errors */
  backlog(actorId: string): Promise<number>;
}

/** What one reconcile pass decides with. */
interface Pass {
  live: string[];
  ranked: boolean;
  healthy: boolean;
  signature: string;
  cap: number;
  load: number;
  capped: number;
}

export interface PlacementOptions {
  nodeId: string;
  membership: Membership;
  leases: LeaseTable;
  registry: AgentRegistry;
  host: HostPort;
  logger: Logger;
  reconcileMs: number;
  /** Actor starts and stops run this many at a time (default 16). */
  concurrency?: number;
  /** This node hosts at most this many actors; further ones stay unplaced (default: no cap). */
  maxActors?: number;
  /** Told once per pass when the cap leaves actors this node owns unplaced. */
  onCapped?: (event: { hosted: number; waiting: number; max: number }) => void;
  /**
   * How long a start that fails on a transient NATS error (a JetStream request with no
   * answer within the client's timeout, no responders, a leader election) is tried again
   * at once, keeping the lease, before the lease is released for the next pass (default
   * 30 s). One slow request then costs a takeover that request, not a lease release, a
   * wait for the next pass and a second acquisition (possibly by another node).
   */
  startRetryMs?: number;
  /**
   * An actor this node took over from a dead holder goes back to that node (restarted,
   * its rendezvous owner again) only when it is idle here, and once it has ended a turn
   * here, or its mailbox has nothing waiting, or this long has passed since its start
   * (default 60 s). See `handBack`.
   */
  handBackMaxHoldMs?: number;
  /** Told when this node acquires or gives up an actor (`moved` says who takes it next). */
  onPlacement?: (event: { actorId: string; action: "acquired" | "released" | "lost"; reason: string }) => void;
}

/**
 * Keeps this node hosting exactly the actors rendezvous hashing gives it, through the
 * leases: it takes a lease only when the actor is its own by hashing and the lease is
 * free or its holder is dead, and it gives an actor up (drain, release) when a live
 * node now ranks higher. Every node runs the same loop over the same mirrors, so the
 * cluster converges without a leader; CAS on the lease settles any race.
 */
export class PlacementController {
  /** Actors with a placement job queued or running: never two jobs for one actor. */
  private readonly busy = new Set<string>();
  private readonly startQueue: Array<() => Promise<void>> = [];
  private readonly jobs = new Set<Promise<void>>();
  private startsRunning = 0;
  /** type/desired per actor as last seen, to ignore registry writes that are state only. */
  private readonly seen = new Map<string, string>();
  private readonly owners = new Map<string, { type: string; owner: string | undefined }>();
  private ownerSignature = "";
  private timer: NodeJS.Timeout | undefined;
  /** The last pass scheduled, until it has run. */
  private running: Promise<void> | undefined;
  /** A pass is scheduled and has not started yet. */
  private pending = false;
  private stopped = false;
  private readonly unsubscribe: Array<() => void> = [];
  private readonly log: Logger;
  /**
   * Actors this node took over from a dead holder: that holder, when their start ended
   * (performance.now()) and how many turns they had ended then (handBack).
   */
  private readonly tookOver = new Map<string, { from: string; at: number; turns: number }>();

  constructor(private readonly opts: PlacementOptions) {
    this.log = componentLogger(opts.logger, "placement");
  }

  start(): void {
    const kick = () => this.kick();
    const kickWhenHealthy = (healthy: boolean) => {
      if (healthy) this.kick();
    };
    this.unsubscribe.push(
      this.opts.membership.onChange(kick),
      this.opts.registry.onChange((id, e) => {
        // Only what placement decides on: an actor appearing, leaving, changing type or
        // desired state. Hosts write state changes (Idle, Running, ...) all the time.
        const key = e ? `${e.value.type}/${e.value.desired}` : undefined;
        if (this.seen.get(id) === key) return;
        if (key === undefined) {
          // Removed (a passivated instance): forget it, so this node's memory follows the registry.
          this.seen.delete(id);
          this.owners.delete(id);
        } else this.seen.set(id, key);
        kick();
      }),
      this.opts.leases.onChange((id, e) => {
        // A lease freed by its holder is the signal that an actor is ready to move here;
        // a lease of an actor hosted here (or being started or stopped) that names someone
        // else means it was lost.
        if (!e || e.value.node === null || this.opts.host.hosts(id) || this.busy.has(id) || this.opts.leases.holds(id)) kick();
      }),
      // Passes are skipped while a view is stale (below): catch up as soon as it is current.
      this.opts.leases.onHealth(kickWhenHealthy),
      this.opts.registry.onHealth(kickWhenHealthy),
      this.opts.membership.onViewHealth(kickWhenHealthy),
    );
    const loop = () => {
      if (this.stopped) return;
      this.kick();
      this.timer = setTimeout(loop, this.opts.reconcileMs);
      this.timer.unref();
    };
    loop();
  }

  /**
   * Rendezvous owner of an actor, cached per set of ready nodes: a pass over thousands
   * of actors then hashes only when membership (or the actor's type) changed.
   */
  private ownerFor(id: string, type: string, ready: string[], signature: string): string | undefined {
    if (signature !== this.ownerSignature) {
      this.owners.clear();
      this.ownerSignature = signature;
    }
    const cached = this.owners.get(id);
    if (cached && cached.type === type) return cached.owner;
    const owner = ownerOf(
      id,
      ready.filter((n) => this.opts.membership.supports(n, type)),
    );
    this.owners.set(id, { type, owner });
    return owner;
  }

  /**
   * Schedules a reconcile pass, after the I/O callbacks at hand: the KV changes that arrive
   * together (a burst of spawns: each one's registry entry and lease) share one pass instead
   * of a pass over every actor each, which made a burst O(actors²). A request while a pass
   * waits to start is that pass's; passes never overlap.
   */
  kick(): void {
    if (this.stopped || this.pending) return;
    this.pending = true;
    const pass: Promise<void> = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => {
        this.pending = false;
        if (!this.stopped) return this.reconcile();
      })
      .catch((err: unknown) => this.log.error({ err }, "reconcile failed; retrying on the next tick"))
      .finally(() => {
        if (this.running === pass) this.running = undefined;
      });
    this.running = pass;
  }

  /**
   * Runs `job` for one actor while no other placement job touches it (passivation): the
   * actor counts as busy until the job ends, so no pass starts or stops it meanwhile.
   * @returns false (and runs nothing) when a job for the actor is queued or running, or the controller stopped
   */
  exclusive(id: string, job: () => Promise<void>): boolean {
    if (this.stopped || this.busy.has(id)) return false;
    this.schedule(id, "stop", job);
    return true;
  }

  /** Resolves when no reconcile pass and no placement job is running (tests and shutdown). */
  async idle(): Promise<void> {
    while (this.running || this.jobs.size > 0) {
      await this.running;
      await Promise.all([...this.jobs]);
    }
  }

  /**
   * Runs a placement job without holding up the reconcile pass: a drain can take as long
   * as the actor's current turn (an LLM turn: minutes), and a takeover after a node death
   * must not wait behind it. Stops run at once; starts share `concurrency` slots.
   */
  private schedule(id: string, kind: "start" | "stop", job: () => Promise<void>): void {
    this.busy.add(id);
    this.log.debug({ actorId: id, kind }, "placement job scheduled");
    const run = () => {
      const p = this.guard(id, job).finally(() => {
        this.jobs.delete(p);
        if (kind === "start") {
          this.startsRunning--;
          this.pumpStarts();
        }
        // No kick here: a job's effects (a released lease) reach peers through the lease
        // watch, and anything left for this node is picked up by the next timed pass.
      });
      this.jobs.add(p);
      return p;
    };
    if (kind === "stop") {
      void run();
      return;
    }
    this.startQueue.push(async () => void run());
    this.pumpStarts();
  }

  private pumpStarts(): void {
    while (this.startsRunning < (this.opts.concurrency ?? 16) && this.startQueue.length > 0) {
      this.startsRunning++;
      void this.startQueue.shift()!();
    }
  }

  private async reconcile(): Promise<void> {
    const { membership, leases, registry, host, nodeId } = this.opts;
    // Never decide from a view known to be stale (a KV watch restarting after its NATS
    // server died, or not yet re-checked after a reconnect): it would miss a lease this
    // node won by a write whose reply was lost, or a peer's release, and strand the actor;
    // with the lease view stale, holds() is false everywhere and every actor would be dropped.
    if (!leases.healthy() || !registry.healthy() || !membership.viewHealthy()) {
      this.log.debug(
        { leases: leases.healthy(), registry: registry.healthy(), nodes: membership.viewHealthy() },
        "placement pass skipped: a cluster view is not current",
      );
      return;
    }
    // Rank only nodes that place actors: a node still recovering its WAL is alive (its
    // leases hold) but must not be handed actors it would leave unserved for a while.
    const live = membership.readyNodes();
    const hosted = host.hostedCount();
    const pass: Pass = {
      live,
      ranked: live.includes(nodeId),
      healthy: membership.selfHealthy(),
      // Node records carry their types; a type list change shows in the signature too.
      signature: live.map((n) => `${n}:${membership.record(n)?.types?.join("+") ?? "*"}`).join(","),
      cap: this.opts.maxActors ?? Number.POSITIVE_INFINITY,
      // Starts already queued count against the cap too, so one pass cannot overshoot it.
      load: hosted + this.startQueue.length + this.startsRunning,
      capped: 0,
    };
    // Every record, visited in place and decided without allocating: a pass runs on every
    // registry and lease change, so what a pass allocated per record (a copy of the registry,
    // the host's list, closures) was most of what a burst of spawns allocated (O(actors²)).
    registry.forEach((record) => {
      this.decide(record, pass);
    });
    if (pass.capped > 0) {
      this.log.warn(
        { hosted, waiting: pass.capped, max: pass.cap },
        "max_actors_per_node reached: actors this node owns stay unplaced (their messages wait in their mailboxes); add a node or raise [cluster] max_actors_per_node",
      );
      this.opts.onCapped?.({ hosted, waiting: pass.capped, max: pass.cap });
    }
    // Leases this process holds for actors that left the registry (deleted).
    for (const id of host.hosted()) if (!registry.get(id) && !this.busy.has(id)) this.stopJob(id, "giveUp", "deregistered");
    for (const id of this.tookOver.keys()) if (!host.hosts(id) && !this.busy.has(id)) this.tookOver.delete(id);
  }

  /** What a pass decides for one registered actor: nothing, or one start or stop job. */
  private decide(record: AgentRecord, pass: Pass): void {
    const { leases, host, nodeId } = this.opts;
    const id = record.id;
    if (this.busy.has(id)) return;
    const lease = leases.get(id)?.value;
    const mine = leases.holds(id);
    const owner = this.ownerFor(id, record.type, pass.live, pass.signature);
    const hosted = host.hosts(id);

    if (hosted && !mine) {
      this.stopJob(id, "drop", "lease-lost");
      return;
    }
    if (record.desired === "killed") {
      if (hosted || mine) this.stopJob(id, "giveUp", "killed");
      return;
    }
    if (mine) {
      // Not while this node is still starting (not ranked yet): it would hand the actors
      // it just recovered to a peer, only to take them back once it is up.
      if (owner !== nodeId && owner !== undefined && pass.healthy && pass.ranked) {
        const taken = this.tookOver.get(id);
        if (hosted && taken?.from === owner) {
          // Taken over from its owner, which is back: the hand-back waits for the actor to
          // be idle here (a timed pass looks again), and never cuts a turn.
          if (!host.busy(id)) this.schedule(id, "stop", () => this.handBack(id, owner, taken));
          return;
        }
        this.stopJob(id, "giveUp", `rebalance to ${owner}`);
      } else if (!hosted) this.startJob(record, pass);
      return;
    }
    if (!pass.healthy) return;
    if (lease?.node === nodeId) {
      // Left by this node's previous life (a restart): reclaim it if it is still ours by
      // hashing, else free it so that its owner does not wait for staleness.
      if (owner === nodeId) this.startJob(record, pass);
      else this.stopJob(id, "freeOld", "restart");
      return;
    }
    if (owner === nodeId && (lease === undefined || this.mayTake(lease))) this.startJob(record, pass);
  }

  /** Queues taking an actor, unless this node is at its cap. */
  private startJob(record: AgentRecord, pass: Pass): void {
    if (pass.load >= pass.cap) {
      pass.capped++;
      return;
    }
    pass.load++;
    this.schedule(record.id, "start", () => this.take(record));
  }

  private stopJob(id: string, kind: "drop" | "giveUp" | "freeOld", reason: string): void {
    this.schedule(id, "stop", () => (kind === "drop" ? this.drop(id, reason) : kind === "giveUp" ? this.giveUp(id, reason) : this.freeOld(id)));
  }

  private mayTake(lease: LeaseRecord): boolean {
    if (lease.node === null) return true;
    if (lease.node === this.opts.nodeId) return lease.incarnation !== this.opts.membership.incarnation;
    return !this.opts.membership.isLive(lease.node);
  }

  private async guard(id: string, fn: () => Promise<void>): Promise<void> {
    this.busy.add(id);
    try {
      await fn();
      this.log.debug({ actorId: id }, "placement job done");
    } catch (err) {
      this.log.warn({ err, actorId: id }, "placement step failed; will retry");
    } finally {
      this.busy.delete(id);
    }
  }

  private async take(record: AgentRecord): Promise<void> {
    const id = record.id;
    let takeover = false;
    /** The dead holder it is taken from, if any. */
    let fromDead: string | undefined;
    if (!this.opts.leases.holds(id)) {
      const before = this.opts.leases.get(id)?.value;
      takeover = before !== undefined;
      const won = await this.opts.leases.acquire(id, (l) => this.mayTake(l));
      if (!won) return;
      // A holder other than this node is taken from only when it is not live (mayTake).
      if (typeof before?.node === "string" && before.node !== this.opts.nodeId) fromDead = before.node;
      this.opts.onPlacement?.({ actorId: id, action: "acquired", reason: before?.node ? `takeover from ${before.node}` : "placement" });
    }
    const opts = { takeover };
    const deadline = performance.now() + (this.opts.startRetryMs ?? 30_000);
    for (let attempt = 1; ; attempt++) {
      try {
        await this.opts.host.start(id, record.type, record, opts);
        if (fromDead !== undefined) this.tookOver.set(id, { from: fromDead, at: performance.now(), turns: this.opts.host.turnsEnded(id) });
        return;
      } catch (err) {
        if (this.mayRetryStart(id, err, deadline)) {
          const delay = backoffMs(attempt, 100, 1_000);
          this.log.warn({ err, actorId: id, attempt, retryInMs: delay }, "actor start failed on a transient NATS error; trying again, keeping the lease");
          await sleep(delay);
          continue;
        }
        // Give the actor a chance elsewhere rather than holding a lease we cannot serve.
        await this.opts.leases.release(id, "start-failed").catch(() => false);
        throw err;
      }
    }
  }

  /**
   * Whether a failed start is tried again in place: the failure is NATS being briefly
   * unavailable (the same start then succeeds, as the next pass's would), the lease is
   * still this node's and the actor still wanted. Anything else releases the lease.
   */
  private mayRetryStart(id: string, err: unknown, deadline: number): boolean {
    const transient =
      isTransientNatsError(err) ||
      isKovaError(err, ErrorCode.TIMEOUT) ||
      isKovaError(err, BusErrorCode.NATS_UNREACHABLE) ||
      isKovaError(err, BusErrorCode.JETSTREAM_UNAVAILABLE);
    const record = this.opts.registry.get(id);
    return (
      transient &&
      !this.stopped &&
      performance.now() < deadline &&
      this.opts.leases.holds(id) &&
      record !== undefined &&
      record.desired !== "killed" &&
      !this.opts.host.hosts(id)
    );
  }

  /**
   * Hands an actor taken over from a dead holder back to it, now its live rendezvous owner
   * again, if it is idle here and one of: it has ended a turn since the takeover (the
   * redelivered message ran here), its mailbox has nothing waiting or in hand, or
   * `handBackMaxHoldMs` passed. Otherwise it stays, and a later pass asks again.
   * A node restarted just after its peers took its actors over (a quick restart slower
   * than the staleness window) used to pull each one back at once, often while its
   * redelivered turn ran on the peer: the move's drain cut that turn and the owner ran it
   * (its model calls too) again. A turn that starts between the check and the stop is
   * waited for (`waitForTurn`), not cut.
   */
  private async handBack(id: string, owner: string, taken: { at: number; turns: number }): Promise<void> {
    const { host } = this.opts;
    if (host.busy(id)) return;
    let ready = host.turnsEnded(id) > taken.turns || performance.now() - taken.at >= (this.opts.handBackMaxHoldMs ?? 60_000);
    if (!ready) {
      const backlog = await host.backlog(id).catch((err: unknown) => {
        this.log.debug({ err, actorId: id }, "mailbox backlog unknown; the hand-back waits for the next pass");
        return undefined;
      });
      ready = backlog === 0 && !host.busy(id);
    }
    if (!ready) return;
    this.log.info({ actorId: id, owner }, "handing an actor taken over from a dead node back to its restarted owner");
    await this.giveUp(id, `rebalance to ${owner}`, { waitForTurn: true });
  }

  private async giveUp(id: string, reason: string, stopOpts?: { waitForTurn: boolean }): Promise<void> {
    this.tookOver.delete(id);
    if (this.opts.host.hosts(id)) await this.opts.host.stop(id, reason, stopOpts);
    if (await this.opts.leases.release(id, reason)) {
      this.opts.onPlacement?.({ actorId: id, action: "released", reason });
    }
  }

  private async drop(id: string, reason: string): Promise<void> {
    this.log.warn({ actorId: id }, "lease lost while hosting: stopping without checkpoint release");
    await this.opts.host.stop(id, reason);
    this.opts.onPlacement?.({ actorId: id, action: "lost", reason });
  }

  private async freeOld(id: string): Promise<void> {
    await this.opts.leases.release(id, "restart", { anyIncarnation: true });
  }

  /** Stops the loop; in-flight starts and stops finish first. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    for (const u of this.unsubscribe) u();
    await this.idle();
  }

  /** Gives up every hosted actor (graceful shutdown): drain, checkpoint, release. */
  async releaseAll(reason: string): Promise<void> {
    const ids = new Set(this.opts.host.hosted());
    for (const [id] of this.opts.leases.entries()) if (this.opts.leases.holds(id)) ids.add(id);
    await Promise.all([...ids].map((id) => this.guard(id, () => this.giveUp(id, reason))));
  }
}
