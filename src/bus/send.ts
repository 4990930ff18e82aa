import type { PubAck } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { sleep } from "../core/clock.js";
import { encodeEnvelope, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { validateEnvelope, type A2AEnvelope } from "./envelope.js";
import { NoRespondersError, PayloadTooLargeError, subjectTimeout } from "./errors.js";
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
// JetStream answers "no responders" while it starts up after a restart; past this
// window the stream is really missing.
const NO_RESPONDERS_GRACE_MS = 5_000;
const DLQ_PREFIX_BYTES = 64 * 1024;
const ATTEMPT_TIMEOUT_MS = 2_000;

/**
 * Durable send: publishes to `kova.<c>.a2a.<to>` with `Nats-Msg-Id` = envelope id and
 * resolves after JetStream stored it. Retries while NATS is away (safe: the id makes a
 * retry a duplicate that is stored once).
 * @throws InvalidEnvelopeError / UnknownMessageTypeError before anything is sent
 * @throws PayloadTooLargeError when the encoded message exceeds the server's
 *   max_payload; a truncated copy is recorded in the DLQ (reason payload_too_large)
 * @throws NoRespondersError when no stream captures the subject (no Kova node ever ran
 *   `ensureStreams`), TimeoutError when no ack came in time
 */
export async function sendEnvelope(ctx: BusContext, envelope: A2AEnvelope, opts: SendOptions = {}): Promise<PubAck> {
  const env = validateEnvelope(envelope);
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
  if (encoding === "json") h.set(Header.ContentType, ContentType.json);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    const left = timeoutMs - (Date.now() - started);
    try {
      // Short attempts: a publish that reaches a server still loading its streams
      // gets no answer at all, and a retry is harmless (same Nats-Msg-Id).
      return await ctx.js.publish(subject, data, { msgID: env.id, headers: h, timeout: Math.max(100, Math.min(left, ATTEMPT_TIMEOUT_MS)) });
    } catch (err) {
      const name = (err as { name?: string }).name ?? "";
      const noResponders = name === "JetStreamNotEnabled" || /no responders/i.test(String(err));
      const retryable = noResponders || name === "TimeoutError" || /timeout|disconnect|reconnect/i.test(String(err));
      const elapsed = Date.now() - started;
      if (noResponders && elapsed >= Math.min(NO_RESPONDERS_GRACE_MS, timeoutMs)) {
        throw new NoRespondersError(subject, "no JetStream stream captures it: start a Kova node or call bus.ensureStreams()", { cause: err });
      }
      if (!retryable) throw err;
      if (elapsed >= timeoutMs) throw subjectTimeout("durable send", subject, timeoutMs, err);
      ctx.log.debug({ err, subject, attempt }, "send not acknowledged yet; retrying");
      await sleep(Math.min(50 * 2 ** Math.min(attempt, 5), Math.max(0, timeoutMs - elapsed)));
    }
  }
}
