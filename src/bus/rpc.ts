import { headers as natsHeaders, type Msg, type MsgHdrs, type Subscription } from "@nats-io/transport-node";
import { ErrorCode, KovaError, fromWire, toWire, type WireError } from "../core/errors.js";
import { decodeValue, encodeValue, encodingOf, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { createEnvelope, validateEnvelope, type A2AEnvelope, type MessageType } from "./envelope.js";
import { KovaNoRespondersError, subjectTimeout } from "./errors.js";
import { requireOwnInstance } from "./principals.js";
import { ContentType, Header } from "./wire.js";

/** The reply body of the fast path (docs/protocol.md). */
export type RpcReply<R = unknown> = { ok: true; result: R } | { ok: false; error: WireError };

export type RpcHandler = (env: A2AEnvelope, info: { encoding: Encoding }) => Promise<unknown>;

export interface RpcService {
  readonly subject: string;
  /** Resolves once the server has the subscription: requests sent after it find a responder. */
  readonly ready: Promise<void>;
  /** Stops answering; requests already being handled still get their reply. */
  stop(): Promise<void>;
}

export interface RequestOptions {
  /** Default 10 s: an `info_request` may need a model-free lookup, never a whole turn. */
  timeoutMs?: number;
  /** The sender's id (default: this client's id). */
  from?: string;
  encoding?: Encoding;
  traceId?: string;
}

export const DEFAULT_RPC_TIMEOUT_MS = 10_000;

/**
 * Answers core NATS requests on `kova.<c>.rpc.<agentId>` (not stored: the fast path for
 * `info_request` / `capability_query`). Bad input is answered with a typed error, since
 * here there is a caller to tell. The queue group lets a second host of the same agent
 * share the load instead of answering twice.
 * @throws InvalidIdError for a bad agent id
 */
export function serveRpc(ctx: BusContext, agentId: string, handler: RpcHandler): RpcService {
  const subject = ctx.subjects.rpc(agentId);
  const log = ctx.log.child({ agentId, rpc: subject });
  // A counter, not a set of promises: this is the hot path (docs/benchmarks.md).
  let inflight = 0;
  let idle: (() => void) | undefined;
  const settled = () => {
    if (--inflight === 0) idle?.();
  };
  const failed = (e: unknown) => log.error({ err: e }, "rpc reply failed");
  const sub: Subscription = ctx.nc.subscribe(subject, {
    queue: `kova_rpc`,
    callback: (err, msg) => {
      if (err) {
        log.error({ err }, "rpc subscription failed");
        return;
      }
      // Checked before the handler runs: a reply subject this node may not write to is dropped.
      if (msg.reply && !ctx.replies.allows(msg.reply, msg.subject)) return;
      inflight++;
      answer(ctx, agentId, msg, handler).catch(failed).finally(settled);
    },
  });
  return {
    subject,
    ready: ctx.nc.flush(),
    async stop() {
      if (!sub.isClosed()) await sub.drain().catch(() => undefined);
      if (inflight > 0) await new Promise<void>((r) => (idle = r));
    },
  };
}

async function answer(ctx: BusContext, agentId: string, msg: Msg, handler: RpcHandler): Promise<void> {
  const encoding = encodingOf(msg.headers);
  let reply: RpcReply;
  try {
    const env = validateEnvelope(decodeValue(msg.data, encoding, ctx.limits, msg.subject));
    // A bus client's request reaches its own instances only (principals.ts).
    const sender = msg.headers ? ctx.senders.of(msg.headers) : undefined;
    if (sender) requireOwnInstance(agentId, sender);
    reply = { ok: true, result: await handler(env, { encoding }) };
  } catch (err) {
    ctx.log.debug({ err, agentId }, "rpc request failed");
    reply = { ok: false, error: toWire(err) };
  }
  if (!msg.reply) {
    ctx.log.warn({ subject: msg.subject }, "rpc message without a reply subject: nobody to answer");
    return;
  }
  if (encoding === "json") {
    const h = natsHeaders();
    h.set(Header.ContentType, ContentType.json);
    msg.respond(encodeValue(reply, "json"), { headers: h });
  } else {
    msg.respond(encodeValue(reply, "msgpack"));
  }
}

/**
 * Fast request/reply to the node hosting `to`.
 * @returns the handler's result
 * @throws KovaNoRespondersError naming the subject when no node hosts the agent;
 *   KovaTimeoutError naming the subject; a RemoteError rebuilt from the handler's error
 */
export async function request<R>(ctx: BusContext, to: string, type: MessageType, payload: unknown, opts: RequestOptions = {}): Promise<R> {
  const env = createEnvelope({ from: opts.from ?? ctx.clientId, to, type, payload, ...(opts.traceId ? { traceId: opts.traceId } : {}) });
  const subject = ctx.subjects.rpc(to);
  const timeout = opts.timeoutMs ?? DEFAULT_RPC_TIMEOUT_MS;
  const encoding = opts.encoding ?? "msgpack";
  let headers: MsgHdrs | undefined;
  if (encoding === "json") {
    headers = natsHeaders();
    headers.set(Header.ContentType, ContentType.json);
  }
  const msg = await ctx.mux.request(subject, encodeValue(env, encoding), {
    timeoutMs: timeout,
    ...(headers ? { headers } : {}),
    noResponders: () => new KovaNoRespondersError(subject, `agent ${to} is not hosted by any running node`),
    timedOut: () => subjectTimeout(`${type} request`, subject, timeout),
  });
  const reply = decodeValue(msg.data, encodingOf(msg.headers), ctx.limits, subject) as RpcReply<R>;
  if (reply && typeof reply === "object" && reply.ok === true) return reply.result;
  const remote = fromWire((reply as { error?: unknown })?.error);
  if (remote) throw remote;
  throw new KovaError(ErrorCode.REMOTE_ERROR, `the reply on ${subject} is not a Kova rpc reply ({ ok, result | error })`, { data: { subject } });
}
