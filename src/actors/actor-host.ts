import { ConfigError, KovaError, assertId, componentLogger, silentLogger, type Logger } from "../core/index.js";
import type { Bus, MailboxOptions } from "../bus/index.js";
import { ActorInstance, type ActorStatus } from "./actor-instance.js";
import { NatsCheckpointStore, PROCESSED_LIMIT, processedWindowLimit, type CheckpointStore } from "./checkpoint-store.js";
import { NatsStepJournal } from "./step-journal.js";
import { DEFAULT_REPLY_RETRY, type ReplyRetryOptions } from "./replies.js";
import { NotHostedError, ActorErrorCode } from "./errors.js";
import type { ActorState } from "./lifecycle.js";
import type { ActorWal, HostDeps } from "./ports.js";
import type { ActorTypeRegistry } from "./registry.js";
import { TURN_KIND } from "./turn-record.js";
import type { TemplateBinding } from "./templates.js";
import type { Signal, SupervisionOptions } from "./types.js";

export type { ActorStatus };

export interface ActorHostOptions {
  bus: Bus;
  /** The node's WAL (`Wal` from src/wal). */
  wal: ActorWal;
  nodeId: string;
  types: ActorTypeRegistry;
  /** Where its lines go; none: it writes nothing (a library stays quiet inside someone else's service). */
  logger?: Logger;
  /**
   * Checked before each journaled step, the checkpoint and the ack.
   * @throws LeaseLostError when this node no longer holds the actor's lease
   */
  fence?: (actorId: string) => Promise<void> | void;
  /**
   * The fence's rule applied at once, without waiting for a lease view being re-checked.
   * The fast path (`info_request`, `capability_query`, answered from memory without a
   * turn) answers only while it passes, so that a node that lost an actor while it was
   * frozen or cut off never answers from its stale copy.
   * @throws LeaseLostError when this node cannot prove now that it holds the actor's lease
   */
  fenceNow?: (actorId: string) => void;
  /** Every lifecycle change; `info.turn === true` marks the Idle⇄Running change of an ordinary turn. */
  onStateChange?: (actorId: string, state: ActorState, info?: unknown) => void;
  /** Default: NATS KV `kova_<cluster>_checkpoints`, opened on first use. */
  checkpoints?: CheckpointStore;
  /** Replicas of the checkpoint bucket when this host creates it (default 1). */
  checkpointReplicas?: number;
  /** Mailbox settings of every actor (ack wait, max deliver, backoff). */
  mailbox?: MailboxOptions;
  /** Host-wide supervision settings; they override the types' own. */
  supervision?: SupervisionOptions;
  /** Also publish per-turn Idle⇄Running changes as `actor_state` events (default false). */
  turnEvents?: boolean;
  /**
   * Where turns are journaled besides the local WAL: `"nats"` (default) also appends each
   * step to the actor's subject in stream `KOVA_<C>_JOURNAL`, so the node that takes an
   * actor over resumes its turn with every recorded result; `"local"` keeps journals in the
   * WAL only (a takeover then re-runs the turn's steps).
   */
  stepJournal?: "nats" | "local";
  /** Processed envelope ids each checkpoint keeps for deduplication (default 1000). */
  processedWindow?: number;
  /**
   * How the host retries a committed turn's reply whose publish failed (an owed reply,
   * docs/actors.md): first after about `baseMs` (default 1 s), then doubling up to `maxMs`
   * (default 30 s), while it hosts the actor.
   */
  replyRetry?: ReplyRetryOptions;
}

/**
 * Hosts actors on one node: each actor handles one message at a time from its durable
 * mailbox, journals its turns in the node's WAL, checkpoints its state to NATS KV and
 * answers the fast rpc path. Placement (which node hosts which actor) is the node's job;
 * the host is told to start and stop actors and checks the `fence` before journaling.
 */
export class ActorHost {
  readonly #actors = new Map<string, ActorInstance>();
  readonly #starting = new Map<string, Promise<void>>();
  readonly #deps: HostDeps;
  readonly #types: ActorTypeRegistry;
  readonly #log: Logger;

  /** @throws ConfigError when `processedWindow` cannot fit in a checkpoint on this server */
  constructor(opts: ActorHostOptions) {
    const processedWindow = opts.processedWindow ?? PROCESSED_LIMIT;
    const limit = processedWindowLimit(opts.bus.maxPayload);
    if (processedWindow > limit) {
      // Every turn would fail to save its checkpoint (PAYLOAD_TOO_LARGE) once the window filled up.
      throw new ConfigError(
        "checkpoint.processed_window",
        `${processedWindow} ids (ActorHost processedWindow) make every checkpoint about ${Math.ceil((processedWindow * 17 * 4) / 3 / 1024)} KiB, more than half of this NATS server's max_payload (${Math.floor(opts.bus.maxPayload / 1024)} KiB): set it to at most ${limit}, or raise max_payload in nats-server's config`,
      );
    }
    this.#types = opts.types;
    this.#log = componentLogger(opts.logger ?? silentLogger(), "actors", { nodeId: opts.nodeId });
    let store: Promise<CheckpointStore> | undefined = opts.checkpoints ? Promise.resolve(opts.checkpoints) : undefined;
    const fence = opts.fence;
    const fenceNow = opts.fenceNow;
    const onStateChange = opts.onStateChange;
    this.#deps = {
      bus: opts.bus,
      wal: opts.wal,
      nodeId: opts.nodeId,
      log: this.#log,
      checkpoints: () => {
        store ??= NatsCheckpointStore.open({ js: opts.bus.js, cluster: opts.bus.cluster, replicas: opts.checkpointReplicas ?? 1, bus: opts.bus }).catch(
          (err: unknown) => {
            store = undefined;
            throw err;
          },
        );
        return store;
      },
      fence: async (actorId) => {
        if (fence) await fence(actorId);
      },
      fenceNow: (actorId) => fenceNow?.(actorId),
      stepJournal: opts.stepJournal === "local" ? undefined : new NatsStepJournal({ bus: opts.bus, nodeId: opts.nodeId, log: this.#log }),
      processedWindow,
      supervision: opts.supervision ?? {},
      mailbox: opts.mailbox ?? {},
      replyRetry: {
        baseMs: opts.replyRetry?.baseMs ?? DEFAULT_REPLY_RETRY.baseMs,
        maxMs: opts.replyRetry?.maxMs ?? DEFAULT_REPLY_RETRY.maxMs,
      },
      turnEvents: opts.turnEvents ?? false,
      onStateChange: (actorId, state, info) => onStateChange?.(actorId, state, info),
    };
  }

  /**
   * Starts hosting `actorId` as `type`: loads its checkpoint, finishes its PENDING WAL
   * turns (state Recovering, recorded steps reused), opens its mailbox and rpc → Idle.
   * `template` makes it an instance of a template (virtual actor): its handlers see the
   * binding as `ctx.template`, and a new instance's `initialState` gets it.
   * Starting a hosted actor again is a no-op.
   * @throws InvalidIdError, UnknownActorTypeError before anything else; LeaseLostError when
   *   the fence fails during recovery; NATS errors when the checkpoint cannot be loaded
   */
  async start(actorId: string, type: string, opts: { template?: TemplateBinding } = {}): Promise<void> {
    assertId("actor id", actorId);
    const def = this.#types.get(type);
    const starting = this.#starting.get(actorId);
    if (starting) return starting;
    const existing = this.#actors.get(actorId);
    // An actor on its way out (stop, lease lost) is replaced once it is gone.
    if (existing?.leaving) {
      await existing.leaving.catch(() => undefined);
      const racing = this.#starting.get(actorId);
      if (racing) return racing;
    } else if (existing) return;
    if (this.#actors.has(actorId)) return;
    const actor = new ActorInstance(
      actorId,
      def,
      this.#deps,
      (a) => {
        if (this.#actors.get(a.id) === a) this.#actors.delete(a.id);
      },
      opts.template,
    );
    this.#actors.set(actorId, actor);
    const p = actor.start().catch(async (err: unknown) => {
      this.#log.error({ err, actorId }, "actor did not start");
      await actor.leave("start_failed").catch(() => undefined);
      if (this.#actors.get(actorId) === actor) this.#actors.delete(actorId);
      throw err;
    });
    this.#starting.set(actorId, p);
    try {
      await p;
    } finally {
      this.#starting.delete(actorId);
    }
  }

  /**
   * Stops hosting: no new messages, the running turn finishes and is checkpointed, rpc
   * closes, the actor ends Completed with `reason` (e.g. "moved", "shutdown").
   * `drainTimeoutMs` bounds the wait for a long turn: past it (or at once for a paused
   * turn) the turn is cut at its next step and its message redelivered to the next host;
   * its WAL record stays PENDING so that this node resumes it if it hosts the actor again.
   * Stopping an actor that is not hosted is a no-op.
   */
  async stop(actorId: string, opts: { reason?: string; drainTimeoutMs?: number } = {}): Promise<void> {
    await this.#starting.get(actorId)?.catch(() => undefined);
    const actor = this.#actors.get(actorId);
    if (actor) await actor.leave(opts.reason ?? "stopped", opts.drainTimeoutMs);
  }

  /**
   * Drops what the host caches for an actor it stopped hosting for good (a passivated
   * template instance), so that the host's memory follows its active actors only.
   * No-op while the actor is hosted.
   */
  async forget(actorId: string): Promise<void> {
    if (this.#actors.has(actorId) || this.#starting.has(actorId)) return;
    (await this.#deps.checkpoints()).forget?.(actorId);
  }

  /**
   * Delivers a control signal (the node's `signal` endpoint calls this).
   * @throws NotHostedError when the actor is not hosted here
   */
  async signal(actorId: string, sig: Signal): Promise<void> {
    const actor = this.#actors.get(actorId);
    if (!actor) throw new NotHostedError(actorId);
    await actor.signal(sig);
  }

  /**
   * Interrupts the turn of one message of an actor hosted here: now if it runs, else when it starts.
   * @throws NotHostedError when the actor is not hosted here
   */
  interruptMessage(actorId: string, messageId: string): "interrupted" | "when_started" {
    const actor = this.#actors.get(actorId);
    if (!actor) throw new NotHostedError(actorId);
    return actor.interruptMessage(messageId);
  }

  status(actorId: string): ActorStatus | undefined {
    return this.#actors.get(actorId)?.status();
  }

  list(): ActorStatus[] {
    return [...this.#actors.values()].map((a) => a.status());
  }

  /** Ids of the actors hosted here (what `list` names, without a status object per actor): a live view, not a copy. */
  ids(): IterableIterator<string> {
    return this.#actors.keys();
  }

  /** Whether an actor is hosted here (starting, running or leaving). */
  hosts(actorId: string): boolean {
    return this.#actors.has(actorId);
  }

  /**
   * Whether stopping the actor now could cut work: it is starting, a turn runs, or a
   * delivery is in hand (ActorInstance.busy). False for an actor not hosted here.
   */
  busy(actorId: string): boolean {
    return this.#starting.has(actorId) || (this.#actors.get(actorId)?.busy ?? false);
  }

  /** How many actors are hosted here. */
  get size(): number {
    return this.#actors.size;
  }

  /** Actors with PENDING turns in this node's WAL (recovery: start them, or abandon those that moved). */
  pendingActors(): string[] {
    const owners = new Set<string>();
    for (const r of this.#deps.wal.pendingRecords()) if (r.owner && r.kind === TURN_KIND) owners.add(r.owner);
    return [...owners];
  }

  /**
   * Marks the PENDING WAL turns of an actor that moved to another node complete without
   * running them (its new host redoes the turn from the redelivered message).
   * @returns how many records were abandoned
   * @throws KovaError INVALID_TRANSITION when the actor is hosted here (stop it first)
   */
  async abandon(actorId: string): Promise<number> {
    if (this.#actors.has(actorId)) {
      throw new KovaError(ActorErrorCode.INVALID_TRANSITION, `actor ${actorId} is hosted here; stop it before abandoning its turns`);
    }
    const pending = this.#deps.wal.pendingFor(actorId).filter((r) => r.kind === TURN_KIND);
    for (const r of pending) await this.#deps.wal.complete(r.seq);
    if (pending.length) this.#log.info({ actorId, records: pending.length }, "abandoned pending turns of an actor that moved");
    return pending.length;
  }

  /** Stops every actor (graceful shutdown). */
  async stopAll(opts: { reason?: string; drainTimeoutMs?: number } = {}): Promise<void> {
    await Promise.all([...this.#starting.values()].map((p) => p.catch(() => undefined)));
    await Promise.all([...this.#actors.keys()].map((id) => this.stop(id, { ...opts, reason: opts.reason ?? "shutdown" })));
  }
}
