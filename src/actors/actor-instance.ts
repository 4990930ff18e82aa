import { ErrorCode, KovaError, type Logger } from "../core/index.js";
import { RpcDeclined, type A2AEnvelope, type Mailbox, type MailboxContext, type RpcService, BusErrorCode } from "../bus/index.js";
import { isSplit, readCheckpoint, readWindow, type Checkpoint, type StoredCheckpoint } from "./checkpoint-store.js";
import { ActorDlqReason, TurnInterruptedError, ActorErrorCode, isLeaseLost } from "./errors.js";
import { ActorLifecycle, type ActorState } from "./lifecycle.js";
import { ActorMemory, localCheckpointKey, localWindowKey } from "./memory.js";
import { PauseGate } from "./pause-gate.js";
import type { HostDeps } from "./ports.js";
import type { ActorJournal } from "./step-journal.js";
import { askedEnvelope, ReplyRetry, sendReply } from "./replies.js";
import { runTurn, type TurnActor, type TurnOutcome, type TurnSource } from "./turn-runner.js";
import { markCommitted, parseTurnRecord, TURN_KIND, type TurnRecord } from "./turn-record.js";
import type { TemplateBinding } from "./templates.js";
import type { ActorDefinition, Signal } from "./types.js";

export interface ActorStatus {
  id: string;
  type: string;
  state: ActorState;
  /** Turns running now: 0 or 1 (more would break guarantee 2; the runtime refuses it). */
  inFlight: number;
  /** Messages whose turn ended here (done, interrupted or failed), recovered turns included. */
  handled: number;
  paused: boolean;
  /** Epoch ms of the last turn's start or end, or of the start of hosting: what passivation measures idleness from. */
  lastActiveAt: number;
  /** The template of a template instance (virtual actor). */
  template?: string;
}

const EVENT_FLUSH_MS = 2_000;
/** How long, and for how many messages, an interrupt waits for a queued message's turn. */
const INTERRUPT_MEMORY_MS = 10 * 60_000;
const INTERRUPT_MEMORY = 1000;

interface CurrentTurn {
  env: A2AEnvelope;
  abort: AbortController;
  recovering: boolean;
}

/**
 * One hosted actor: its lifecycle, committed memory, mailbox and rpc service, and the
 * signals that steer it. Turns themselves run in turn-runner.ts.
 */
export class ActorInstance implements TurnActor {
  readonly lifecycle: ActorLifecycle;
  readonly gate = new PauseGate();
  #log: Logger | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
  memory!: ActorMemory<any>;
  #mailbox: Mailbox | undefined;
  #mailboxStopping: Promise<void> | undefined;
  #rpc: RpcService | undefined;
  #turn: CurrentTurn | undefined;
  /** True from Recovering until the recovered turns are done. */
  #recovering = false;
  #inFlight = 0;
  /** Deliveries handed to this actor whose handling has not ended (held by a pause, or in their turn). */
  #delivered = 0;
  #handled = 0;
  #leaving = false;
  #lastActiveAt = Date.now();
  #left: Promise<void> | undefined;
  #events: Promise<void> = Promise.resolve();
  #journal: Promise<ActorJournal> | undefined;
  // What an idle actor holds is kept small (docs/benchmarks.md, "Memory per idle actor"):
  // the maps, the retry timer and the logger below are made when first needed.
  /**
   * Messages to interrupt as soon as their turn starts here (message id → expiry): an
   * interrupt aimed at one message that is still queued behind others.
   */
  #interruptOnStart: Map<string, number> | undefined;
  /** Turns whose journaling failed (NATS or WAL trouble): the redelivery resumes the same record. */
  #parked: Map<string, { seq: number; record: TurnRecord }> | undefined;
  /** Sends the replies this actor owes (committed turns whose reply publish failed) while it is hosted here. */
  #owedReplies: ReplyRetry | undefined;

  constructor(
    readonly id: string,
    // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code; handlers take ActorContext<S>, so only any accepts them all
    readonly def: ActorDefinition<any>,
    readonly deps: HostDeps,
    private readonly onGone: (actor: ActorInstance) => void,
    readonly template?: TemplateBinding,
  ) {
    this.lifecycle = new ActorLifecycle(id, (state, previous, info) => this.#reportState(state, previous, info));
  }

  /** The actor's logger (a child of the host's, made on first use). */
  get log(): Logger {
    return (this.#log ??= this.deps.log.child({ actorId: this.id, actorType: this.def.type }));
  }

  /** The owed-reply retry, made when a reply is first owed; none once the actor leaves. */
  #retry(): ReplyRetry | undefined {
    if (this.#leaving) return undefined;
    return (this.#owedReplies ??= new ReplyRetry(() => this.#sendOwed(), this.deps.replyRetry, this.log));
  }

  status(): ActorStatus {
    return {
      id: this.id,
      type: this.def.type,
      state: this.lifecycle.state,
      inFlight: this.#inFlight,
      handled: this.#handled,
      paused: this.gate.paused,
      lastActiveAt: this.#lastActiveAt,
      ...(this.template ? { template: this.template.name } : {}),
    };
  }

  /**
   * Whether stopping the actor now could cut work: it is still starting (recovered turns
   * included), a turn runs, or a delivery is in hand and not finished (a paused actor holds
   * it before its turn). Placement waits for this to be false before it hands an actor it
   * took over back to its owner.
   */
  get busy(): boolean {
    const state = this.lifecycle.state;
    return this.#inFlight > 0 || this.#delivered > 0 || this.#recovering || state === "Created" || state === "Recovering";
  }

  /**
   * Loads memory, finishes PENDING turns of this actor from the WAL (Recovering), sends the
   * replies its checkpoint owes, opens mailbox and rpc.
   */
  async start(): Promise<void> {
    await this.reload();
    const pending = this.deps.wal.pendingFor(this.id).filter((r) => r.kind === TURN_KIND);
    let finished = true;
    if (pending.length > 0) {
      this.lifecycle.transition("Recovering", { pending: pending.length });
      this.#recovering = true;
      try {
        finished = await this.#recover(pending);
      } finally {
        this.#recovering = false;
      }
      if (finished) this.event("actor_recovered", { turns: pending.length });
    }
    // Replies owed by the actor's previous host (or by this node before a restart) go out
    // now: after the recovered turns, which send their own records' replies, and even when
    // the actor ends Failed.
    if (this.memory.owed().length > 0) this.#retry()?.arm(0);
    if (!finished || this.#leaving) return;
    await this.#open();
    this.lifecycle.transition(this.gate.paused ? "Paused" : "Idle");
  }

  replyOwed(): void {
    this.#retry()?.arm();
  }

  /**
   * One pass of the owed-reply retry: sends each reply still owed under its derived id (an
   * asker keeps the first copy), then completes the parked record of its turn once nothing
   * can deliver that turn's message again. True when nothing is owed any more.
   */
  async #sendOwed(): Promise<boolean> {
    for (const owed of this.memory.owed()) {
      if (this.#leaving) return true;
      // Its message's redelivery is being settled right now, and sends it.
      if (this.#turn?.env.id === owed.for) continue;
      try {
        await sendReply(this, askedEnvelope(owed), owed);
      } catch (err) {
        this.log.warn({ err, envelopeId: owed.for }, "an owed reply could not be published; retrying");
        continue;
      }
      this.memory.replied(owed.for);
      this.log.info({ envelopeId: owed.for }, "owed reply sent");
      await this.#releaseParked(owed.for);
    }
    return this.memory.owed().length === 0;
  }

  /**
   * Completes the parked record of a turn whose reply went out, once its message is gone from
   * the mailbox stream (moved to the DLQ after max_deliver): nothing will deliver it again.
   * While the message is there its redelivery, or a re-created consumer's, must still find
   * the committed mark, so the record stays parked and that delivery settles it.
   */
  async #releaseParked(envelopeId: string): Promise<void> {
    const parked = this.#parked?.get(envelopeId);
    const streamSeq = parked?.record.streamSeq;
    if (!parked || streamSeq === undefined) return;
    const held = await this.deps.bus.inboxHolds(this.id, streamSeq, envelopeId).catch(() => true);
    // A delivery of it may have started (or settled it) meanwhile.
    if (held || this.#parked?.get(envelopeId) !== parked || this.#turn?.env.id === envelopeId) return;
    this.#parked?.delete(envelopeId);
    await this.deps.wal
      .complete(parked.seq)
      .catch((err: unknown) => this.log.warn({ err, envelopeId }, "could not complete a settled parked turn; the next start settles it"));
  }

  /** Re-runs the PENDING turns; false when the actor must not go on to take messages (left or Failed). */
  async #recover(pending: Array<{ seq: number; payload: unknown }>): Promise<boolean> {
    // Paused before it started: the recovered turns hold at their first step.
    if (this.gate.paused) this.lifecycle.transition("Paused", { signal: "pause" });
    for (const r of pending) {
      if (this.#leaving) return false;
      const record = parseTurnRecord(r.payload);
      if (record === undefined) {
        this.log.error({ seq: r.seq }, "unreadable turn record skipped");
        await this.deps.wal.complete(r.seq);
        continue;
      }
      if (await this.#messageGone(record)) {
        // Its message left the mailbox: moved to the DLQ after max_deliver, swept, or
        // acknowledged by a turn that committed (this one before its WAL completion was
        // written, or a later delivery on another node) long enough ago that its id has
        // left the processed window. Nothing will redeliver it, and running it now would
        // act on a message the cluster already handled or gave up on.
        this.log.warn(
          { seq: r.seq, envelopeId: record.envelope.id, streamSeq: record.streamSeq },
          "pending turn dropped: its message is no longer in the mailbox (handled, dead-lettered or swept)",
        );
        this.event("actor_turn_dropped", { envelopeId: record.envelope.id, reason: "message_gone" });
        await this.deps.wal.complete(r.seq);
        continue;
      }
      if (this.def.handlers[record.envelope.type] === undefined) {
        // The type lost this handler since the crash (a new version): same path as a new message.
        await this.#unhandled(record.envelope);
        await this.deps.wal.complete(r.seq);
        continue;
      }
      const outcome = await this.#turnOf(record.envelope, { recovered: { seq: r.seq, record }, afterCrash: true }, true);
      if (outcome.kind === "lease_lost") throw (outcome as { error: unknown }).error;
      if (outcome.kind === "failed") {
        // Failed stays inspectable (rpc) and can be resumed; the mailbox opens on resume.
        this.#rpc ??= this.deps.bus.serveRpc(this.id, (env) => this.#answerRpc(env), { node: this.deps.nodeId });
        this.#fail(record.envelope, outcome);
        return false;
      }
    }
    return true;
  }

  /** True when a pending turn's message is neither processed nor still in the actor's mailbox stream. */
  async #messageGone(record: TurnRecord): Promise<boolean> {
    // A committed turn is settled, not dropped: its saved reply is sent even if its message is gone.
    if (record.streamSeq === undefined || record.committed || this.memory.has(record.envelope.id)) return false;
    return !(await this.deps.bus.inboxHolds(this.id, record.streamSeq, record.envelope.id));
  }

  async reload(): Promise<void> {
    const store = await this.deps.checkpoints();
    const shared = await store.load(this.id);
    const local = this.#localCheckpoint();
    this.memory = ActorMemory.from(shared, local, () => this.def.initialState(this.template), this.deps.processedWindow);
  }

  /** The local copy of the checkpoint in the WAL's side table, with the window a split one names. */
  #localCheckpoint(): Checkpoint | undefined {
    const stored = this.deps.wal.getKv<StoredCheckpoint>(localCheckpointKey(this.id));
    if (stored === undefined) return undefined;
    const window = isSplit(stored) ? this.deps.wal.getKv<unknown>(localWindowKey(this.id)) : undefined;
    return readCheckpoint(
      `local checkpoint of actor ${this.id} in the WAL`,
      stored,
      window === undefined ? undefined : readWindow(`local processed-ids window of actor ${this.id} in the WAL`, window),
    );
  }

  journal(): Promise<ActorJournal | undefined> {
    const store = this.deps.stepJournal;
    if (!store) return Promise.resolve(undefined);
    if (!this.#journal) {
      // Fenced first: a node that lost the actor must not claim its journal from the new host.
      // The checkpoint's processed ids tell a spent last turn from an open one.
      const opening = this.deps.fence(this.id).then(() => store.open(this.id, (envelopeId) => this.memory.has(envelopeId)));
      this.#journal = opening;
      opening.catch(() => {
        if (this.#journal === opening) this.#journal = undefined;
      });
    }
    return this.#journal;
  }

  async #open(): Promise<void> {
    await this.#mailboxStopping;
    this.#mailboxStopping = undefined;
    this.#rpc ??= this.deps.bus.serveRpc(this.id, (env) => this.#answerRpc(env), { node: this.deps.nodeId });
    this.#mailbox = await this.deps.bus.openMailbox(this.id, (env, mctx) => this.#onMessage(env, mctx), this.deps.mailbox);
  }

  /** Stops taking messages without waiting (safe inside the mailbox's own handler). */
  #closeMailbox(): Promise<void> {
    const mb = this.#mailbox;
    this.#mailbox = undefined;
    if (mb) this.#mailboxStopping = mb.stop().catch((err: unknown) => this.log.warn({ err }, "mailbox stop failed"));
    return this.#mailboxStopping ?? Promise.resolve();
  }

  async #onMessage(env: A2AEnvelope, mctx: MailboxContext): Promise<void> {
    this.#delivered++;
    try {
      await this.#handle(env, mctx);
    } finally {
      this.#delivered--;
    }
  }

  async #handle(env: A2AEnvelope, mctx: MailboxContext): Promise<void> {
    // Paused: hold the message (the mailbox's heartbeats keep it ours) until resume.
    await this.gate.wait();
    if (this.#leaving || this.lifecycle.state === "Failed") {
      throw new KovaError(ActorErrorCode.NOT_HOSTED, `actor ${this.id} is not taking messages (${this.lifecycle.state})`);
    }
    if (this.def.handlers[env.type] === undefined) return this.#unhandled(env, mctx);
    const parked = this.#parked?.get(env.id);
    const outcome = await this.#turnOf(env, { mailbox: mctx, ...(parked ? { recovered: parked } : {}) }, false);
    if (outcome.kind === "lease_lost") {
      void this.leave("lease_lost");
      throw (outcome as { error: unknown }).error;
    }
    // Stopped mid-turn: nak, so the message is redelivered to the actor's next host.
    if (outcome.kind === "interrupted" && outcome.by === "stop") throw new TurnInterruptedError(this.id, "stop");
    if (outcome.kind === "failed") this.#fail(env, outcome);
  }

  async #turnOf(env: A2AEnvelope, src: Omit<TurnSource, "abort">, recovering: boolean): Promise<TurnOutcome> {
    if (this.#inFlight > 0) {
      // Guarantee 2 is the mailbox's max_ack_pending 1; this is the local assertion of it.
      throw new KovaError(ErrorCode.INTERNAL, `actor ${this.id}: a second turn started while one is running`);
    }
    const abort = new AbortController();
    if (this.#interruptOnStart?.delete(env.id)) abort.abort(new TurnInterruptedError(this.id, "interrupt"));
    this.#turn = { env, abort, recovering };
    this.#inFlight++;
    this.#lastActiveAt = Date.now();
    if (!recovering) this.lifecycle.transition("Running", { turn: true, envelopeId: env.id });
    let outcome: TurnOutcome | undefined;
    const source: TurnSource = { ...src, abort };
    try {
      outcome = await runTurn(this, env, source);
      source.completion?.catch((err: unknown) =>
        this.log.error({ err, envelopeId: env.id }, "the WAL record of a committed turn could not be completed; the next start settles it"),
      );
      this.#parked?.delete(env.id);
      if (outcome.kind !== "duplicate" && outcome.kind !== "lease_lost") this.#handled++;
      return outcome;
    } catch (err) {
      // Journaling failed (not the handler): keep the record for the redelivery.
      await this.#park(env, source);
      this.log.warn({ err, envelopeId: env.id }, "turn could not be journaled; the message will be redelivered");
      throw err;
    } finally {
      this.#inFlight--;
      this.#turn = undefined;
      this.#lastActiveAt = Date.now();
      // A failed turn goes Running → Failed (in #fail), every other end back to Idle.
      if (!recovering && this.lifecycle.state === "Running" && outcome?.kind !== "failed") {
        this.lifecycle.transition("Idle", { turn: true, envelopeId: env.id });
      }
    }
  }

  /**
   * Keeps the PENDING record of a turn whose journaling failed, so that its redelivery
   * resumes it. A turn that failed after its commit (its reply could not be published) is
   * marked committed in the WAL, with its reply, before the message is nak'ed: when it
   * comes back, here or after a restart, it is a duplicate that sends that reply, however
   * many later messages went through first. Later messages pass it only once it has used
   * up max_deliver and stays in the stream (no DLQ mover moved it); a re-created consumer
   * then delivers it again, and a restart finds its record. By then the checkpoint's window
   * may no longer name it and its saved reply is another turn's.
   */
  async #park(env: A2AEnvelope, source: TurnSource): Promise<void> {
    const pending = this.deps.wal.pendingFor(this.id).find((r) => r.kind === TURN_KIND && parseTurnRecord(r.payload)?.envelope.id === env.id);
    const record = pending && parseTurnRecord(pending.payload);
    if (!pending || !record) return;
    let seq = pending.seq;
    // This attempt committed it, or it came back as a parked committed turn whose mark never reached the WAL.
    const committed = [source.record, source.recovered?.record].find((r) => r?.committed);
    if (committed && !record.committed) {
      markCommitted(record, committed.reply);
      try {
        seq = await this.deps.wal.replace(seq, record);
      } catch (err) {
        // The WAL now refuses every write and the node hands its actors over (docs/actors.md).
        this.log.error({ err, envelopeId: env.id }, "could not mark a parked committed turn in the WAL; only this process knows it is committed");
      }
    }
    (this.#parked ??= new Map()).set(env.id, { seq, record });
  }

  async #unhandled(env: A2AEnvelope, mctx?: MailboxContext): Promise<void> {
    const err = new KovaError(
      BusErrorCode.UNKNOWN_MESSAGE_TYPE,
      `actor ${this.id} (type ${this.def.type}) has no handler for ${env.type}; handled types: ${Object.keys(this.def.handlers).join(", ") || "(none)"}`,
      { data: { actorId: this.id, type: env.type } },
    );
    await this.deps.bus.deadLetter(env, ActorDlqReason.unhandled, { error: err });
    this.log.warn({ envelopeId: env.id, messageType: env.type }, "unhandled message type moved to the DLQ");
    this.event("actor_unhandled", { envelopeId: env.id, messageType: env.type });
    if (env.replyTo) await this.deps.bus.respond(env, null, { error: err, ...(mctx ? { encoding: mctx.encoding } : {}) }).catch(() => undefined);
  }

  #fail(env: A2AEnvelope, outcome: { error: unknown; attempts: number }): void {
    const error =
      outcome.error instanceof KovaError
        ? outcome.error.toWire()
        : { code: ActorErrorCode.ACTOR_FAILED, message: String((outcome.error as Error)?.message ?? outcome.error), retryable: false };
    this.log.error({ err: outcome.error, envelopeId: env.id, attempts: outcome.attempts }, "actor failed");
    this.lifecycle.transition("Failed", { envelopeId: env.id, attempts: outcome.attempts, error });
    this.event("actor_failed", { envelopeId: env.id, attempts: outcome.attempts, error, dlq: ActorDlqReason.handlerFailed });
    void this.#closeMailbox();
  }

  /**
   * The fast path answers from memory, without a turn, so nothing else fences it: it
   * answers only while this node can prove it still holds the lease, checked before the
   * read and again after it (an async rpc handler may have waited across a freeze).
   */
  async #answerRpc(env: A2AEnvelope): Promise<unknown> {
    this.#fenceFastPath();
    const answer = await this.#readFastPath(env);
    this.#fenceFastPath();
    return answer;
  }

  /**
   * Stays silent rather than refuses: every host of the actor's rpc subject gets each
   * request (no queue group), so while the actor moves the node it left and its new host
   * may both have it. The new host answers; a refusal from this node could reach the
   * caller first and cost it a retry, and would say nothing the caller needs.
   * @throws RpcDeclined when the lease cannot be proven now
   */
  #fenceFastPath(): void {
    try {
      this.deps.fenceNow(this.id);
    } catch (err) {
      if (!isLeaseLost(err)) throw err;
      throw new RpcDeclined(`node ${this.deps.nodeId} cannot prove that it holds the lease of ${this.id}: ${err.message}`);
    }
  }

  async #readFastPath(env: A2AEnvelope): Promise<unknown> {
    const rpc = this.def.rpc ?? {};
    if (env.type === "info_request") {
      const fn = rpc.info_request;
      return fn ? fn(env, this.memory.state) : { actorId: this.id, ...this.status() };
    }
    if (env.type === "capability_query") {
      const fn = rpc.capability_query;
      return fn ? fn(env, this.memory.state) : { actorId: this.id, type: this.def.type, capabilities: this.def.capabilities ?? [] };
    }
    throw new KovaError(
      BusErrorCode.UNKNOWN_MESSAGE_TYPE,
      `the fast path of ${this.id} answers info_request and capability_query; send ${env.type} to its durable inbox`,
      { data: { actorId: this.id, type: env.type } },
    );
  }

  /**
   * Applies a signal. pause: no new turn starts and the running turn holds at its next
   * step. resume: continue (also restarts a Failed actor). interrupt: abort the running
   * turn (its message is consumed). kill: abort the running turn (its message goes to the
   * DLQ), stop, Completed.
   */
  async signal(sig: Signal): Promise<void> {
    const state = this.lifecycle.state;
    switch (sig) {
      case "pause":
        if (state === "Completed" || state === "Failed") return;
        this.gate.pause();
        if (state !== "Created") this.lifecycle.transition("Paused", { signal: sig });
        return;
      case "resume":
        if (state === "Failed") {
          this.lifecycle.transition("Idle", { signal: sig });
          await this.#open();
          return;
        }
        this.gate.resume();
        if (state === "Paused") {
          const back = this.#recovering ? "Recovering" : this.#turn ? "Running" : "Idle";
          this.lifecycle.transition(back, { signal: sig });
        }
        return;
      case "interrupt":
        this.#turn?.abort.abort(new TurnInterruptedError(this.id, "interrupt"));
        return;
      case "kill":
        this.#turn?.abort.abort(new TurnInterruptedError(this.id, "kill"));
        await this.leave("killed");
        return;
    }
  }

  /**
   * Interrupts the turn of one message: now if it is running, else when it starts on this
   * host (remembered for `INTERRUPT_MEMORY_MS`, at most `INTERRUPT_MEMORY` messages). Unlike
   * the plain `interrupt` signal it never cuts another message's turn, so a delegator can
   * cancel the work it asked for without ending whatever else the actor is doing.
   */
  interruptMessage(messageId: string): "interrupted" | "when_started" {
    if (this.#turn?.env.id === messageId) {
      this.#turn.abort.abort(new TurnInterruptedError(this.id, "interrupt"));
      return "interrupted";
    }
    const now = Date.now();
    const pending = (this.#interruptOnStart ??= new Map());
    for (const [id, until] of pending) if (until < now || pending.size >= INTERRUPT_MEMORY) pending.delete(id);
    pending.set(messageId, now + INTERRUPT_MEMORY_MS);
    return "when_started";
  }

  /**
   * Stops taking messages, lets the running turn finish, closes rpc and ends in Completed.
   * A turn held by pause, or still running after `drainTimeoutMs`, is stopped instead: its
   * WAL record stays PENDING and its message is redelivered to the actor's next host.
   */
  /** Resolves when a leave that has begun is over; undefined while the actor stays. */
  get leaving(): Promise<void> | undefined {
    return this.#left;
  }

  leave(reason: string, drainTimeoutMs?: number): Promise<void> {
    this.#left ??= this.#leave(reason, drainTimeoutMs);
    return this.#left;
  }

  async #leave(reason: string, drainTimeoutMs?: number): Promise<void> {
    this.#leaving = true;
    this.#owedReplies?.stop();
    const cut = () => this.#turn?.abort.abort(new TurnInterruptedError(this.id, "stop"));
    if (this.gate.paused) cut();
    this.gate.resume();
    const timer = drainTimeoutMs === undefined ? undefined : setTimeout(cut, drainTimeoutMs);
    await this.#closeMailbox();
    clearTimeout(timer);
    await this.#rpc?.stop().catch((err: unknown) => this.log.warn({ err }, "rpc stop failed"));
    this.#rpc = undefined;
    this.lifecycle.tryTransition("Completed", { reason });
    // Events are best effort: a slow or absent NATS must not keep a leaving actor hosted.
    await Promise.race([this.#events, new Promise<void>((r) => setTimeout(r, EVENT_FLUSH_MS).unref())]);
    this.onGone(this);
  }

  /** Publishes an actor event on `kova.<c>.events.actors.<actorId>`, in order, never failing the caller. */
  event(type: string, data: Record<string, unknown>): void {
    const event = {
      type,
      sessionId: "actors",
      runId: this.id,
      ts: Date.now(),
      data: { actorId: this.id, actorType: this.def.type, nodeId: this.deps.nodeId, ...data },
    };
    this.#events = this.#events
      .then(() => this.deps.bus.publishEvent(event))
      .catch((err: unknown) => this.log.warn({ err, type }, "could not publish an actor event"));
  }

  #reportState(state: ActorState, previous: ActorState, info: unknown): void {
    try {
      this.deps.onStateChange(this.id, state, info);
    } catch (err) {
      this.log.warn({ err }, "onStateChange listener threw");
    }
    const perTurn = typeof info === "object" && info !== null && (info as { turn?: boolean }).turn === true;
    if (perTurn && !this.deps.turnEvents) return;
    this.event("actor_state", { state, previous, ...(typeof info === "object" && info !== null ? info : {}) });
  }
}
