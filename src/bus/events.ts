import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import { KovaError, isValidId, newId } from "../core/index.js";
import { publishAcked } from "./acked-publish.js";
import type { BusContext } from "./context.js";
import { ContentType, Header } from "./wire.js";
import { BusErrorCode } from "./errors.js";

/** One event on `kova.<c>.events.<sessionId>.<runId>` (JSON on the wire). */
export interface KovaEvent {
  type: string;
  sessionId: string;
  runId: string;
  parentRunId?: string;
  /** Epoch milliseconds. */
  ts: number;
  data?: unknown;
}

export interface EventStream extends AsyncIterable<KovaEvent> {
  stop(): void;
}

const utf8 = new TextEncoder();

function check(event: KovaEvent): void {
  const bad = (field: string, why: string) => new KovaError(BusErrorCode.INVALID_ENVELOPE, `invalid event: ${field} ${why}`, { data: { field } });
  if (typeof event.type !== "string" || event.type.length === 0 || event.type.length > 128) throw bad("type", "must be a string of 1-128 characters");
  if (!isValidId(event.sessionId)) throw bad("sessionId", "must be an id of [A-Za-z0-9_-]");
  if (!isValidId(event.runId)) throw bad("runId", "must be an id of [A-Za-z0-9_-]");
  if (event.parentRunId !== undefined && !isValidId(event.parentRunId)) throw bad("parentRunId", "must be an id of [A-Za-z0-9_-]");
  if (typeof event.ts !== "number" || !Number.isFinite(event.ts)) throw bad("ts", "must be epoch milliseconds");
}

export interface PublishEventOptions {
  /** false: a plain publish, not stored (tokens and other high-rate events). Default true. */
  durable?: boolean;
  /** How long a durable publish may retry (default 30 s). */
  timeoutMs?: number;
  /**
   * The `Nats-Msg-Id` of a durable event (default: a new id). A caller that may publish the
   * same event again (a run re-run after a takeover) derives it from the event's identity,
   * so the stream stores it once within its duplicate window.
   */
  msgId?: string;
}

/**
 * Publishes an event as JSON. Durable by default (resolves after the EVENTS stream
 * stored it, retrying through a NATS server loss or leader election for up to
 * `timeoutMs`, default 30 s); `durable: false` is a plain publish for high-rate streams
 * such as tokens.
 * @throws KovaError INVALID_ENVELOPE for a malformed event, before anything is sent;
 *   KovaTimeoutError when the stream did not store it in time
 */
export async function publishEvent(ctx: BusContext, event: KovaEvent, opts: PublishEventOptions = {}): Promise<void> {
  check(event);
  const subject = ctx.subjects.events(event.sessionId, event.runId);
  const h = natsHeaders();
  h.set(Header.ContentType, ContentType.json);
  const data = utf8.encode(JSON.stringify(event));
  if (opts.durable === false) {
    ctx.nc.publish(subject, data, { headers: h });
    return;
  }
  // An actor's turn waits for this ack (ctx.emit is a journaled step): failing it on
  // the first timeout of a leader election used to fail the turn and dead-letter its
  // message. A retry whose first try was stored is dropped by the stream (Nats-Msg-Id).
  h.set(Header.MsgId, opts.msgId ?? newId());
  await publishAcked(ctx, subject, data, h, { timeoutMs: opts.timeoutMs ?? 30_000, what: "event publish" });
}

/**
 * A filter for live event subscribers: true the first time a `Nats-Msg-Id` is seen. A
 * durable publish whose ack is slow is sent again under the same id (the stream keeps one,
 * docs/protocol.md "Stored once"), so a core subscription can receive an event twice; a
 * follower that prints or forwards events drops the repeat here. Remembers the last `max`
 * ids; an event without the header (a plain publish) always passes.
 */
export function firstDelivery(max = 10_000): (headers: MsgHdrs | undefined) => boolean {
  const seen = new Set<string>();
  return (headers) => {
    const id = headers?.get(Header.MsgId);
    if (!id) return true;
    if (seen.has(id)) return false;
    seen.add(id);
    // A Set iterates in insertion order: the first entry is the oldest.
    if (seen.size > max) seen.delete(seen.values().next().value as string);
    return true;
  };
}

/**
 * Live events of one session, or of the whole cluster. Messages that are not event
 * JSON are skipped (and logged), so a stray publisher cannot break a dashboard.
 */
export function subscribeEvents(ctx: BusContext, opts: { sessionId?: string } = {}): EventStream {
  const subject = opts.sessionId ? ctx.subjects.sessionEvents(opts.sessionId) : ctx.subjects.eventsWildcard;
  const sub = ctx.nc.subscribe(subject);
  const isFirst = firstDelivery();
  async function* iterate(): AsyncGenerator<KovaEvent> {
    for await (const msg of sub) {
      if (!isFirst(msg.headers)) continue;
      try {
        const event = msg.json<KovaEvent>();
        check(event);
        yield event;
      } catch (err) {
        ctx.log.debug({ err, subject: msg.subject }, "skipped a message that is not a Kova event");
      }
    }
  }
  const it = iterate();
  return {
    [Symbol.asyncIterator]: () => it,
    stop: () => sub.unsubscribe(),
  };
}
