import { PermissionViolationError, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/transport-node";

import { newInbox } from "./inbox.js";

export interface MuxRequestOptions {
  timeoutMs: number;
  headers?: MsgHdrs;
  /** The error for "nobody subscribes to the subject" (NATS status 503). */
  noResponders: () => Error;
  timedOut: () => Error;
}

/** Where the reply to one request sent with `RequestMux.send` goes. */
export interface ReplyWaiter {
  /** The reply (at most once per token; a "no responders" status message included, see isNoRespondersStatus). */
  reply(msg: Msg): void;
  /** No reply will come: the mux was closed, or the server refused the publish (permissions). */
  closed(err: Error): void;
}

/** The server answers a request nobody can take with an empty 503 status message. */
export function isNoRespondersStatus(msg: Msg): boolean {
  return msg.data.length === 0 && msg.headers?.code === 503;
}

interface MuxListener {
  onMessage(msg: Msg): void;
  onClosed(err: Error): void;
}

/**
 * Request/reply over one wildcard inbox subscription, like nats.js's own "mux", for the
 * fast path. It exists because nats.js 3.4 builds a `RequestError` (with its stack)
 * for every request, even one that succeeds (`RequestOne.cancel`), which was ~17 % of
 * the CPU of a busy rpc path; here an error is built only when there is one.
 */
export class RequestMux {
  private readonly prefix: string;
  private readonly pending = new Map<string, { waiter: ReplyWaiter; subject: string }>();
  private watchingRefusals = false;
  private readonly listeners = new Map<string, MuxListener>();
  private next = 0;
  private sub: Subscription | undefined;

  constructor(private readonly nc: NatsConnection) {
    this.prefix = newInbox(nc);
  }

  /** One request with its own timeout: resolves with the reply, rejects with `timedOut()` or `noResponders()`. */
  request(subject: string, data: Uint8Array, opts: MuxRequestOptions): Promise<Msg> {
    return new Promise<Msg>((resolve, reject) => {
      let token = "";
      const timer = setTimeout(() => {
        this.pending.delete(token);
        reject(opts.timedOut());
      }, opts.timeoutMs);
      const waiter: ReplyWaiter = {
        reply: (msg) => {
          clearTimeout(timer);
          if (isNoRespondersStatus(msg)) reject(opts.noResponders());
          else resolve(msg);
        },
        closed: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      try {
        token = this.send(subject, data, opts.headers, waiter);
      } catch (err) {
        clearTimeout(timer);
        reject(err as Error);
      }
    });
  }

  /**
   * Publishes one request and hands its reply to `waiter` until `forget(token)`; no timer of
   * its own, for callers that run several tries under one deadline (rpc.ts).
   * @returns the request's token
   * @throws what `nc.publish` throws (a closed connection, a payload over max_payload)
   */
  send(subject: string, data: Uint8Array, headers: MsgHdrs | undefined, waiter: ReplyWaiter): string {
    const token = this.token();
    if (!this.watchingRefusals) this.watchRefusals();
    this.pending.set(token, { waiter, subject });
    try {
      this.nc.publish(subject, data, { reply: `${this.prefix}.${token}`, ...(headers ? { headers } : {}) });
    } catch (err) {
      this.pending.delete(token);
      throw err;
    }
    return token;
  }

  /** Stops waiting for the reply of `token` (a late reply is dropped). */
  forget(token: string): void {
    this.pending.delete(token);
  }

  /**
   * A reply inbox on this mux's one subscription, open until `close()`: every message to
   * `subject` goes to `onMessage` (an ask's replies). No subscription of its own, so the
   * server's interest graph does not change with each one. `onClosed` hears why the mux
   * stopped (the bus closed, or the connection for good).
   */
  listen(onMessage: (msg: Msg) => void, onClosed: (err: Error) => void): { subject: string; close(): void } {
    const token = this.token();
    this.listeners.set(token, { onMessage, onClosed });
    // A connection closed for good ends the wildcard subscription: nothing will arrive.
    this.watchingClose ??= this.nc.closed().then((err) => this.closeListeners(err ?? new Error("the NATS connection closed")));
    return { subject: `${this.prefix}.${token}`, close: () => void this.listeners.delete(token) };
  }

  private watchingClose: Promise<void> | undefined;

  private token(): string {
    this.sub ??= this.nc.subscribe(`${this.prefix}.*`, { callback: (_err, msg) => this.dispatch(msg) });
    return (this.next++).toString(36);
  }

  private closeListeners(err: Error): void {
    const all = [...this.listeners.values()];
    this.listeners.clear();
    for (const l of all) l.onClosed(err);
  }

  private dispatch(msg: Msg | undefined): void {
    if (!msg) return;
    const token = msg.subject.slice(this.prefix.length + 1);
    const l = this.listeners.get(token);
    if (l) {
      l.onMessage(msg);
      return;
    }
    const p = this.pending.get(token);
    if (!p) return; // timed out or forgotten already
    this.pending.delete(token);
    p.waiter.reply(msg);
  }

  /**
   * A publish the user's permissions refuse is never answered: the server says so once, on
   * the connection (`-ERR Permissions Violation`). The requests to that subject fail with
   * it at once rather than after their whole timeout.
   */
  private watchRefusals(): void {
    this.watchingRefusals = true;
    void (async () => {
      for await (const s of this.nc.status()) {
        if (s.type !== "error" || !(s.error instanceof PermissionViolationError) || s.error.operation !== "publish") continue;
        for (const [token, p] of this.pending) {
          if (p.subject !== s.error.subject) continue;
          this.pending.delete(token);
          p.waiter.closed(s.error);
        }
      }
    })().catch(() => undefined);
  }

  /** Fails every waiting request with `err` and drops the subscription. */
  close(err: Error): void {
    this.sub?.unsubscribe();
    this.closeListeners(err);
    const waiting = [...this.pending.values()];
    this.pending.clear();
    for (const p of waiting) p.waiter.closed(err);
  }
}
