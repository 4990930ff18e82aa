import { AckPolicy, DeliverPolicy, type ConsumerConfig, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { ErrorCode, isKovaError } from "../core/errors.js";
import { sleep } from "../core/clock.js";
import { assertId } from "../core/ids.js";
import { decodeValue, encodingOf, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { validateEnvelope, type A2AEnvelope } from "./envelope.js";
import { InvalidEnvelopeError, type DecodeError } from "./errors.js";
import { publishDlq } from "./dlq.js";
import { DlqReason } from "./wire.js";

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

/** Resolve → the message is acked. Throw → nak with backoff, redelivered in order. */
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

/**
 * Opens an agent's durable mailbox: one pull consumer per agent with explicit ack and
 * `max_ack_pending: 1`, so the agent sees one message at a time, in order, cluster-wide.
 * The consumer pulls one message at a time (`max_messages: 1`) because ack_wait starts
 * when the server delivers, not when the handler starts. Undecodable or invalid
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

class MailboxImpl implements Mailbox {
  readonly consumerName: string;
  private readonly stream: string;
  private readonly ackWaitMs: number;
  private readonly maxDeliver: number;
  private readonly backoff: number[];
  private readonly heartbeatMs: number;
  private readonly abort = new AbortController();
  private readonly recent = new Map<string, true>();
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> = Promise.resolve();
  private stopping = false;
  private busy = 0;
  private current: JsMsg | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private readonly log;

  constructor(
    private readonly ctx: BusContext,
    readonly agentId: string,
    private readonly handler: MailboxHandler,
    private readonly opts: MailboxOptions,
  ) {
    this.consumerName = opts.durableName ?? ctx.subjects.consumer(agentId);
    this.stream = ctx.subjects.streams.a2a;
    this.ackWaitMs = opts.ackWaitMs ?? 30_000;
    this.maxDeliver = opts.maxDeliver ?? 5;
    this.backoff = opts.backoffMs?.length ? opts.backoffMs : [1_000, 5_000, 15_000, 30_000];
    this.heartbeatMs = opts.heartbeatMs ?? Math.max(100, Math.floor(this.ackWaitMs / 3));
    this.log = ctx.log.child({ agentId });
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
    try {
      await this.ctx.jsm.consumers.add(this.stream, cfg);
    } catch (err) {
      if (!/already (exists|in use)/i.test(String(err))) throw err;
      await this.ctx.jsm.consumers.update(this.stream, this.consumerName, {
        ack_wait: cfg.ack_wait!,
        max_deliver: cfg.max_deliver!,
        max_ack_pending: 1,
      });
    }
  }

  start(): void {
    // One timer per mailbox, not per message: it extends the ack deadline of whatever
    // message is being handled, so a long turn is not redelivered to another host.
    if (this.heartbeatMs > 0) {
      this.heartbeat = setInterval(() => this.current?.working(), this.heartbeatMs);
      this.heartbeat.unref();
    }
    this.loop = this.run().catch((err: unknown) => this.log.error({ err }, "mailbox loop failed"));
  }

  private async run(): Promise<void> {
    while (!this.stopping && !this.ctx.nc.isClosed()) {
      try {
        const consumer = await this.ctx.js.consumers.get(this.stream, this.consumerName);
        const messages = await consumer.consume({ max_messages: 1 });
        this.messages = messages;
        if (this.stopping) {
          messages.stop();
          return;
        }
        let chain: Promise<void> = Promise.resolve();
        for await (const m of messages) {
          this.busy++;
          // Not awaited: going back to the iterator sends the next pull request now,
          // so the server hands over the next message the moment this one is acked
          // (max_ack_pending 1 keeps it from coming earlier). Handlers still run one
          // at a time, in order, through the chain.
          chain = chain
            .then(() => this.handle(m))
            .catch((err: unknown) => this.log.error({ err, seq: m.seq }, "mailbox failed to settle a message"))
            .finally(() => {
              // A stop() that came while this message was in flight ends the pull here
              // if `release()` did not get to it.
              if (--this.busy === 0 && this.stopping) this.messages?.stop();
            });
          if (this.stopping) break;
        }
        await chain;
      } catch (err) {
        if (this.stopping || this.ctx.nc.isClosed()) return;
        this.log.warn({ err }, "mailbox consumer interrupted; resuming");
        if (/not found/i.test(String(err))) await this.ensureConsumer().catch(() => undefined);
        await sleep(500);
      } finally {
        this.messages?.stop();
        this.messages = undefined;
      }
    }
  }

  private async handle(m: JsMsg): Promise<void> {
    let env: A2AEnvelope;
    const encoding = encodingOf(m.headers);
    try {
      env = validateEnvelope(decodeValue(m.data, encoding, this.ctx.limits, m.subject));
      if (env.to !== this.agentId) {
        throw new InvalidEnvelopeError("to", `is ${JSON.stringify(env.to)} but the message arrived in ${this.agentId}'s inbox (${m.subject})`);
      }
    } catch (err) {
      return this.deadLetter(m, reasonFor(err), err);
    }
    if (env.deadline !== undefined && env.deadline < Date.now() && this.opts.dropExpired !== false) {
      return this.deadLetter(m, DlqReason.expired, new Error(`deadline ${new Date(env.deadline).toISOString()} passed before delivery`));
    }
    if (this.recent.has(env.id)) {
      // Handled here already; the ack was lost. Guarantee 1: no second turn.
      this.log.debug({ id: env.id }, "duplicate delivery acked without running the handler");
      return this.ack(m);
    }
    const info = m.info;
    const deliveryCount = info.deliveryCount;
    this.current = m;
    try {
      await this.handler(env, {
        deliveryCount,
        working: () => m.working(),
        signal: this.abort.signal,
        seq: info.streamSequence,
        encoding,
      });
    } catch (err) {
      this.current = undefined;
      this.release();
      const delay = deliveryCount >= this.maxDeliver ? 0 : this.backoff[Math.min(deliveryCount, this.backoff.length) - 1]!;
      this.log.warn({ err, id: env.id, deliveryCount, retryInMs: delay }, "handler failed; message will be redelivered");
      m.nak(delay);
      return;
    }
    this.current = undefined;
    this.remember(env.id);
    this.release();
    if (this.stopping) await this.ack(m);
    else m.ack(); // the common case, without another await on the hot path
  }

  /**
   * When stopping, unsubscribe before acking: the ack frees `max_ack_pending` and the
   * server would otherwise hand the next message to our pending pull, where it would
   * sit un-acked for a whole ack_wait before another host could take it.
   */
  private release(): void {
    if (this.stopping) this.messages?.stop();
  }

  /**
   * A plain ack, not ackAck: waiting for the server's confirmation halves a mailbox's
   * throughput (measured, docs/benchmarks.md), because `max_ack_pending: 1` makes every
   * message wait for the previous ack. A lost ack only means a redelivery after
   * ack_wait, which `recent` (here) and the actor WAL (elsewhere) recognise by id.
   * When stopping, the ack is flushed so that it reaches the server before close.
   */
  private async ack(m: JsMsg): Promise<void> {
    m.ack();
    if (this.stopping) await this.ctx.nc.flush().catch((err: unknown) => this.log.warn({ err, seq: m.seq }, "ack not flushed"));
  }

  private async deadLetter(m: JsMsg, reason: DlqReason, err: unknown): Promise<void> {
    try {
      await publishDlq(this.ctx, m.data, {
        reason,
        error: err,
        subject: m.subject,
        headers: m.headers,
        stream: this.stream,
        streamSeq: m.seq,
        deliveries: m.info.deliveryCount,
        agentId: this.agentId,
      });
    } catch (dlqErr) {
      this.log.error({ err: dlqErr, seq: m.seq }, "could not store a dead letter; retrying later");
      m.nak(this.backoff[0]);
      return;
    }
    this.release();
    await this.ack(m);
  }

  private remember(id: string): void {
    this.recent.set(id, true);
    if (this.recent.size > RECENT_IDS) this.recent.delete(this.recent.keys().next().value!);
  }

  async stop(): Promise<void> {
    if (!this.stopping) {
      this.stopping = true;
      this.abort.abort(new Error(`mailbox ${this.agentId} stopping`));
      // Idle: end the pull now. Busy: `release()` ends it before the ack.
      if (this.busy === 0) this.messages?.stop();
    }
    await this.loop;
    clearInterval(this.heartbeat);
  }

  async deleteConsumer(): Promise<void> {
    await this.stop();
    await this.ctx.jsm.consumers.delete(this.stream, this.consumerName).catch((err: unknown) => {
      if (!/not found/i.test(String(err))) throw err;
    });
  }
}

function reasonFor(err: unknown): DlqReason {
  if (isKovaError(err, ErrorCode.DECODE_FAILED)) {
    return (err as DecodeError).format === "json" ? DlqReason.invalidJson : DlqReason.malformedMsgpack;
  }
  if (isKovaError(err, ErrorCode.PAYLOAD_TOO_LARGE)) return DlqReason.payloadTooLarge;
  if (isKovaError(err, ErrorCode.UNKNOWN_MESSAGE_TYPE)) return DlqReason.unknownType;
  return DlqReason.invalidEnvelope;
}
