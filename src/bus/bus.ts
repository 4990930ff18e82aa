import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager, type PubAck } from "@nats-io/jetstream";
import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import { assertId, newId, componentLogger, silentLogger, type Logger } from "../core/index.js";
import { publishToStream } from "./acked-publish.js";
import { ask, respond, type AskOptions, type RespondOptions } from "./ask.js";
import { DEFAULT_CODEC_LIMITS, storedEnvelopeId, type CodecLimits } from "./codec.js";
import { connectNats } from "./connection.js";
import type { BusContext } from "./context.js";
import { sweepUnknownAgents, type UnknownAgentSweep } from "./unknown-agents.js";
import { requestActivation, type ActivationReply } from "./activation.js";
import { addressableAgent } from "./agent-check.js";
import { deadLetterEnvelope, listDlq, startDlqMover, type DeadLetterOptions, type DlqEntry, type DlqMover } from "./dlq.js";
import type { A2AEnvelope, MessageType } from "./envelope.js";
import { BusClosedError, JetStreamUnavailableError, typedNatsError } from "./errors.js";
import { redactUrl, type NatsSecurity } from "./nats-security.js";
import { DEFAULT_INBOX_PREFIX } from "./reply-subject.js";
import { ReplyGuard } from "./reply-guard.js";
import { SenderIdentity, type BusPrincipal, type SenderTrust } from "./principals.js";
import { serveIngress } from "./ingress.js";
import { publishEvent, subscribeEvents, type EventStream, type KovaEvent, type PublishEventOptions } from "./events.js";
import { readStoredEvents, type StoredEventsFrom, type StoredEventsReader } from "./stored-events.js";
import { openMailbox, type Mailbox, type MailboxHandler, type MailboxOptions } from "./mailbox.js";
import { RequestMux } from "./request-mux.js";
import { request, serveRpc, type RequestOptions, type RpcHandler, type RpcService, type ServeRpcOptions } from "./rpc.js";
import { sendEnvelope, type SendOptions } from "./send.js";
import { ensureStreams, type StreamOptions } from "./streams.js";
import { subjectsFor, type Subjects } from "./subjects.js";
import { Header, type DlqReason } from "./wire.js";
import { isConsumerNotFound, isJetStreamNotEnabled, isJetStreamNotReady, isMessageGone } from "./nats-errors.js";
import { consumerRequest } from "./consumer-tries.js";

export interface BusConnectOptions {
  /** One URL, a comma-separated list or an array (a client fails over between them). */
  servers: string | string[];
  /** Cluster name: the `<c>` in `kova.<c>.…` (default "default"). */
  cluster?: string;
  /** Connection name shown in `/connz`. */
  name?: string;
  /** Where its lines go; none: it writes nothing (a library stays quiet inside someone else's service). */
  logger?: Logger;
  /** Decode limits; maxBytes defaults to the server's max_payload. */
  limits?: Partial<CodecLimits>;
  connectTimeoutMs?: number;
  /** The `from` of requests that name no sender (default `client_<random>`). */
  clientId?: string;
  /** Credentials, TLS and this connection's inbox prefix. */
  security?: NatsSecurity;
  /** Ask the server whether JetStream is enabled at connect (default true; a least-privilege client cannot). */
  checkJetStream?: boolean;
  /**
   * Further inbox prefixes a received message's `replyTo` may use (this connection's own
   * and `_INBOX` are always allowed): the prefixes the account grants to clients.
   */
  replyPrefixes?: string[];
  /**
   * Which senders act for others (principals.ts): messages from users of other NATS
   * accounts are held to what those users own. Default: no account is trusted.
   */
  senders?: SenderTrust;
}

/**
 * Kova's A2A bus over one NATS connection: durable mailboxes on JetStream, the fast
 * request path, events and the DLQ. Reconnects forever; `close()` ends it.
 */
export class Bus {
  private readonly ctx: BusContext;
  private readonly mailboxes = new Set<Mailbox>();
  private readonly services = new Set<RpcService | DlqMover | { stop(): Promise<void> }>();
  private closing: Promise<void> | undefined;

  private constructor(ctx: BusContext) {
    this.ctx = ctx;
  }

  /**
   * @throws NatsUnreachableError (`NATS unreachable at URL X: start nats-server or set NATS_URL`)
   * @throws JetStreamUnavailableError when the server has no JetStream (or not yet: a cluster electing leaders); InvalidIdError for a bad cluster name
   */
  static async connect(opts: BusConnectOptions): Promise<Bus> {
    const cluster = opts.cluster ?? "default";
    const subjects = subjectsFor(cluster);
    const log = componentLogger(opts.logger ?? silentLogger(), "bus", { cluster });
    const nc = await connectNats({
      servers: opts.servers,
      name: opts.name ?? "kova",
      logger: log,
      ...(opts.connectTimeoutMs ? { connectTimeoutMs: opts.connectTimeoutMs } : {}),
      ...(opts.security ? { security: opts.security } : {}),
    });
    let jsm: JetStreamManager;
    try {
      // A least-privilege client may not call $JS.API.INFO: it skips the check, and a
      // missing JetStream shows up as the send's error instead.
      jsm = await jetstreamManager(nc, { checkAPI: opts.checkJetStream !== false });
    } catch (err) {
      await nc.close();
      // Only a server without JetStream (or not yet with a leader) is JETSTREAM_UNAVAILABLE;
      // a refused or timed-out check says so, typed, instead of sending the user to -js.
      if (isJetStreamNotEnabled(err) || isJetStreamNotReady(err)) throw new JetStreamUnavailableError(redactUrl(nc.getServer()), { cause: err });
      throw typedNatsError(err, `the JetStream check ($JS.API.INFO) on NATS at ${redactUrl(nc.getServer())}`);
    }
    const maxPayload = nc.info?.max_payload ?? DEFAULT_CODEC_LIMITS.maxBytes;
    const clientId = assertId("client id", opts.clientId ?? `client_${newId().replaceAll("-", "").slice(0, 16)}`);
    const inboxPrefixes = [
      ...new Set([DEFAULT_INBOX_PREFIX, ...(opts.security?.inboxPrefix ? [opts.security.inboxPrefix] : []), ...(opts.replyPrefixes ?? [])]),
    ];
    return new Bus({
      nc,
      js: jetstream(nc),
      jsm,
      cluster,
      subjects,
      maxPayload,
      limits: { maxBytes: opts.limits?.maxBytes ?? maxPayload, maxDepth: opts.limits?.maxDepth ?? DEFAULT_CODEC_LIMITS.maxDepth },
      log,
      clientId,
      mux: new RequestMux(nc),
      inboxPrefixes,
      replies: new ReplyGuard(inboxPrefixes, log),
      senders: new SenderIdentity(opts.senders),
    });
  }

  get nc(): NatsConnection {
    return this.ctx.nc;
  }
  get js(): JetStreamClient {
    return this.ctx.js;
  }
  get jsm(): JetStreamManager {
    return this.ctx.jsm;
  }
  get cluster(): string {
    return this.ctx.cluster;
  }
  get subjects(): Subjects {
    return this.ctx.subjects;
  }
  /** The server's max_payload in bytes (headers included). */
  get maxPayload(): number {
    return this.ctx.maxPayload;
  }
  /** The decode limits this bus applies to what it reads (for bodies read outside the bus, e.g. control requests). */
  get limits(): Readonly<CodecLimits> {
    return this.ctx.limits;
  }
  get clientId(): string {
    return this.ctx.clientId;
  }
  /** Decides which core requests' reply subjects this process answers (see ReplyGuard). */
  get replies(): ReplyGuard {
    return this.ctx.replies;
  }

  /**
   * Creates the A2A (WorkQueue), EVENTS, DLQ and JOURNAL streams, or checks existing ones.
   * @throws StreamConflictError naming the stream and the differing field
   */
  ensureStreams(opts?: StreamOptions): Promise<void> {
    return ensureStreams(this.ctx.jsm, this.ctx.subjects, opts, this.ctx.log);
  }

  /**
   * Durable send; resolves after the JetStream ack. `Nats-Msg-Id` = `env.id`.
   * @throws InvalidEnvelopeError, PayloadTooLargeError (recorded in the DLQ), KovaNoRespondersError, KovaTimeoutError
   */
  send(env: A2AEnvelope, opts?: SendOptions): Promise<PubAck> {
    this.open("send");
    return sendEnvelope(this.ctx, env, opts);
  }

  /**
   * One JetStream publish (no retry) through the connection's request mux: what
   * `js.publish` does, without the Error it builds for every call; it fails the same way
   * (nats.js TimeoutError / NoRespondersError, JetStreamApiError with the API code).
   * For hot writes: the node's compare-and-set writes (step journal, checkpoints), the gateway's task saves.
   * @param opts.msgId `Nats-Msg-Id` (a retry within the duplicate window is stored once)
   * @param opts.expectLastSubjectSequence `Nats-Expected-Last-Subject-Sequence`: a compare-and-set on the subject
   * @param opts.rollup `Nats-Rollup: sub`: the subject is purged down to this message
   */
  publishToStream(
    subject: string,
    data: Uint8Array,
    opts: { timeoutMs: number; msgId?: string; expectLastSubjectSequence?: number; rollup?: boolean },
  ): Promise<PubAck> {
    this.open("publishToStream");
    let h: MsgHdrs | undefined;
    const set = (name: string, value: string) => (h ??= natsHeaders()).set(name, value);
    if (opts.msgId !== undefined) set("Nats-Msg-Id", opts.msgId);
    if (opts.expectLastSubjectSequence !== undefined) set("Nats-Expected-Last-Subject-Sequence", String(opts.expectLastSubjectSequence));
    if (opts.rollup) set("Nats-Rollup", "sub");
    return publishToStream(this.ctx, subject, data, h, opts.timeoutMs);
  }

  /**
   * Opens an agent's durable mailbox (see MailboxOptions for redelivery settings).
   * @throws InvalidIdError; JetStream errors when the A2A stream is missing
   */
  async openMailbox(agentId: string, handler: MailboxHandler, opts?: MailboxOptions): Promise<Mailbox> {
    this.open("openMailbox");
    const mb = await openMailbox(this.ctx, agentId, handler, opts);
    this.mailboxes.add(mb);
    const stop = mb.stop.bind(mb);
    return Object.assign(mb, {
      stop: async () => {
        this.mailboxes.delete(mb);
        await stop();
      },
    });
  }

  /**
   * Deletes an agent's durable mailbox consumer (its messages stay in the stream; the next
   * mailbox opened creates it again and delivers them from the first unacknowledged one),
   * in tries of growing timeouts (consumer-tries.ts). A consumer that is not there counts as deleted.
   * @throws InvalidIdError; NATS errors (a timeout after the last try)
   */
  async deleteMailboxConsumer(agentId: string): Promise<void> {
    this.open("deleteMailboxConsumer");
    assertId("agent id", agentId);
    try {
      await consumerRequest(this.ctx.nc, (jsm) => jsm.consumers.delete(this.ctx.subjects.streams.a2a, this.ctx.subjects.consumer(agentId)));
    } catch (err) {
      if (!isConsumerNotFound(err)) throw err;
    }
  }

  /**
   * Messages of an agent's mailbox not yet acknowledged: waiting (`num_pending`) and
   * delivered but not acked (`num_ack_pending`), from its consumer's info. 0 when the
   * consumer is not there (nothing was delivered since it was deleted).
   * @throws InvalidIdError; NATS errors
   */
  async mailboxBacklog(agentId: string): Promise<number> {
    this.open("mailboxBacklog");
    assertId("agent id", agentId);
    try {
      const ci = await this.ctx.jsm.consumers.info(this.ctx.subjects.streams.a2a, this.ctx.subjects.consumer(agentId));
      return ci.num_pending + ci.num_ack_pending;
    } catch (err) {
      if (isConsumerNotFound(err)) return 0;
      throw err;
    }
  }

  /** Answers fast requests for `agentId` on `kova.<c>.rpc.<agentId>`. @throws InvalidIdError */
  serveRpc(agentId: string, handler: RpcHandler, opts?: ServeRpcOptions): RpcService {
    this.open("serveRpc");
    const svc = serveRpc(this.ctx, agentId, handler, opts);
    this.services.add(svc);
    // Forgotten once stopped: a node that hosts actors for a while (passivated template
    // instances, moves) must not keep every service it ever served.
    const stop = svc.stop.bind(svc);
    return Object.assign(svc, {
      stop: async () => {
        this.services.delete(svc);
        await stop();
      },
    });
  }

  /**
   * Fast request/reply (core NATS, not stored), in short tries within `timeoutMs` (default
   * 10 s; see rpc.ts `request`).
   * @throws KovaNoRespondersError / KovaTimeoutError naming the subject; RemoteError from the handler
   */
  request<R>(to: string, type: MessageType, payload: unknown, opts?: RequestOptions): Promise<R> {
    this.open("request");
    return request<R>(this.ctx, to, type, payload, opts);
  }

  /**
   * Asks the nodes to activate a template instance (`<template>--<key>`) now; `ask` does
   * this by itself for an id the registry does not know. See activation.ts.
   * @returns the node's reply, or undefined when no node answered within `timeoutMs`
   * @throws RemoteError UNKNOWN_AGENT (no such template), QUOTA_EXCEEDED; BusClosedError
   */
  activate(id: string, timeoutMs?: number): Promise<ActivationReply | undefined> {
    this.open("activate");
    return requestActivation(this.ctx, id, timeoutMs);
  }

  /**
   * Who sent a message or request with these headers (principals.ts): undefined for a
   * trusted sender (a node, an operator, a gateway), else the bus principal.
   * @throws UnnamedSenderError, InvalidEnvelopeError for a header that is not the server's
   */
  senderOf(headers: MsgHdrs | undefined): BusPrincipal | undefined {
    return this.ctx.senders.of(headers);
  }

  /**
   * Fails at once when no agent of this id is declared, instead of sending a message
   * nobody will answer (`ask` does this by itself; a caller that sends and then waits some
   * other way calls it first). An instance id (`<template>--<key>`) is activated instead.
   * Passes when neither the registry nor a node can tell. See agent-check.ts.
   * @returns the id to send to: a bus client's instance is its own (`support--x` is its `support--<scope>x`)
   * @throws UnknownAgentError; RemoteError UNKNOWN_AGENT (no such template); BusClosedError
   */
  checkAgent(agentId: string): Promise<string> {
    this.open("checkAgent");
    return addressableAgent(this.ctx, agentId);
  }

  /**
   * Durable send + wait for the `result_notify` on a reply inbox. Default timeout 120 s.
   * @throws KovaTimeoutError naming the subject; RemoteError when the reply carries an error
   */
  ask<R>(env: A2AEnvelope, opts?: AskOptions): Promise<A2AEnvelope<R>> {
    this.open("ask");
    return ask<R>(this.ctx, env, opts);
  }

  /** Answers `original` with a `result_notify` (to its replyTo inbox, else durably to its sender). */
  respond(original: A2AEnvelope, result: unknown, opts?: RespondOptions): Promise<A2AEnvelope> {
    this.open("respond");
    return respond(this.ctx, original, result, opts);
  }

  /**
   * Publishes an event (durable by default: retried through a NATS server loss for up to
   * `timeoutMs`, default 30 s; `msgId` makes a re-publish a duplicate the stream drops).
   * @throws KovaError INVALID_ENVELOPE for a malformed event; KovaTimeoutError when not stored in time
   */
  publishEvent(event: KovaEvent, opts?: PublishEventOptions): Promise<void> {
    this.open("publishEvent");
    return publishEvent(this.ctx, event, opts);
  }

  subscribeEvents(opts?: { sessionId?: string }): EventStream {
    this.open("subscribeEvents");
    return subscribeEvents(this.ctx, opts);
  }

  /**
   * Reads stored events under `filter` (a run's or a session's subject) in order, from
   * `from` on (default: the first), then live; `close()` also deletes the read's consumer.
   */
  readStoredEvents(filter: string, from?: StoredEventsFrom, opts?: { maxMessages?: number }): Promise<StoredEventsReader> {
    this.open("readStoredEvents");
    return readStoredEvents(this.ctx, filter, from, opts);
  }

  /** Moves messages that exhausted max_deliver to the DLQ (run one per node; they share the work). */
  /**
   * Serves the ingress of bus clients' durable sends (ingress.ts): nodes run it, so that a
   * client account that imports it as its agents' inboxes is held to what its users own.
   */
  serveIngress(): { stop(): Promise<void> } {
    this.open("serveIngress");
    const svc = serveIngress(this.ctx);
    this.services.add(svc);
    return svc;
  }

  startDlqMover(): DlqMover {
    this.open("startDlqMover");
    const mover = startDlqMover(this.ctx);
    this.services.add(mover);
    return mover;
  }

  /**
   * Hands ids with waiting messages that `isKnown` denies to `activate` (template
   * instances), and dead-letters the messages of the rest once they are older than
   * `olderThanMs` (reason `unknown_agent`); see unknown-agents.ts.
   * @returns how many were moved
   */
  sweepUnknownAgents(sweep: UnknownAgentSweep): Promise<number> {
    this.open("sweepUnknownAgents");
    return sweepUnknownAgents(this.ctx, sweep);
  }

  /**
   * Stores an envelope that will not be handled on `kova.<c>.dlq.<reason>`, with the same
   * headers as the bus's own dead letters (docs/protocol.md), and resolves with its DLQ
   * sequence after the JetStream ack, so the caller may ack the original only then.
   * @param reason a DlqReason, or a layer's own reason (one subject token)
   * @throws InvalidIdError when `reason` or `env.to` is not a subject token; BusClosedError; JetStream errors when the DLQ stream is missing
   */
  deadLetter(env: A2AEnvelope, reason: DlqReason | (string & {}), opts?: DeadLetterOptions): Promise<number> {
    this.open("deadLetter");
    return deadLetterEnvelope(this.ctx, env, reason, opts);
  }

  /**
   * Whether `agentId`'s mailbox stream still holds the message stored at `seq` with envelope
   * id `envelopeId` (not acknowledged, not moved to the DLQ). A work queue deletes a message
   * when it is acked or dead-lettered, so "no" means nothing will deliver it again.
   * The message is recognised by its sequence and the envelope it carries, whatever its
   * headers: a reply published to a `replyTo` inbox and a plain NATS client's message carry
   * no `Nats-Msg-Id` (or one of the publisher's own), and must not pass for gone.
   * @throws JetStream errors other than "no message at that sequence"
   */
  async inboxHolds(agentId: string, seq: number, envelopeId: string): Promise<boolean> {
    this.open("inboxHolds");
    try {
      const m = await this.ctx.jsm.streams.getMessage(this.ctx.subjects.streams.a2a, { seq });
      if (m === null || m.subject !== this.ctx.subjects.a2a(agentId)) return false;
      return m.header?.get(Header.MsgId) === envelopeId || storedEnvelopeId(m.data, m.header, this.ctx.limits) === envelopeId;
    } catch (err) {
      if (isMessageGone(err)) return false;
      throw err;
    }
  }

  /** The newest dead letters, newest first. */
  listDlq(opts?: { limit?: number; reason?: string }): Promise<DlqEntry[]> {
    return listDlq(this.ctx, opts);
  }

  /** Resolves when the connection closes for good: undefined, or the error that closed it. */
  async closed(): Promise<Error | undefined> {
    return (await this.ctx.nc.closed()) ?? undefined;
  }

  /**
   * Stops mailboxes (waiting for in-flight handlers), rpc services and movers, then closes.
   * Idempotent: every call resolves when the one close is done.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  /** `await using bus = await Bus.connect(…)` closes the bus at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private async shutdown(): Promise<void> {
    await Promise.all([...this.mailboxes].map((m) => m.stop().catch(() => undefined)));
    await Promise.all([...this.services].map((s) => s.stop().catch(() => undefined)));
    this.ctx.mux.close(new BusClosedError("request"));
    if (!this.ctx.nc.isClosed()) await this.ctx.nc.close();
  }

  private open(what: string): void {
    if (this.closing !== undefined || this.ctx.nc.isClosed()) throw new BusClosedError(what);
  }
}
