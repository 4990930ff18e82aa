import { headers as natsHeaders, type Msg, type Subscription } from "@nats-io/transport-node";
import { isKovaError, toWire } from "../core/index.js";
import { decodeValue, encodingOf } from "./codec.js";
import type { BusContext } from "./context.js";
import { validateOutgoing } from "./envelope.js";
import { BusErrorCode, InvalidEnvelopeError } from "./errors.js";
import { admitFromTenant } from "./principals.js";
import { replyToProblem } from "./reply-subject.js";
import { sendEnvelope } from "./send.js";

/**
 * The door of a bus client's durable sends (docs/security.md, "Bus principals"). A client
 * account imports `kova.<c>.ingress.a2a.>` as its `kova.<c>.a2a.>`, so a client publishes
 * to an agent's inbox subject as anyone does (a JetStream publish, answered with an ack),
 * and the request reaches a node instead of the stream. The node reads who sent it from
 * the server's `Nats-Request-Info` (principals.ts), holds it to what the sender owns
 * (admitFromTenant: its instances, sessions, runs and inbox), stores the admitted envelope
 * in the agent's inbox itself and answers with the stream's ack.
 *
 * Why not read the sender in the mailbox: nats-server 2.9 removes `Nats-Request-Info`
 * from a message it stores in a stream (the first such header: the server's own, unless
 * the client wrote one or more itself), so a stored message cannot say who sent it. A
 * core request keeps it, with the server's value last.
 *
 * A refusal is answered in the ack's error shape with the Kova error beside it
 * (`error.kova`), so the client's send fails with UNKNOWN_AGENT, INVALID_ENVELOPE … and
 * nothing is stored.
 */
export function serveIngress(ctx: BusContext): { stop(): Promise<void> } {
  const prefixLength = ctx.subjects.ingressWildcard.length - 1;
  let inflight = 0;
  let idle: (() => void) | undefined;
  const sub: Subscription = ctx.nc.subscribe(ctx.subjects.ingressWildcard, {
    queue: "kova_ingress",
    callback: (err, msg) => {
      if (err || !msg.reply || !ctx.replies.allows(msg.reply, msg.subject)) return;
      inflight++;
      admit(ctx, msg.subject.slice(prefixLength), msg)
        .catch((e: unknown) => ctx.log.error({ err: e, subject: msg.subject }, "ingress failed to answer"))
        .finally(() => {
          if (--inflight === 0) idle?.();
        });
    },
  });
  return {
    async stop() {
      if (!sub.isClosed()) await sub.drain().catch(() => undefined);
      if (inflight > 0) await new Promise<void>((r) => (idle = r));
    },
  };
}

async function admit(ctx: BusContext, agentId: string, msg: Msg): Promise<void> {
  let answer: unknown;
  try {
    const encoding = encodingOf(msg.headers);
    let env = validateOutgoing(decodeValue(msg.data, encoding, ctx.limits, msg.subject));
    if (env.to !== agentId) throw new InvalidEnvelopeError("to", `is ${JSON.stringify(env.to)} but the message was sent to ${agentId}'s inbox`);
    const badReply = env.replyTo === undefined ? undefined : replyToProblem(env.replyTo, ctx.subjects, ctx.inboxPrefixes);
    if (badReply) throw new InvalidEnvelopeError("replyTo", badReply);
    const sender = ctx.senders.of(msg.headers);
    if (sender) env = admitFromTenant(env, sender);
    const ack = await sendEnvelope(ctx, env, { encoding, timeoutMs: 10_000 });
    answer = { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate };
  } catch (err) {
    const status = isKovaError(err, BusErrorCode.UNKNOWN_AGENT) ? 404 : isKovaError(err) && err.retryable ? 503 : 400;
    answer = { error: { code: status, description: err instanceof Error ? err.message : String(err), kova: toWire(err) } };
    if (status === 503) ctx.log.warn({ err, subject: msg.subject }, "ingress could not store a client's message");
  }
  const h = natsHeaders();
  h.set("Content-Type", "application/json");
  msg.respond(new TextEncoder().encode(JSON.stringify(answer)), { headers: h });
}
