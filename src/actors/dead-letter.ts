import { headers as natsHeaders } from "@nats-io/transport-node";
import { toWire } from "../core/errors.js";
import { encodeEnvelope, Header, type A2AEnvelope, type Bus } from "../bus/index.js";

/** DLQ reasons added by the actor runtime (the last token of `kova.<c>.dlq.<reason>`). */
export const ActorDlqReason = {
  /** No handler for the message type. */
  unhandled: "unhandled",
  /** The handler failed on every supervised attempt. */
  handlerFailed: "handler_failed",
  /** The actor was killed while handling the message. */
  killed: "killed",
} as const;
export type ActorDlqReason = (typeof ActorDlqReason)[keyof typeof ActorDlqReason];

/**
 * Stores a message the actor will not handle in the DLQ, with the bus's reason headers,
 * and resolves after the JetStream ack (so the caller may ack the original only then).
 * The bus's own DLQ writer works on raw mailbox bytes and takes only its own reasons;
 * here the envelope is re-encoded (msgpack), which decodes to the same envelope.
 */
export async function deadLetter(bus: Bus, env: A2AEnvelope, reason: ActorDlqReason, error: unknown): Promise<number> {
  const wire = toWire(error);
  const h = natsHeaders();
  h.set(Header.DlqReason, reason);
  h.set(Header.DlqErrorCode, wire.code);
  h.set(Header.DlqError, wire.message.replace(/[\r\n]+/g, " ").slice(0, 1000));
  h.set(Header.DlqSubject, bus.subjects.a2a(env.to));
  h.set(Header.DlqTime, new Date().toISOString());
  h.set(Header.DlqAgent, env.to);
  h.set(Header.DlqMsgId, env.id);
  const ack = await bus.js.publish(bus.subjects.dlq(reason), encodeEnvelope(env, "msgpack"), {
    headers: h,
    msgID: `dlq-${reason}-${env.id}`,
  });
  return ack.seq;
}
