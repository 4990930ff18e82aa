import { AckPolicy, DeliverPolicy, type ConsumerConfig } from "@nats-io/jetstream";
import { JetStreamStatus } from "@nats-io/jetstream/internal";
import { nanos, type Msg } from "@nats-io/transport-node";
import { backoffMs, sleep, isKovaError, type Logger, assertId, markPhase } from "../core/index.js";
import { decodeValue, encodingOf, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { validateEnvelope, type A2AEnvelope } from "./envelope.js";
import { InvalidEnvelopeError, type DecodeError, BusErrorCode } from "./errors.js";
import { publishDlq } from "./dlq.js";
import { replyToProblem } from "./reply-subject.js";
import { DlqReason } from "./wire.js";
import { nakNow, PullInbox, type PullTarget } from "./pull-inbox.js";
import { PulledMsg } from "./pulled-msg.js";
import { isConsumerExists, isConsumerNotFound, isTransientNatsError } from "./nats-errors.js";
import { consumerRequest } from "./consumer-tries.js";

/** What a handler gets besides the envelope. */
export interface MailboxContext {
  /** 1 on first delivery; higher after a nak, an ack timeout or a crashed host. */
  deliveryCount: number;
  /** Extends the ack deadline; the mailbox also calls it on a timer while the handler runs. */
  working(): void;
  /** Aborted when the mailbox is stopping: finish or give up early (the message is then redelivered). */
  signal: AbortSignal;
  /** The message's sequence in the A2A stream. */
  seq: number;
  /** How the message was encoded, so a reply can use the same encoding. */
  encoding: Encoding;
}

/**
 * Resolve → the message is acked. Throw → nak with backoff, redelivered in order; except
 * a transient NATS failure (see `transientRetryMs`), after which the handler runs again
 * in place.
 */
export type MailboxHandler = (env: A2AEnvelope, ctx: MailboxContext) => Promise<void>;

export interface MailboxOptions {
  /** Redelivery deadline after a host dies silently (default 30 s). Heartbeats extend it while a handler runs. */
  ackWaitMs?: number;
  /** Deliveries before a message goes to the DLQ via the MAX_DELIVERIES advisory (default 5). */
  maxDeliver?: number;
  /** Nak delay after the n-th failed delivery (last value repeats). Default [1 s, 5 s, 15 s, 30 s]. */
  backoffMs?: number[];
  /** Durable consumer name (default `agent_<agentId>`). */
  durableName?: string;
  /** Interval of automatic `working()` heartbeats; 0 disables them. Default ackWaitMs / 3. */
  heartbeatMs?: number;
  /** Dead-letter messages whose `deadline` passed before delivery (default true). */
  dropExpired?: boolean;
  /**
   * Lifetime of an idle mailbox's pull request (default 10 s). A pull lost with a server
   * (clustered NATS failover) is re-issued at most this + 2 s later; on a reconnect at once.
   */
  pullExpiresMs?: number;
  /**
   * How long a handler that fails because NATS is briefly unavailable (a timeout, no
   * responders, JetStream not ready or answering 503: a server restart or a leader
   * election) is run again in place, the message kept by heartbeats, before it is nak'd
   * (default 60 s). A nak spends one of the message's `maxDeliver` deliveries: an
   * election of a few seconds would otherwise push messages into the DLQ that nothing
   * is wrong with.
   */
  transientRetryMs?: number;
}

export interface Mailbox {
  readonly agentId: string;
  readonly consumerName: string;
  /** Stops taking messages and waits for the in-flight one (its handler sees `signal` aborted). */
  stop(): Promise<void>;
  /** Stops and deletes the durable consumer (messages stay in the stream for a later mailbox). */
  deleteConsumer(): Promise<void>;
}

const RECENT_IDS = 1024;
const encoder = new TextEncoder();

/**
 * Opens an agent's durable mailbox: one pull consumer per agent with explicit ack and
 * `max_ack_pending: 1`, so the agent sees one message at a time, in order, cluster-wide.
 * The mailbox pulls one message at a time (`batch: 1`) because ack_wait starts when the
 * server delivers, not when the handler starts; its pulls share one inbox per connection
 * ({@link PullInbox}), so an idle mailbox holds no subscription, iterator or timer. Undecodable or invalid
 * messages go to the DLQ and the mailbox goes on with the next one.
 * @throws InvalidIdError for a bad agent id; JetStream errors when the A2A stream is missing
 */
export async function openMailbox(ctx: BusContext, agentId: string, handler: MailboxHandler, opts: MailboxOptions = {}): Promise<Mailbox> {
  assertId("agent id", agentId);
  const mb = new MailboxImpl(ctx, agentId, handler, opts);
  await mb.ensureConsumer();
  mb.start();
  return mb;
}

/** Answers nobody sent or lost before the next sweep re-pulls; see {@link PullInbox}. */
const PULL_GRACE_MS = 2_000;
/** Wait before pulling again after an error status (503 during an election, 409…). */
const RETRY_MS = 500;

class MailboxImpl implements Mailbox, PullTarget {
  readonly consumerName: string;
  private readonly ackWaitMs: number;
  private readonly maxDeliver: number;
  private readonly backoff: number[];
  private readonly heartbeatMs: number;
  private readonly expiresMs: number;
  // Everything below is kept small or created lazily: a node holds one of these per idle
  // actor, and an idle mailbox is only a pull request waiting on the server.
  private abort: AbortController | undefined;
  private recent: Map<string, true> | undefined;
  private logger: Logger | undefined;
  private readonly inbox: PullInbox;
  private token = "";
  private gen = 0;
  /** performance.now() of the last pull sent, or of the error status that ended it. */
  private pulledAt = 0;
  /** A pull of generation `gen` is waiting on the server. */
  private pulling = false;
  private noResponders = 0;
  private chain: Promise<void> = Promise.resolve();
  private stopping = false;
  private busy = 0;

  constructor(
    private readonly ctx: BusContext,
    readonly agentId: string,
    private readonly handler: MailboxHandler,
    private readonly opts: MailboxOptions,
  ) {
    this.consumerName = opts.durableName ?? ctx.subjects.consumer(agentId);
    this.ackWaitMs = opts.ackWaitMs ?? 30_000;
    this.maxDeliver = opts.maxDeliver ?? 5;
    this.backoff = opts.backoffMs?.length ? opts.backoffMs : [1_000, 5_000, 15_000, 30_000];
    this.heartbeatMs = opts.heartbeatMs ?? Math.max(100, Math.floor(this.ackWaitMs / 3));
    this.expiresMs = opts.pullExpiresMs ?? 10_000;
    this.inbox = PullInbox.for(ctx.nc);
  }

  private get stream(): string {
    return this.ctx.subjects.streams.a2a;
  }

  private get log(): Logger {
    return (this.logger ??= this.ctx.log.child({ agentId: this.agentId }));
  }

  private get signal(): AbortSignal {
    this.abort ??= new AbortController();
    if (this.stopping && !this.abort.signal.aborted) this.abort.abort(new Error(`mailbox ${this.agentId} stopping`));
    return this.abort.signal;
  }

  private config(): Partial<ConsumerConfig> {
    return {
      durable_name: this.consumerName,
      filter_subject: this.ctx.subjects.a2a(this.agentId),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      max_ack_pending: 1,
      ack_wait: nanos(this.ackWaitMs),
      max_deliver: this.maxDeliver,
    };
  }

  /** Creates the durable consumer, or updates the settings a restart may change. */
  async ensureConsumer(): Promise<void> {
    const cfg = this.config();
    // In tries (consumer-tries.ts): a takeover waits for this create.
    try {
      await consumerRequest(this.ctx.nc, (jsm) => jsm.consumers.add(this.stream, cfg));
    } catch (err) {
      if (!isConsumerExists(err)) throw err;
      await consumerRequest(this.ctx.nc, (jsm) =>
        jsm.consumers.update(this.stream, this.consumerName, {
          ack_wait: cfg.ack_wait!,
          max_deliver: cfg.max_deliver!,
          max_ack_pending: 1,
        }),
      );
    }
  }

  start(): void {
    this.token = this.inbox.add(this, this.stream, this.consumerName);
    this.pull();
  }

  /**
   * Asks the server for the next message (`batch: 1`: ack_wait starts when the server
   * delivers, not when the handler starts). With `max_ack_pending: 1` the server holds
   * the message back until the previous one is acked, so order is strict cluster-wide.
   */
  private pull(): void {
    if (this.stopping || this.ctx.nc.isClosed()) return;
    this.gen++;
    this.pulling = true;
    this.pulledAt = performance.now();
    try {
      this.ctx.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${this.consumerName}`, encoder.encode(`{"batch":1,"expires":${nanos(this.expiresMs)}}`), {
        reply: this.inbox.replySubject(this.token, this.gen),
      });
    } catch (err) {
      // Closed or draining: the sweep tries again if the connection comes back.
      this.pulling = false;
      this.log.debug({ err }, "pull request not sent");
    }
  }

  /** Called by the shared sweep every second and on reconnect. */
  repull(now: number, force: boolean): void {
    if (this.stopping || this.busy > 0) return;
    if (force) {
      this.pull();
      return;
    }
    if (this.pulling ? now - this.pulledAt > this.expiresMs + PULL_GRACE_MS : now - this.pulledAt >= RETRY_MS) this.pull();
  }

  onDelivery(msg: Msg): void {
    // Taken to have used the current pull; if an older duplicate (after a reconnect)
    // delivered it instead, the current one still waits and expires unused.
    this.pulling = false;
    this.noResponders = 0;
    if (this.stopping) {
      nakNow(this.ctx.nc, msg.reply!);
      return;
    }
    markPhase("mailbox.delivered", this.agentId);
    const m = new PulledMsg(this.ctx.nc, msg);
    this.busy++;
    this.chain = this.chain
      .then(() => this.handle(m))
      .catch((err: unknown) => this.log.error({ err, seq: m.seq }, "mailbox failed to settle a message"))
      .finally(() => {
        // The next pull goes out right behind the ack, in the same write to the server.
        if (--this.busy === 0 && !this.pulling) this.pull();
      });
  }

  onPullStatus(msg: Msg, gen: number): void {
    if (gen !== this.gen) return; // the answer to a pull that a later one replaced
    this.pulling = false;
    const code = msg.headers?.code ?? 0;
    if (code === 100) {
      this.pulling = true; // an idle heartbeat: the pull is alive
      return;
    }
    if (code === 408) {
      // The pull expired with nothing to deliver: the normal idle cycle.
      if (this.busy === 0) this.pull();
      return;
    }
    // 503 (no consumer leader: an election, or the consumer is gone), 409 (deleted,
    // too many waiting pulls, leadership change): the sweep pulls again after RETRY_MS.
    this.pulledAt = performance.now();
    const status = new JetStreamStatus(msg);
    const description = status.description;
    if (code === 503) this.noResponders++;
    if (status.isConsumerDeleted() || status.isStreamDeleted() || (code === 503 && this.noResponders % 5 === 0)) {
      this.log.warn({ code, description }, "mailbox pull refused; making sure the consumer exists");
      void this.ensureConsumer().catch((err: unknown) => this.log.debug({ err }, "consumer not ensured yet"));
    } else {
      this.log.debug({ code, description }, "mailbox pull refused; pulling again");
    }
  }

  private async handle(m: PulledMsg): Promise<void> {
    let env: A2AEnvelope;
    const encoding = encodingOf(m.headers);
    try {
      env = validateEnvelope(decodeValue(m.data, encoding, this.ctx.limits, m.subject));
      if (env.to !== this.agentId) {
        throw new InvalidEnvelopeError("to", `is ${JSON.stringify(env.to)} but the message arrived in ${this.agentId}'s inbox (${m.subject})`);
      }
      const badReply = env.replyTo === undefined ? undefined : replyToProblem(env.replyTo, this.ctx.subjects, this.ctx.inboxPrefixes);
      if (badReply) throw new InvalidEnvelopeError("replyTo", badReply);
    } catch (err) {
      return this.deadLetter(m, reasonFor(err), err);
    }
    if (env.deadline !== undefined && env.deadline < Date.now() && this.opts.dropExpired !== false) {
      return this.deadLetter(m, DlqReason.expired, new Error(`deadline ${new Date(env.deadline).toISOString()} passed before delivery`));
    }
    if (this.recent?.has(env.id)) {
      // Handled here already; the ack was lost. Guarantee 1: no second turn.
      this.log.debug({ id: env.id }, "duplicate delivery acked without running the handler");
      return this.ack(m);
    }
    const deliveryCount = m.deliveryCount;
    // Heartbeats only while a handler runs: they extend the ack deadline of this message,
    // so a long turn is not redelivered to another host. An idle mailbox has no timer.
    const working = this.workingSignal(m);
    const heartbeat = this.heartbeatMs > 0 ? setInterval(working, this.heartbeatMs) : undefined;
    heartbeat?.unref();
    try {
      await this.runHandler(env, {
        deliveryCount,
        working,
        signal: this.signal,
        seq: m.seq,
        encoding,
      });
    } catch (err) {
      clearInterval(heartbeat);
      const delay = deliveryCount >= this.maxDeliver ? 0 : this.backoff[Math.min(deliveryCount, this.backoff.length) - 1]!;
      this.log.warn({ err, id: env.id, deliveryCount, retryInMs: delay }, "handler failed; message will be redelivered");
      m.nak(delay);
      return;
    }
    clearInterval(heartbeat);
    this.remember(env.id);
    if (this.stopping) await this.ack(m);
    else m.ack(); // the common case, without another await on the hot path
    markPhase("mailbox.ack", this.agentId);
  }

  /** The handler, run again after a transient NATS failure while the budget lasts and the mailbox is open. */
  private async runHandler(env: A2AEnvelope, ctx: MailboxContext): Promise<void> {
    const started = performance.now();
    const budget = this.opts.transientRetryMs ?? 60_000;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.handler(env, ctx);
        return;
      } catch (err) {
        const transient = isTransientNatsError(err) || isKovaError(err, BusErrorCode.NATS_UNREACHABLE) || isKovaError(err, BusErrorCode.JETSTREAM_UNAVAILABLE);
        if (!transient || this.stopping || performance.now() - started > budget) throw err;
        const delay = backoffMs(attempt, 100, 2_000);
        this.log.info(
          { err, id: env.id, attempt, retryInMs: delay },
          "handler hit a NATS outage; running it again in place (the message keeps its deliveries)",
        );
        await sleep(delay, this.signal).catch(() => {
          throw err;
        });
      }
    }
  }

  /**
   * `working()` for one message, sending at most one `+WPI` per tenth of ack_wait (at most
   * per second): an agent calls it for every streamed token, and one publish per token
   * would double the node's NATS traffic while it streams. A skipped call leaves the ack
   * deadline at least 90 % of ack_wait away.
   */
  private workingSignal(m: PulledMsg): () => void {
    const minGapMs = Math.min(1_000, this.ackWaitMs / 10);
    let last = m.receivedAt;
    return () => {
      const now = performance.now();
      if (now - last < minGapMs) return;
      last = now;
      m.working();
    };
  }

  /**
   * A plain ack, not ackAck: waiting for the server's confirmation halves a mailbox's
   * throughput (measured, docs/benchmarks.md), because `max_ack_pending: 1` makes every
   * message wait for the previous ack. A lost ack only means a redelivery after
   * ack_wait, which `recent` (here) and the actor WAL (elsewhere) recognise by id.
   * When stopping, the ack is flushed so that it reaches the server before close.
   */
  private async ack(m: PulledMsg): Promise<void> {
    m.ack();
    if (this.stopping) await this.ctx.nc.flush().catch((err: unknown) => this.log.warn({ err, seq: m.seq }, "ack not flushed"));
  }

  private async deadLetter(m: PulledMsg, reason: DlqReason, err: unknown): Promise<void> {
    try {
      await publishDlq(this.ctx, m.data, {
        reason,
        error: err,
        subject: m.subject,
        headers: m.headers,
        stream: this.stream,
        streamSeq: m.seq,
        deliveries: m.deliveryCount,
        agentId: this.agentId,
      });
    } catch (dlqErr) {
      this.log.error({ err: dlqErr, seq: m.seq }, "could not store a dead letter; retrying later");
      m.nak(this.backoff[0]);
      return;
    }
    await this.ack(m);
  }

  private remember(id: string): void {
    const recent = (this.recent ??= new Map());
    recent.set(id, true);
    if (recent.size > RECENT_IDS) recent.delete(recent.keys().next().value!);
  }

  /**
   * No pull is sent while a message is in flight, so stopping leaves at most the idle
   * pull on the server; a message it still brings is handed back at once (nak) by the
   * shared inbox, for the next host's pull.
   */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.stopping = true;
      this.inbox.remove(this.token, this.stream, this.consumerName);
      this.abort?.abort(new Error(`mailbox ${this.agentId} stopping`));
    }
    await this.chain;
  }

  async deleteConsumer(): Promise<void> {
    await this.stop();
    await this.ctx.jsm.consumers.delete(this.stream, this.consumerName).catch((err: unknown) => {
      if (!isConsumerNotFound(err)) throw err;
    });
  }
}

function reasonFor(err: unknown): DlqReason {
  if (isKovaError(err, BusErrorCode.DECODE_FAILED)) {
    return (err as DecodeError).format === "json" ? DlqReason.invalidJson : DlqReason.malformedMsgpack;
  }
  if (isKovaError(err, BusErrorCode.PAYLOAD_TOO_LARGE)) return DlqReason.payloadTooLarge;
  if (isKovaError(err, BusErrorCode.UNKNOWN_MESSAGE_TYPE)) return DlqReason.unknownType;
  return DlqReason.invalidEnvelope;
}
