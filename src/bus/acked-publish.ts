import { type ApiError, JetStreamApiError, type PubAck } from "@nats-io/jetstream";
import { type MsgHdrs, NoRespondersError as NatsNoResponders, TimeoutError as NatsTimeout } from "@nats-io/transport-node";
import { sleep, ErrorCode, fromWire, KovaError } from "../core/index.js";
import type { BusContext } from "./context.js";
import { KovaNoRespondersError, subjectTimeout } from "./errors.js";

// JetStream answers "no responders" while it starts up after a restart, and a stream
// answers so while it elects a leader after a server loss; past this window, JetStream is
// asked whether a stream captures the subject (streamCaptures).
const NO_RESPONDERS_GRACE_MS = 5_000;
const ATTEMPT_TIMEOUT_MS = 2_000;
const LOOKUP_TIMEOUT_MS = 1_000;

export interface AckedPublishOptions {
  /** Total time to get the JetStream ack, retries included. */
  timeoutMs: number;
  /** Named in the timeout error ("durable send", "event publish"). */
  what: string;
}

/**
 * Publishes to a JetStream subject and resolves with the stream's ack, retrying while
 * NATS is away: a server restart, a leader election after a server loss. The caller
 * sets `Nats-Msg-Id` in `headers`, which makes a retry of a publish that was stored but
 * whose ack was lost a duplicate that the stream stores once.
 * @throws KovaNoRespondersError when no stream captures the subject, KovaTimeoutError
 *   when no ack came within `timeoutMs`, KovaError REMOTE_ERROR when JetStream refused it
 */
export async function publishAcked(ctx: BusContext, subject: string, data: Uint8Array, headers: MsgHdrs, opts: AckedPublishOptions): Promise<PubAck> {
  const { timeoutMs } = opts;
  const started = Date.now();
  let captured: boolean | undefined;
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
        headers,
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
      // Asked once per publish: a stream that exists keeps existing while its leader is elected.
      captured ??= await streamCaptures(ctx, subject);
      if (captured === false) throw new KovaNoRespondersError(subject, "no JetStream stream captures it: start a Kova node or call bus.ensureStreams()");
    }
    if (elapsed >= timeoutMs) throw subjectTimeout(opts.what, subject, timeoutMs);
    ctx.log.debug({ subject, attempt, outcome }, "publish not acknowledged yet; retrying");
    await sleep(Math.min(50 * 2 ** Math.min(attempt, 5), Math.max(0, timeoutMs - elapsed)));
  }
}

/**
 * Whether a JetStream stream captures `subject`, by the JetStream API (`STREAM.NAMES` with a
 * subject filter): true or false when JetStream answered, false when no server runs
 * JetStream (no responders to its API), undefined when it could not tell in time (the meta
 * leader is being elected, or this client may not call the API): the caller retries.
 */
async function streamCaptures(ctx: BusContext, subject: string): Promise<boolean | undefined> {
  try {
    const reply = await ctx.mux.request("$JS.API.STREAM.NAMES", new TextEncoder().encode(JSON.stringify({ subject })), {
      timeoutMs: LOOKUP_TIMEOUT_MS,
      noResponders: () => new NoResponse("no_responders"),
      timedOut: () => new NoResponse("timeout"),
    });
    const body = JSON.parse(utf8.decode(reply.data)) as { streams?: string[] | null; error?: unknown };
    if (body.error) return undefined;
    return (body.streams?.length ?? 0) > 0;
  } catch (err) {
    if (err instanceof NoResponse) return err.kind === "no_responders" ? false : undefined;
    return undefined;
  }
}

/**
 * One JetStream publish through the connection's request mux, failing as `js.publish`
 * does (nats.js's TimeoutError and NoRespondersError, JetStreamApiError with the API
 * code, so `isWrongLastSequence` and `isTransientNatsError` read it), for callers with
 * their own retry and fencing rules (the step journal, checkpoint compare-and-set):
 * `js.publish` builds an Error with its stack for every call, even one that succeeds.
 */
export async function publishToStream(ctx: BusContext, subject: string, data: Uint8Array, headers: MsgHdrs | undefined, timeoutMs: number): Promise<PubAck> {
  const reply = await ctx.mux.request(subject, data, {
    timeoutMs,
    ...(headers ? { headers } : {}),
    noResponders: () => new NatsNoResponders(subject),
    timedOut: () => new NatsTimeout(),
  });
  const body = ackBody(reply.data, subject);
  if (body.error) throw new JetStreamApiError(body.error as ApiError);
  return pubAck(body, subject);
}

class NoResponse extends Error {
  constructor(readonly kind: "no_responders" | "timeout") {
    super(kind);
  }
}

const utf8 = new TextDecoder();

interface AckBody {
  stream?: string;
  seq?: number;
  duplicate?: boolean;
  domain?: string;
  /** `kova`: a Kova node's refusal at a client's ingress (ingress.ts), as a wire error. */
  error?: { code?: number; err_code?: number; description?: string; kova?: unknown };
}

/** `{"stream":"S","seq":1,"duplicate":true}` or `{"error":{"code":…,"err_code":…,"description":…}}`. */
function ackBody(data: Uint8Array, subject: string): AckBody {
  try {
    return JSON.parse(utf8.decode(data)) as AckBody;
  } catch {
    throw notAnAck(subject);
  }
}

function notAnAck(subject: string): KovaError {
  return new KovaError(ErrorCode.REMOTE_ERROR, `publish on ${subject}: the reply is not a JetStream ack`, { data: { subject } });
}

function pubAck(body: AckBody, subject: string): PubAck {
  if (typeof body.stream !== "string" || typeof body.seq !== "number") throw notAnAck(subject);
  return { stream: body.stream, seq: body.seq, duplicate: body.duplicate === true, ...(body.domain ? { domain: body.domain } : {}) };
}

function parsePubAck(data: Uint8Array, subject: string): PubAck {
  const body = ackBody(data, subject);
  if (body.error) {
    const e = body.error;
    const refused = fromWire(e.kova);
    if (refused) throw refused;
    throw new KovaError(
      ErrorCode.REMOTE_ERROR,
      `publish on ${subject} refused by JetStream: ${e.description ?? "invalid ack"} (${e.err_code ?? e.code ?? "?"})`,
      {
        retryable: e.code === 503,
        data: { subject, ...e },
      },
    );
  }
  return pubAck(body, subject);
}
