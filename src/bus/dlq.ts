import type { MsgRequest } from "@nats-io/jetstream";
import { Match, headers as natsHeaders, type MsgHdrs, type Subscription } from "@nats-io/transport-node";
import { toWire } from "../core/index.js";
import { encodeEnvelope } from "./codec.js";
import type { BusContext } from "./context.js";
import type { A2AEnvelope } from "./envelope.js";
import { PayloadTooLargeError } from "./errors.js";
import { Header, type DlqReason } from "./wire.js";
import { isMessageGone } from "./nats-errors.js";

/** What is known about a message being dead-lettered, beyond its bytes. */
export interface DlqInfo {
  /** A DlqReason, or another layer's own reason: one subject token of `[A-Za-z0-9_-]`. */
  reason: DlqReason | (string & {});
  /** The error that made it a dead letter (its code and message become headers). */
  error?: unknown;
  /** The subject it was sent to. */
  subject: string;
  /** Original headers; Content-Type is kept so the bytes stay decodable. */
  headers?: MsgHdrs;
  stream?: string;
  streamSeq?: number;
  deliveries?: number;
  agentId?: string;
  /** The message's Nats-Msg-Id, if it had one. */
  msgId?: string;
  /** Size of the original message when `data` is only a prefix of it. */
  originalSize?: number;
  /** JetStream dedup key of the DLQ publish; default `dlq-<stream>-<streamSeq>` when both are known. */
  dedupId?: string;
}

/** Options of `Bus.deadLetter`. */
export interface DeadLetterOptions {
  /** Why it is a dead letter: its code and message become `Kova-Dlq-Error-Code` / `Kova-Dlq-Error`. */
  error?: unknown;
  /** The bytes as received; default: the envelope encoded as msgpack. */
  originalBytes?: Uint8Array;
  /** The original message's headers: `Content-Type` (needed when `originalBytes` is JSON) and `Nats-Msg-Id` are kept. */
  headers?: MsgHdrs;
}

/** One dead letter as `listDlq` returns it. */
export interface DlqEntry {
  seq: number;
  subject: string;
  reason: string;
  time: Date;
  headers: Record<string, string>;
  data: Uint8Array;
}

// Header values are single lines; keep them short enough not to crowd out the body.
function headerValue(value: string, max = 1000): string {
  const flat = value.replace(/[\r\n]+/g, " ");
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

/**
 * Bytes a header block takes on the wire, as nats.js writes it and nats-server counts it
 * against max_payload: `NATS/1.0`, then `\r\n<name>: <value>` per header, then `\r\n\r\n`.
 */
function headerBytes(entries: ReadonlyArray<readonly [string, string]>): number {
  if (entries.length === 0) return 0;
  let n = 8 + 4;
  for (const [k, v] of entries) n += 4 + Buffer.byteLength(k) + Buffer.byteLength(v);
  return n;
}

// A prefix kept of a message that was never stored (see sendEnvelope) leaves this much
// room for the headers.
const PREFIX_HEADER_ROOM = 2048;

/**
 * Stores a dead letter: the original bytes on `kova.<c>.dlq.<reason>` with reason
 * headers. Resolves after the JetStream ack, so a caller may ack the original only
 * then. When the original came from the A2A stream, its stream sequence is the
 * dedup key, so a move that is retried is stored once.
 *
 * The body is never cut: a message that was stored fits max_payload with its own
 * headers, but not always with ours, so when the full set does not fit, headers are
 * kept in order of importance (Content-Type, the dedup id, reason, stream and sequence,
 * error code, …, the error text last) as far as they fit, and
 * `Kova-Dlq-Headers-Trimmed: true` says so when there is room for it; the subject still
 * names the reason, and the full error goes to the log.
 * @throws PayloadTooLargeError when `data` alone exceeds max_payload (it was never a
 *   stored message): nothing is published, and the caller keeps the original
 */
export async function publishDlq(ctx: BusContext, data: Uint8Array, info: DlqInfo): Promise<number> {
  const wire = info.error === undefined ? undefined : toWire(info.error);
  const subject = ctx.subjects.dlq(info.reason);
  let body = data;
  // Only a prefix of a message that never fit (the send path) may be cut further.
  if (info.originalSize !== undefined && body.length > ctx.maxPayload - PREFIX_HEADER_ROOM) {
    body = body.subarray(0, Math.max(0, ctx.maxPayload - PREFIX_HEADER_ROOM));
  }
  if (body.length > ctx.maxPayload) throw new PayloadTooLargeError(body.length, ctx.maxPayload, subject);
  const msgId = info.msgId ?? info.headers?.get(Header.MsgId);
  // Matched as the codec matches it (encodingOf), so a JSON body keeps its type.
  const ct = info.headers?.get(Header.ContentType, Match.IgnoreCase);
  const dedupId = info.dedupId ?? (info.stream && info.streamSeq !== undefined ? `dlq-${info.stream}-${info.streamSeq}` : undefined);
  const wanted: Array<readonly [string, string | undefined]> = [
    [Header.ContentType, ct ? headerValue(ct, 128) : undefined],
    [Header.MsgId, dedupId ? headerValue(dedupId, 256) : undefined],
    [Header.DlqReason, info.reason],
    [Header.DlqStream, info.stream],
    [Header.DlqStreamSeq, info.streamSeq === undefined ? undefined : String(info.streamSeq)],
    [Header.DlqErrorCode, wire?.code],
    [Header.DlqMsgId, msgId ? headerValue(msgId, 256) : undefined],
    [Header.DlqAgent, info.agentId],
    [Header.DlqOriginalSize, info.originalSize === undefined ? undefined : String(info.originalSize)],
    [Header.DlqTruncated, info.originalSize === undefined ? undefined : "true"],
    [Header.DlqDeliveries, info.deliveries === undefined ? undefined : String(info.deliveries)],
    [Header.DlqSubject, headerValue(info.subject, 512)],
    [Header.DlqTime, new Date().toISOString()],
    [Header.DlqError, wire ? headerValue(wire.message) : undefined],
  ];
  const all = wanted.filter((e): e is readonly [string, string] => e[1] !== undefined && e[1] !== "");
  const room = ctx.maxPayload - body.length;
  let kept = all;
  if (headerBytes(all) > room) {
    const marker = [Header.DlqHeadersTrimmed, "true"] as const;
    kept = [];
    // Content-Type always fits where the original had it (ours is that header alone),
    // and without it a JSON body would read as msgpack: it never yields to the marker.
    for (const e of all) if (headerBytes(e[0] === Header.ContentType ? [...kept, e] : [...kept, e, marker]) <= room) kept.push(e);
    if (headerBytes([...kept, marker]) <= room) kept.push(marker);
  }
  const h = natsHeaders();
  for (const [k, v] of kept) h.set(k, v);
  const ack = await ctx.js.publish(subject, body, kept.length > 0 ? { headers: h } : {});
  const dropped = all.filter((e) => !kept.includes(e)).map(([k]) => k);
  ctx.log.warn(
    {
      reason: info.reason,
      subject: info.subject,
      agentId: info.agentId,
      dlqSeq: ack.seq,
      error: wire?.message,
      ...(dropped.length > 0 ? { headersDropped: dropped } : {}),
    },
    "message moved to the DLQ",
  );
  return ack.seq;
}

/**
 * Dead-letters a decoded envelope that a layer above the bus will not handle, in the
 * same format as the bus's own dead letters. Keyed by reason and envelope id, so a
 * retry after a crash between this publish and the original's ack stores it once
 * (within the DLQ stream's duplicate window).
 * @throws InvalidIdError when `reason` or `env.to` is not a subject token
 */
export async function deadLetterEnvelope(ctx: BusContext, env: A2AEnvelope, reason: DlqInfo["reason"], opts: DeadLetterOptions = {}): Promise<number> {
  return publishDlq(ctx, opts.originalBytes ?? encodeEnvelope(env, "msgpack"), {
    reason,
    error: opts.error,
    subject: ctx.subjects.a2a(env.to),
    headers: opts.headers,
    agentId: env.to,
    msgId: env.id,
    dedupId: `dlq-${reason}-${env.id}`,
  });
}

/**
 * Reads the newest dead letters (newest first).
 * @param opts.reason only this reason; opts.limit at most this many (default 50)
 */
export async function listDlq(ctx: BusContext, opts: { limit?: number; reason?: string } = {}): Promise<DlqEntry[]> {
  const limit = opts.limit ?? 50;
  const stream = ctx.subjects.streams.dlq;
  const info = await ctx.jsm.streams.info(stream);
  const out: DlqEntry[] = [];
  for (let seq = info.state.last_seq; seq >= info.state.first_seq && seq > 0 && out.length < limit; seq--) {
    const m = await ctx.jsm.streams.getMessage(stream, { seq }).catch(() => null);
    if (!m) continue; // deleted or aged out
    const headers: Record<string, string> = {};
    for (const [k, v] of m.header ?? []) headers[k] = v.join(", ");
    const reason = headers[Header.DlqReason] ?? m.subject.split(".").pop() ?? "";
    if (opts.reason && reason !== opts.reason) continue;
    out.push({ seq: m.seq, subject: m.subject, reason, time: m.time, headers, data: m.data });
  }
  return out;
}

/** A running DLQ mover; `stop()` drains its subscription. */
export interface DlqMover {
  /** The start-up sweep (see `sweepExhausted`): resolves with the number of messages it moved. */
  readonly swept: Promise<number>;
  stop(): Promise<void>;
}

interface MaxDeliveriesAdvisory {
  stream: string;
  consumer: string;
  stream_seq: number;
  deliveries: number;
}

/**
 * Listens for JetStream's MAX_DELIVERIES advisories on the A2A stream and moves each
 * such message to the DLQ (reason `max_deliver`), then deletes it from the WorkQueue
 * stream, where it would otherwise stay forever. Movers on several nodes share the
 * work through a queue group; a message already moved is skipped.
 */
export function startDlqMover(ctx: BusContext): DlqMover {
  const stream = ctx.subjects.streams.a2a;
  let chain: Promise<void> = Promise.resolve();
  const sub: Subscription = ctx.nc.subscribe(ctx.subjects.maxDeliveriesAdvisory, {
    queue: `kova_${ctx.cluster}_dlq_mover`,
    callback: (err, msg) => {
      if (err) {
        ctx.log.error({ err }, "DLQ mover subscription failed");
        return;
      }
      let adv: MaxDeliveriesAdvisory;
      try {
        adv = msg.json<MaxDeliveriesAdvisory>();
      } catch (e) {
        ctx.log.error({ err: e }, "unreadable MAX_DELIVERIES advisory");
        return;
      }
      // One at a time: moves are rare, and ordering keeps the log readable.
      chain = chain
        .then(() => moveOne(ctx, stream, adv))
        .catch((e: unknown) => ctx.log.error({ err: e, seq: adv.stream_seq }, "DLQ move failed; the message stays in the A2A stream"));
    },
  });
  // Advisories are core NATS: one sent while no mover ran is gone. Catch up once.
  const swept = sweepExhausted(ctx).catch((err: unknown) => {
    ctx.log.error({ err }, "DLQ sweep failed");
    return 0;
  });
  return {
    swept,
    async stop() {
      if (!sub.isClosed()) await sub.drain().catch(() => undefined);
      await chain;
      await swept;
    },
  };
}

/**
 * Finds messages that exhausted max_deliver while no mover was listening and moves
 * them. In a WorkQueue stream an acked message is deleted, so a message of an agent's
 * subject that is still stored at or below its consumer's ack floor can only be one the
 * consumer gave up on.
 */
export async function sweepExhausted(ctx: BusContext): Promise<number> {
  const stream = ctx.subjects.streams.a2a;
  let moved = 0;
  for await (const ci of ctx.jsm.consumers.list(stream)) {
    const subject = ci.config.filter_subject;
    const floor = ci.ack_floor.stream_seq;
    if (!subject || floor === 0) continue;
    for (let from = 1; ; ) {
      // STREAM.MSG.GET accepts next_by_subj on 2.9; nats.js 3.4 only types it for direct gets.
      const query = { next_by_subj: subject, seq: from } as unknown as MsgRequest;
      const m = await ctx.jsm.streams.getMessage(stream, query).catch(() => null);
      if (!m || m.seq > floor) break;
      await moveOne(ctx, stream, { stream, consumer: ci.name, stream_seq: m.seq, deliveries: ci.config.max_deliver ?? 0 });
      moved++;
      from = m.seq + 1;
    }
  }
  if (moved > 0) ctx.log.warn({ moved }, "DLQ sweep moved messages that exhausted max_deliver while no mover ran");
  return moved;
}

async function moveOne(ctx: BusContext, stream: string, adv: MaxDeliveriesAdvisory): Promise<void> {
  const agentId = adv.consumer.startsWith("agent_") ? adv.consumer.slice("agent_".length) : undefined;
  await moveStored(ctx, stream, adv.stream_seq, {
    reason: "max_deliver",
    error: new Error(`not acknowledged after ${adv.deliveries} deliveries to consumer ${adv.consumer}`),
    deliveries: adv.deliveries,
    ...(agentId ? { agentId } : {}),
  });
}

/**
 * Moves one stored message of `stream` to the DLQ whole (original bytes and headers), then
 * deletes it from the stream. Idempotent: several movers may race for the same message.
 * @returns false when the message was gone already (acked, or moved by another node)
 */
export async function moveStored(
  ctx: BusContext,
  stream: string,
  seq: number,
  info: Pick<DlqInfo, "reason" | "error"> & Partial<Pick<DlqInfo, "deliveries" | "agentId">>,
): Promise<boolean> {
  const stored = await ctx.jsm.streams.getMessage(stream, { seq }).catch(() => null);
  if (!stored) return false;
  await publishDlq(ctx, stored.data, { ...info, subject: stored.subject, headers: stored.header, stream, streamSeq: seq });
  await ctx.jsm.streams.deleteMessage(stream, seq, false).catch((err: unknown) => {
    if (!isMessageGone(err)) throw err;
  });
  return true;
}
