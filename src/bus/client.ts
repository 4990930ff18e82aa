import { silentLogger, type Logger } from "../core/index.js";
import type { ActivationReply } from "./activation.js";
import type { AskOptions } from "./ask.js";
import { Bus } from "./bus.js";
import { createEnvelope, type A2AEnvelope, type MessageType } from "./envelope.js";
import type { EventStream } from "./events.js";
import type { RequestOptions } from "./rpc.js";
import type { SendOptions } from "./send.js";
import { redactUrl, type NatsSecurity } from "./nats-security.js";
import { JetStreamUnavailableError, typedNatsError } from "./errors.js";
import { isJetStreamNotEnabled, isJetStreamNotReady, isPermissionDenied } from "./nats-errors.js";

export interface KovaClientOptions {
  servers: string | string[];
  cluster?: string;
  /** This service's id: the `from` of what it sends (default `client_<random>`). */
  id?: string;
  name?: string;
  /** Where the client logs; without one it is silent (it lives inside someone else's service). */
  logger?: Logger;
  /**
   * Create or check the streams on connect, so a send works before any node ran (default
   * true). Pass false under the least-privilege `client` role, which may not manage streams;
   * `"if-allowed"` does it when the NATS user may, and skips it when the server refuses
   * (what the CLI does, so one command works under every role of deploy/nats/accounts.conf).
   */
  ensureStreams?: boolean | "if-allowed";
  /** Credentials, TLS and the inbox prefix (see docs/security.md). */
  security?: NatsSecurity;
}

/**
 * Checks JetStream and the streams as far as this NATS user may: a refusal (a `client` role
 * may not call the JetStream API, an `operator` may not read the mailbox stream) ends the
 * check quietly; any other failure is thrown as `ensureStreams` would.
 * @throws JetStreamUnavailableError; StreamConflictError
 */
async function ensureIfAllowed(bus: Bus, logger: Logger): Promise<void> {
  try {
    await bus.jsm.getAccountInfo();
  } catch (err) {
    if (isPermissionDenied(err)) return logger.debug({ err }, "this NATS user may not use the JetStream API: streams not checked");
    if (isJetStreamNotEnabled(err) || isJetStreamNotReady(err)) throw new JetStreamUnavailableError(redactUrl(bus.nc.getServer()), { cause: err });
    throw typedNatsError(err, `the JetStream check ($JS.API.INFO) on NATS at ${redactUrl(bus.nc.getServer())}`);
  }
  try {
    await bus.ensureStreams();
  } catch (err) {
    if (!isPermissionDenied(err)) throw err;
    logger.debug({ err }, "this NATS user may not manage Kova's streams: streams not checked");
  }
}

/** Extra envelope fields a client may set on send/ask. */
export interface MessageOptions {
  id?: string;
  correlationId?: string;
  deadline?: number;
  traceId?: string;
}

/**
 * What another service imports to talk to Kova agents: send (durable), ask (durable
 * send + reply), request (fast path) and events. One NATS connection.
 */
export class KovaClient {
  private constructor(readonly bus: Bus) {}

  /** @throws NatsUnreachableError naming the URL; StreamConflictError from ensureStreams */
  static async connect(opts: KovaClientOptions): Promise<KovaClient> {
    const ensure = opts.ensureStreams ?? true;
    const logger = opts.logger ?? silentLogger();
    const bus = await Bus.connect({
      servers: opts.servers,
      name: opts.name ?? "kova-client",
      ...(opts.cluster ? { cluster: opts.cluster } : {}),
      ...(opts.id ? { clientId: opts.id } : {}),
      logger,
      ...(opts.security ? { security: opts.security } : {}),
      checkJetStream: ensure === true,
    });
    try {
      if (ensure === true) await bus.ensureStreams();
      else if (ensure === "if-allowed") await ensureIfAllowed(bus, logger);
    } catch (err) {
      await bus.close();
      throw err;
    }
    return new KovaClient(bus);
  }

  get id(): string {
    return this.bus.clientId;
  }

  private envelope(to: string, type: MessageType, payload: unknown, m: MessageOptions = {}): A2AEnvelope {
    return createEnvelope({ from: this.bus.clientId, to, type, payload: payload ?? null, ...m });
  }

  /**
   * Durable send to an agent's mailbox; resolves after JetStream stored it.
   * @throws InvalidEnvelopeError, PayloadTooLargeError, KovaNoRespondersError, KovaTimeoutError
   */
  async send(
    to: string,
    type: MessageType,
    payload: unknown,
    opts: MessageOptions & SendOptions = {},
  ): Promise<{ id: string; seq: number; duplicate: boolean }> {
    const { timeoutMs, encoding, ...m } = opts;
    const env = this.envelope(to, type, payload, m);
    const ack = await this.bus.send(env, { ...(timeoutMs ? { timeoutMs } : {}), ...(encoding ? { encoding } : {}) });
    return { id: env.id, seq: ack.seq, duplicate: ack.duplicate };
  }

  /** Durable send + wait for the agent's `result_notify`. @throws KovaTimeoutError, RemoteError */
  ask<R>(to: string, type: MessageType, payload: unknown, opts: MessageOptions & AskOptions = {}): Promise<A2AEnvelope<R>> {
    const { timeoutMs, send, ...m } = opts;
    return this.bus.ask<R>(this.envelope(to, type, payload, m), { ...(timeoutMs ? { timeoutMs } : {}), ...(send ? { send } : {}) });
  }

  /**
   * Activates a template instance (`<template>--<key>`) before its first message; optional,
   * since `ask` does it by itself and the nodes activate an instance they see a message for.
   * @returns the node's reply, or undefined when no node answered in time
   * @throws RemoteError UNKNOWN_AGENT when no node knows the template, QUOTA_EXCEEDED
   */
  activate(id: string): Promise<ActivationReply | undefined> {
    return this.bus.activate(id);
  }

  /** Fast request to the node hosting `to`. @throws KovaNoRespondersError, KovaTimeoutError, RemoteError */
  request<R>(to: string, type: MessageType, payload: unknown, opts?: RequestOptions): Promise<R> {
    return this.bus.request<R>(to, type, payload, opts);
  }

  /** Live events, of one session or all. */
  events(opts?: { sessionId?: string }): EventStream {
    return this.bus.subscribeEvents(opts);
  }

  /** Closes the connection; idempotent. */
  close(): Promise<void> {
    return this.bus.close();
  }

  /** `await using client = await KovaClient.connect(…)` closes the client at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
