import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { newInbox } from "./inbox.js";

/** What the shared inbox calls back into: one per mailbox. */
export interface PullTarget {
  /** A message delivered from the target's consumer. */
  onDelivery(msg: Msg): void;
  /** A status (408 expired, 409, 503…) answering the target's pull of generation `gen`. */
  onPullStatus(msg: Msg, gen: number): void;
  /** The target's pull may be gone (reconnect) or overdue (no answer by its expiry): pull again if idle. */
  repull(now: number, force: boolean): void;
}

/** How often the shared sweep looks for pulls that got no answer. */
const SWEEP_MS = 1_000;

/**
 * One wildcard inbox subscription per connection for every mailbox's JetStream pull
 * requests, instead of a nats.js `consume()` per mailbox. An idle mailbox then costs one
 * small object and a map entry here — no iterator, no subscription, no timer of its own
 * (a nats.js consumer held ~30 KB of heap per idle actor: iterator, heartbeat monitor,
 * timers, promises). Pull reply subjects are `<inbox>.<token>.<generation>`: a status
 * reply (408, 409, 503) comes on that subject and names the mailbox and the pull it
 * answers. A delivered message keeps its own subject, so it is routed by the stream and
 * consumer named in its `$JS.ACK…` reply subject.
 *
 * Pulls that vanish without a 408 (the server holding them died, the client reconnected)
 * are re-issued by one shared sweep and on every reconnect, so a mailbox resumes within a
 * pull's expiry instead of nats.js's missed-heartbeat detection.
 */
export class PullInbox {
  readonly prefix: string;
  private readonly targets = new Map<string, PullTarget>();
  private readonly byConsumer = new Map<string, PullTarget>();
  private sub: Subscription | undefined;
  private sweep: NodeJS.Timeout | undefined;
  private next = 0;

  private constructor(private readonly nc: NatsConnection) {
    this.prefix = newInbox(nc);
  }

  /** The connection's shared inbox, created on first use. */
  static for(nc: NatsConnection): PullInbox {
    let inbox = inboxes.get(nc);
    if (!inbox) {
      inbox = new PullInbox(nc);
      inboxes.set(nc, inbox);
    }
    return inbox;
  }

  /** Registers the target pulling from `stream`'s `consumer`; returns its token for {@link replySubject}. */
  add(target: PullTarget, stream: string, consumer: string): string {
    this.start();
    const token = (this.next++).toString(36);
    this.targets.set(token, target);
    this.byConsumer.set(`${stream}.${consumer}`, target);
    return token;
  }

  remove(token: string, stream: string, consumer: string): void {
    const target = this.targets.get(token);
    this.targets.delete(token);
    const key = `${stream}.${consumer}`;
    if (target && this.byConsumer.get(key) === target) this.byConsumer.delete(key);
  }

  replySubject(token: string, gen: number): string {
    return `${this.prefix}.${token}.${gen}`;
  }

  private start(): void {
    if (this.sub) return;
    this.sub = this.nc.subscribe(`${this.prefix}.*.*`, { callback: (_err, msg) => this.dispatch(msg) });
    this.sweep = setInterval(() => this.repullAll(false), SWEEP_MS);
    this.sweep.unref();
    void this.watchStatus();
    void this.nc.closed().then(() => clearInterval(this.sweep));
  }

  private async watchStatus(): Promise<void> {
    for await (const s of this.nc.status()) {
      // After a reconnect every pull held by the old server is gone (or, in a cluster, may
      // be): pull again now. A pull that survived only adds a short-lived duplicate.
      if (s.type === "reconnect") this.repullAll(true);
    }
  }

  private repullAll(force: boolean): void {
    const now = performance.now();
    for (const t of this.targets.values()) t.repull(now, force);
  }

  private dispatch(msg: Msg | undefined): void {
    if (!msg) return;
    if (msg.reply?.startsWith("$JS.ACK.")) {
      // $JS.ACK.<stream>.<consumer>.… (9 tokens) or $JS.ACK.<domain>.<hash>.<stream>.<consumer>.…
      const t = msg.reply.split(".", 6);
      const key = msg.reply.split(".").length === 9 ? `${t[2]}.${t[3]}` : `${t[4]}.${t[5]}`;
      const target = this.byConsumer.get(key);
      if (target) target.onDelivery(msg);
      else nakNow(this.nc, msg.reply); // a pull left behind by a stopped mailbox: hand the message back now
      return;
    }
    if (!msg.subject.startsWith(this.prefix)) return;
    const rest = msg.subject.slice(this.prefix.length + 1);
    const dot = rest.indexOf(".");
    this.targets.get(rest.slice(0, dot))?.onPullStatus(msg, Number(rest.slice(dot + 1)));
  }
}

const inboxes = new WeakMap<NatsConnection, PullInbox>();

/** Returns a message to the consumer at once, so the next pull (another host's) gets it. */
export function nakNow(nc: NatsConnection, reply: string): void {
  if (!nc.isClosed()) nc.publish(reply, NAK);
}

export const ACK = Uint8Array.of(43, 65, 67, 75); // "+ACK"
export const NAK = Uint8Array.of(45, 78, 65, 75); // "-NAK"
export const WPI = Uint8Array.of(43, 87, 80, 73); // "+WPI"
