import { headers as natsHeaders } from "@nats-io/transport-node";
import { fromWire, toWire, timedPhase } from "../core/index.js";
import { decodeEnvelope, encodeEnvelope, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { createEnvelope, validateOutgoing, type A2AEnvelope } from "./envelope.js";
import { InvalidEnvelopeError, subjectTimeout } from "./errors.js";
import { addressableAgent } from "./agent-check.js";
import { replyToProblem } from "./reply-subject.js";
import { sendEnvelope, type SendOptions } from "./send.js";
import { ContentType, Header } from "./wire.js";

export interface AskOptions {
  /** How long to wait for the `result_notify` (default 120 s); also the envelope's deadline unless it has one. */
  timeoutMs?: number;
  send?: SendOptions;
  /**
   * Look the agent up in the registry first and fail with UNKNOWN_AGENT at once when no
   * agent of that id is declared (default true). Skipped silently when the registry cannot
   * be read (no node ran yet, or the account may not read it).
   */
  checkAgent?: boolean;
}

export const DEFAULT_ASK_TIMEOUT_MS = 120_000;

/**
 * Durable send, then wait for the `result_notify` carrying our correlation id on a
 * private reply inbox. The request itself is durable: if the caller gives up, the
 * agent still processes it later and its reply goes to an inbox nobody reads.
 * @returns the reply envelope
 * @throws UnknownAgentError when the registry knows no such agent (and, for an id of the
 *   instance form `<template>--<key>`, the nodes know no such template: RemoteError UNKNOWN_AGENT);
 *   KovaTimeoutError naming the agent's inbox subject; a RemoteError rebuilt from the
 *   reply's `error`; anything `send` throws
 */
export async function ask<R>(ctx: BusContext, envelope: A2AEnvelope, opts: AskOptions = {}): Promise<A2AEnvelope<R>> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_ASK_TIMEOUT_MS;
  let answered!: (reply: A2AEnvelope<R>) => void;
  let failed!: (err: unknown) => void;
  const answer = new Promise<A2AEnvelope<R>>((resolve, reject) => {
    answered = resolve;
    failed = reject;
  });
  answer.catch(() => undefined); // rejected after a failed send, nobody awaits it
  let correlationId = "";
  // The reply inbox: a token on the connection's request mux (one wildcard subscription),
  // not a subscription of its own per ask. It exists before the send: the reply may come
  // back faster than the send's ack.
  const inbox = ctx.mux.listen(
    (msg) => {
      let reply: A2AEnvelope;
      try {
        reply = decodeEnvelope(msg.data, msg.headers, ctx.limits, inbox.subject);
      } catch (err) {
        ctx.log.warn({ err, inbox: inbox.subject }, "ignored an undecodable reply");
        return;
      }
      if (reply.type !== "result_notify" || reply.correlationId !== correlationId) return;
      if (reply.error) failed(fromWire(reply.error) ?? new Error(reply.error.message));
      else answered(reply as A2AEnvelope<R>);
    },
    (err) => failed(err),
  );
  try {
    let env = validateOutgoing({
      ...envelope,
      replyTo: inbox.subject,
      correlationId: envelope.correlationId ?? envelope.id,
      deadline: envelope.deadline ?? Date.now() + timeoutMs,
    });
    correlationId = env.correlationId!;
    // Nobody would ever answer: say so now instead of after the whole timeout. (A bus
    // client's instance is its own: the check names the id to send to.)
    if (opts.checkAgent !== false) {
      const to = await addressableAgent(ctx, env.to);
      if (to !== env.to) env = { ...env, to };
    }
    const subject = ctx.subjects.a2a(env.to);
    const timer = setTimeout(() => failed(subjectTimeout(`ask ${env.type} ${env.id}`, subject, timeoutMs)), timeoutMs);
    try {
      await timedPhase("a2a.send", undefined, () => sendEnvelope(ctx, env, opts.send));
      return await answer;
    } finally {
      clearTimeout(timer);
    }
  } finally {
    inbox.close();
  }
}

export interface RespondOptions {
  /** Report a failure instead of a result (sent as the envelope's `error`). */
  error?: unknown;
  /** Encoding of an inbox reply (default msgpack; pass the request's to mirror a JSON asker). */
  encoding?: Encoding;
  /**
   * The reply's envelope id (default: a new one). A responder that may answer the same
   * message again after a crash passes the same id each time, so a durable reply is
   * stored once (`Nats-Msg-Id`) and an inbox reader can recognise the repeat.
   */
  id?: string;
  /**
   * Wait for the server to confirm it received an inbox reply (a ping round trip; default
   * true). A caller that publishes something on the same connection right after, and
   * waits for that instead (an actor turn: its mailbox ack), passes false: the connection
   * delivers in order, so what confirms the later message confirms the reply too.
   */
  flush?: boolean;
}

/**
 * Answers a message with a `result_notify`: to its `replyTo` inbox when it has one
 * (an `ask` is waiting there), otherwise durably to the sender's mailbox.
 * @throws whatever `send` throws for the durable case
 */
export async function respond(ctx: BusContext, original: A2AEnvelope, result: unknown, opts: RespondOptions = {}): Promise<A2AEnvelope> {
  const reply = createEnvelope({
    ...(opts.id === undefined ? {} : { id: opts.id }),
    from: original.to,
    to: original.from,
    type: "result_notify",
    payload: opts.error === undefined ? (result ?? null) : null,
    correlationId: original.correlationId ?? original.id,
    ...(original.traceId ? { traceId: original.traceId } : {}),
    ...(opts.error === undefined ? {} : { error: toWire(opts.error) }),
  });
  if (!original.replyTo) {
    await sendEnvelope(ctx, reply);
    return reply;
  }
  // Mailboxes refuse such messages before a turn; this keeps any other caller honest too.
  const bad = replyToProblem(original.replyTo, ctx.subjects, ctx.inboxPrefixes);
  if (bad) throw new InvalidEnvelopeError("replyTo", bad);
  const encoding = opts.encoding ?? "msgpack";
  if (encoding === "json") {
    const h = natsHeaders();
    h.set(Header.ContentType, ContentType.json);
    ctx.nc.publish(original.replyTo, encodeEnvelope(reply, "json"), { headers: h });
  } else {
    ctx.nc.publish(original.replyTo, encodeEnvelope(reply, "msgpack"));
  }
  if (opts.flush !== false) await ctx.nc.flush();
  return reply;
}
