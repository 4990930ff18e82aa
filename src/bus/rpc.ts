import { headers as natsHeaders, type Msg, type MsgHdrs, type Subscription } from "@nats-io/transport-node";
import { ErrorCode, KovaError, fromWire, toWire, type WireError, type Logger } from "../core/index.js";
import { decodeValue, encodeValue, encodingOf, type Encoding } from "./codec.js";
import type { BusContext } from "./context.js";
import { createEnvelope, validateEnvelope, type A2AEnvelope, type MessageType } from "./envelope.js";
import { KovaNoRespondersError, subjectTimeout } from "./errors.js";
import { requireOwnInstance } from "./principals.js";
import { isNoRespondersStatus, type ReplyWaiter } from "./request-mux.js";
import { ContentType, Header } from "./wire.js";

/**
 * The reply body of the fast path (docs/protocol.md): `node` names the node that answered,
 * for a caller (or an operator with `nats req`) that wants to know which host it reached.
 */
export type RpcReply<R = unknown> = ({ ok: true; result: R } | { ok: false; error: WireError }) & { node?: string };

export type RpcHandler = (env: A2AEnvelope, info: { encoding: Encoding }) => Promise<unknown>;

/**
 * Thrown by an rpc handler that must not answer at all: no reply is sent, so that another
 * subscriber of the subject (the agent's current host) answers the caller. The fast path
 * of a node that cannot prove it still holds an agent's lease declines this way.
 */
export class RpcDeclined extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = "RpcDeclined";
  }
}

export interface RpcService {
  readonly subject: string;
  /** Resolves once the server has the subscription: requests sent after it find a responder. */
  readonly ready: Promise<void>;
  /** Stops answering; requests already being handled still get their reply. */
  stop(): Promise<void>;
}

export interface ServeRpcOptions {
  /** Named in every reply's `node` (a node passes its id). */
  node?: string;
}

export interface RequestOptions {
  /**
   * The caller's deadline for the whole request, every try included (default 10 s: an
   * `info_request` may need a model-free lookup, never a whole turn).
   */
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
 * here there is a caller to tell; a handler that throws RpcDeclined sends nothing.
 *
 * No queue group: every subscriber of the subject gets every request. Normally that is the
 * agent's one host; while an agent moves, the node it left may still be subscribed (frozen,
 * cut off, or not yet aware), and with a queue group the server would hand that node its
 * share of the requests, to time out unanswered, for as long as the server keeps its
 * connection. Without one, the new host gets each request too and answers it, and the old
 * one, which cannot prove its lease, stays silent (docs/cluster.md, "The fast path").
 * @throws InvalidIdError for a bad agent id
 */
export function serveRpc(ctx: BusContext, agentId: string, handler: RpcHandler, opts: ServeRpcOptions = {}): RpcService {
  const subject = ctx.subjects.rpc(agentId);
  // Made on the first error: a node serves one of these per hosted actor, most never log.
  let logger: Logger | undefined;
  const log = () => (logger ??= ctx.log.child({ agentId, rpc: subject }));
  // A counter, not a set of promises: this is the hot path (docs/benchmarks.md).
  let inflight = 0;
  let idle: (() => void) | undefined;
  const settled = () => {
    if (--inflight === 0) idle?.();
  };
  const failed = (e: unknown) => log().error({ err: e }, "rpc reply failed");
  const sub: Subscription = ctx.nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) {
        log().error({ err }, "rpc subscription failed");
        return;
      }
      // Checked before the handler runs: a reply subject this node may not write to is dropped.
      if (msg.reply && !ctx.replies.allows(msg.reply, msg.subject)) return;
      inflight++;
      answer(ctx, agentId, msg, handler, opts.node).catch(failed).finally(settled);
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

async function answer(ctx: BusContext, agentId: string, msg: Msg, handler: RpcHandler, node: string | undefined): Promise<void> {
  const encoding = encodingOf(msg.headers);
  let reply: RpcReply;
  try {
    const env = validateEnvelope(decodeValue(msg.data, encoding, ctx.limits, msg.subject));
    // A bus client's request reaches its own instances only (principals.ts).
    const sender = msg.headers ? ctx.senders.of(msg.headers) : undefined;
    if (sender) requireOwnInstance(agentId, sender);
    reply = { ok: true, result: await handler(env, { encoding }) };
  } catch (err) {
    if (err instanceof RpcDeclined) {
      ctx.log.debug({ agentId, reason: err.reason }, "rpc request declined: left to the agent's current host");
      return;
    }
    ctx.log.debug({ err, agentId }, "rpc request failed");
    reply = { ok: false, error: toWire(err) };
  }
  if (!msg.reply) {
    ctx.log.warn({ subject: msg.subject }, "rpc message without a reply subject: nobody to answer");
    return;
  }
  if (node !== undefined) reply.node = node;
  if (encoding === "json") {
    const h = natsHeaders();
    h.set(Header.ContentType, ContentType.json);
    msg.respond(encodeValue(reply, "json"), { headers: h });
  } else {
    msg.respond(encodeValue(reply, "msgpack"));
  }
}

/** How long a no-responders answer is retried before it counts: an agent moving between hosts has none for a moment. */
const NO_RESPONDERS_GRACE_MS = 500;
/** The pause before asking again after a refusal or a no-responders answer. */
const REASK_MS = 50;
/** Tries start `clamp(deadline / 4, 250 ms, 1 s)` apart and the gap doubles, up to this. */
const MAX_TRY_GAP_MS = 4_000;

/** `ms` ± 25 %: callers that lost the same host do not ask again in lockstep. */
function jittered(ms: number): number {
  return ms * (0.75 + Math.random() * 0.5);
}

/**
 * Fast request/reply to the node hosting `to`, in short tries within the caller's deadline
 * (docs/protocol.md, "Fast request path"): another try goes out when the last one has had
 * no answer for its gap (250 ms to 1 s at first, doubling), after a retryable refusal
 * (`NOT_HOSTED`), and, for up to 0.5 s, after "no responders"; a reply to any try counts.
 * So a host that stays silent (frozen, or a node that lost the agent) costs one short try.
 * @returns the handler's result
 * @throws KovaNoRespondersError naming the subject when no node hosts the agent;
 *   KovaTimeoutError naming the subject; the last retryable refusal when every try was
 *   refused until the deadline; a RemoteError rebuilt from the handler's error
 */
export function request<R>(ctx: BusContext, to: string, type: MessageType, payload: unknown, opts: RequestOptions = {}): Promise<R> {
  const env = createEnvelope({ from: opts.from ?? ctx.clientId, to, type, payload, ...(opts.traceId ? { traceId: opts.traceId } : {}) });
  const encoding = opts.encoding ?? "msgpack";
  let headers: MsgHdrs | undefined;
  if (encoding === "json") {
    headers = natsHeaders();
    headers.set(Header.ContentType, ContentType.json);
  }
  return new RpcCall<R>(ctx, to, type, encodeValue(env, encoding), headers, opts.timeoutMs ?? DEFAULT_RPC_TIMEOUT_MS).result;
}

/** One fast-path request: its tries, its one timer, and the first answer that counts. */
class RpcCall<R> {
  readonly result: Promise<R>;
  private resolve!: (r: R) => void;
  private reject!: (e: unknown) => void;
  private readonly subject: string;
  private readonly started = performance.now();
  private readonly tokens: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private gap: number;
  private refusal: KovaError | undefined;
  private done = false;
  private readonly waiter: ReplyWaiter = {
    reply: (msg) => this.onReply(msg),
    closed: (err) => this.finish(err),
  };

  constructor(
    private readonly ctx: BusContext,
    private readonly to: string,
    private readonly type: MessageType,
    private readonly data: Uint8Array,
    private readonly headers: MsgHdrs | undefined,
    private readonly timeoutMs: number,
  ) {
    this.subject = ctx.subjects.rpc(to);
    this.gap = Math.min(1_000, Math.max(250, timeoutMs / 4));
    this.result = new Promise<R>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.ask(this.gap);
  }

  /** Sends a try and arms the timer for the next one (or the deadline). */
  private ask(nextInMs: number): void {
    try {
      this.tokens.push(this.ctx.mux.send(this.subject, this.data, this.headers, this.waiter));
    } catch (err) {
      this.finish(err);
      return;
    }
    this.arm(jittered(nextInMs));
  }

  private arm(ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    const left = this.timeoutMs - (performance.now() - this.started);
    this.timer = setTimeout(() => this.onTimer(), Math.max(0, Math.min(ms, left)));
  }

  private onTimer(): void {
    if (performance.now() - this.started >= this.timeoutMs - 1) {
      this.finish(this.refusal ?? subjectTimeout(`${this.type} request`, this.subject, this.timeoutMs));
      return;
    }
    this.gap = Math.min(this.gap * 2, MAX_TRY_GAP_MS);
    this.ask(this.gap);
  }

  private onReply(msg: Msg): void {
    if (this.done) return;
    if (isNoRespondersStatus(msg)) {
      if (performance.now() - this.started < Math.min(NO_RESPONDERS_GRACE_MS, this.timeoutMs)) this.arm(jittered(REASK_MS));
      else this.finish(new KovaNoRespondersError(this.subject, `agent ${this.to} is not hosted by any running node`));
      return;
    }
    let reply: RpcReply<R>;
    try {
      reply = decodeValue(msg.data, encodingOf(msg.headers), this.ctx.limits, this.subject) as RpcReply<R>;
    } catch (err) {
      this.finish(err);
      return;
    }
    if (reply && typeof reply === "object" && reply.ok === true) {
      this.finish(undefined, reply.result);
      return;
    }
    const remote =
      fromWire((reply as { error?: unknown })?.error) ??
      new KovaError(ErrorCode.REMOTE_ERROR, `the reply on ${this.subject} is not a Kova rpc reply ({ ok, result | error })`, {
        data: { subject: this.subject },
      });
    if (remote.retryable) {
      // A node that cannot answer for the agent now (NOT_HOSTED): its current host may.
      this.refusal = remote;
      this.arm(jittered(REASK_MS));
      return;
    }
    this.finish(remote);
  }

  private finish(err: unknown, result?: R): void {
    if (this.done) return;
    this.done = true;
    if (this.timer) clearTimeout(this.timer);
    for (const t of this.tokens) this.ctx.mux.forget(t);
    if (err === undefined) this.resolve(result as R);
    else this.reject(err);
  }
}
