import type { PubAck } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { encodeEnvelope, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { validateOutgoing, type A2AEnvelope } from "./envelope.js";
import { PayloadTooLargeError } from "./errors.js";
import { publishAcked } from "./acked-publish.js";
import { publishDlq } from "./dlq.js";
import { ContentType, DlqReason, Header } from "./wire.js";

export interface SendOptions {
  /** Total time to get the JetStream ack, retries included (default 30 s). */
  timeoutMs?: number;
  /** Wire encoding (default msgpack). */
  encoding?: Encoding;
}

// Room for the protocol line and our headers inside max_payload.
const HEADER_ALLOWANCE = 512;
const DLQ_PREFIX_BYTES = 64 * 1024;

/**
 * Durable send: publishes to `kova.<c>.a2a.<to>` with `Nats-Msg-Id` = envelope id and
 * resolves after JetStream stored it. Retries while NATS is away (safe: the id makes a
 * retry a duplicate that is stored once).
 * @throws InvalidEnvelopeError / UnknownMessageTypeError before anything is sent
 * @throws PayloadTooLargeError when the encoded message exceeds the server's
 *   max_payload; a truncated copy is recorded in the DLQ (reason payload_too_large)
 * @throws KovaNoRespondersError when no stream captures the subject (no Kova node ever ran
 *   `ensureStreams`), KovaTimeoutError when no ack came in time
 */
export async function sendEnvelope(ctx: BusContext, envelope: A2AEnvelope, opts: SendOptions = {}): Promise<PubAck> {
  const env = validateOutgoing(envelope);
  const subject = ctx.subjects.a2a(env.to);
  const encoding = opts.encoding ?? "msgpack";
  const data = encodeEnvelope(env, encoding);
  const limit = ctx.maxPayload - HEADER_ALLOWANCE - env.id.length;
  if (data.length > limit) {
    const err = new PayloadTooLargeError(data.length, limit, subject);
    const h = natsHeaders();
    if (encoding === "json") h.set(Header.ContentType, ContentType.json);
    await publishDlq(ctx, data.subarray(0, DLQ_PREFIX_BYTES), {
      reason: DlqReason.payloadTooLarge,
      error: err,
      subject,
      headers: h,
      agentId: env.to,
      msgId: env.id,
      originalSize: data.length,
    }).catch((dlqErr: unknown) => ctx.log.error({ err: dlqErr, subject }, "could not record the oversized message in the DLQ"));
    throw err;
  }
  const h = natsHeaders();
  h.set(Header.MsgId, env.id);
  if (encoding === "json") h.set(Header.ContentType, ContentType.json);
  return publishAcked(ctx, subject, data, h, { timeoutMs: opts.timeoutMs ?? 30_000, what: "durable send" });
}
