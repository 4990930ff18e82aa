import { PermissionViolationError, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/transport-node";

import { newInbox } from "./inbox.js";

export interface MuxRequestOptions {
  timeoutMs: number;
  headers?: MsgHdrs;
  /** The error for "nobody subscribes to the subject" (NATS status 503). */
  noResponders: () => Error;
  timedOut: () => Error;
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
  private readonly pending = new Map<
    string,
    { resolve(m: Msg): void; reject(e: Error): void; timer: NodeJS.Timeout; opts: MuxRequestOptions; subject: string }
  >();
  private watchingRefusals = false;
  private readonly listeners = new Map<string, MuxListener>();
  private next = 0;
  private sub: Subscription | undefined;

  constructor(private readonly nc: NatsConnection) {
    this.prefix = newInbox(nc);
  }

  request(subject: string, data: Uint8Array, opts: MuxRequestOptions): Promise<Msg> {
    const token = this.token();
    if (!this.watchingRefusals) this.watchRefusals();
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(token);
        reject(opts.timedOut());
      }, opts.timeoutMs);
      this.pending.set(token, { resolve, reject, timer, opts, subject });
      try {
        this.nc.publish(subject, data, { reply: `${this.prefix}.${token}`, ...(opts.headers ? { headers: opts.headers } : {}) });
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(token);
        reject(err as Error);
      }
    });
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
    if (!p) return; // timed out already
    this.pending.delete(token);
    clearTimeout(p.timer);
    // The server answers a request nobody can take with an empty 503 status message.
    if (msg.data.length === 0 && msg.headers?.code === 503) p.reject(p.opts.noResponders());
    else p.resolve(msg);
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
          clearTimeout(p.timer);
          p.reject(s.error);
        }
      }
    })().catch(() => undefined);
  }

  /** Fails every waiting request with `err` and drops the subscription. */
  close(err: Error): void {
    this.sub?.unsubscribe();
    this.closeListeners(err);
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pending.clear();
  }
}
