import type { PubAck } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { sleep } from "../core/clock.js";
import { ErrorCode, KovaError } from "../core/errors.js";
import { encodeEnvelope, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { validateOutgoing, type A2AEnvelope } from "./envelope.js";
import { KovaNoRespondersError, PayloadTooLargeError, subjectTimeout } from "./errors.js";
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
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    const left = timeoutMs - (Date.now() - started);
    let outcome: PubAck | "no_responders" | "timeout";
    try {
      // A JetStream publish is a request whose reply is the stream's ack; through our
      // mux rather than js.publish, which builds an Error per call (see request-mux.ts).
      // Short attempts: a publish that reaches a server still loading its streams gets
      // no answer at all, and a retry is harmless (same Nats-Msg-Id).
      const reply = await ctx.mux.request(subject, data, {
        timeoutMs: Math.max(100, Math.min(left, ATTEMPT_TIMEOUT_MS)),
        headers: h,
        noResponders: () => new NoResponse("no_responders"),
        timedOut: () => new NoResponse("timeout"),
      });
      outcome = parsePubAck(reply.data, subject);
    } catch (err) {
      if (!(err instanceof NoResponse)) throw err;
      outcome = err.kind;
    }
    if (typeof outcome === "object") return outcome;
    const elapsed = Date.now() - started;
    if (outcome === "no_responders" && elapsed >= Math.min(NO_RESPONDERS_GRACE_MS, timeoutMs)) {
      throw new KovaNoRespondersError(subject, "no JetStream stream captures it: start a Kova node or call bus.ensureStreams()");
    }
    if (elapsed >= timeoutMs) throw subjectTimeout("durable send", subject, timeoutMs);
    ctx.log.debug({ subject, attempt, outcome }, "send not acknowledged yet; retrying");
    await sleep(Math.min(50 * 2 ** Math.min(attempt, 5), Math.max(0, timeoutMs - elapsed)));
  }
}

class NoResponse extends Error {
  constructor(readonly kind: "no_responders" | "timeout") {
    super(kind);
  }
}

const utf8 = new TextDecoder();

/** `{"stream":"S","seq":1,"duplicate":true}` or `{"error":{"code":…,"description":…}}`. */
function parsePubAck(data: Uint8Array, subject: string): PubAck {
  let body: { stream?: string; seq?: number; duplicate?: boolean; domain?: string; error?: { code?: number; err_code?: number; description?: string } };
  try {
    body = JSON.parse(utf8.decode(data)) as typeof body;
  } catch {
    throw new KovaError(ErrorCode.REMOTE_ERROR, `durable send on ${subject}: the reply is not a JetStream ack`, { data: { subject } });
  }
  if (body.error || typeof body.stream !== "string" || typeof body.seq !== "number") {
    const e = body.error ?? {};
    throw new KovaError(ErrorCode.REMOTE_ERROR, `durable send on ${subject} refused by JetStream: ${e.description ?? "invalid ack"} (${e.err_code ?? e.code ?? "?"})`, {
      retryable: e.code === 503,
      data: { subject, ...e },
    });
  }
  return { stream: body.stream, seq: body.seq, duplicate: body.duplicate === true, ...(body.domain ? { domain: body.domain } : {}) };
}
