import type { Msg, MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import { nanos } from "@nats-io/transport-node";
import { ACK, NAK, WPI } from "./pull-inbox.js";

const encoder = new TextEncoder();

/**
 * A JetStream message taken by a raw pull request: what the mailbox needs of nats.js's
 * JsMsg (ack, nak with delay, working, delivery info from the `$JS.ACK…` reply subject),
 * without it, since nats.js does not export its constructor.
 */
export class PulledMsg {
  readonly deliveryCount: number;
  readonly seq: number;
  /** `performance.now()` at arrival: the server started the ack deadline about then. */
  readonly receivedAt = performance.now();

  constructor(
    private readonly nc: NatsConnection,
    private readonly msg: Msg,
  ) {
    // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (9 tokens), or
    // $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>].
    const t = msg.reply!.split(".");
    const base = t.length === 9 ? 4 : 6;
    this.deliveryCount = Number(t[base]);
    this.seq = Number(t[base + 1]);
  }

  get data(): Uint8Array {
    return this.msg.data;
  }
  get subject(): string {
    return this.msg.subject;
  }
  get headers(): MsgHdrs | undefined {
    return this.msg.headers;
  }

  ack(): void {
    this.send(ACK);
  }

  /** Redelivery after `delayMs` (at once for 0 or none). */
  nak(delayMs?: number): void {
    this.send(delayMs ? encoder.encode(`-NAK {"delay":${nanos(delayMs)}}`) : NAK);
  }

  /** Extends the ack deadline by another ack_wait. */
  working(): void {
    this.send(WPI);
  }

  private send(data: Uint8Array): void {
    if (!this.nc.isClosed()) this.nc.publish(this.msg.reply!, data);
  }
}
