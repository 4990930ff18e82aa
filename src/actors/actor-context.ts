import { derivedId, type Logger } from "../core/index.js";
import { createEnvelope, type A2AEnvelope, type KovaEvent, type MailboxContext } from "../bus/index.js";
import type { HostDeps } from "./ports.js";
import { crashPoint } from "./crash-points.js";
import type { TurnJournal } from "./turn-journal.js";
import type { TemplateBinding } from "./templates.js";
import type { ActorContext, EmitOptions } from "./types.js";

/** The actor a context speaks for. */
export interface ContextActor {
  readonly id: string;
  readonly def: { readonly type: string };
  readonly template?: TemplateBinding | undefined;
  readonly deps: HostDeps;
  readonly log: Logger;
}

function eventOf(actor: ContextActor, type: string, data: unknown, opts: EmitOptions, ts: number): KovaEvent {
  return {
    type,
    sessionId: opts.sessionId ?? "actors",
    runId: opts.runId ?? actor.id,
    ...(opts.parentRunId ? { parentRunId: opts.parentRunId } : {}),
    ts,
    data,
  };
}

/**
 * The ActorContext of one turn attempt. Every non-deterministic value and every effect
 * goes through the journal, so that a replay of the turn is exact.
 */
export function makeContext(
  actor: ContextActor,
  env: A2AEnvelope,
  journal: TurnJournal,
  attempt: number,
  state: unknown,
  mailbox: MailboxContext | undefined,
  signal: AbortSignal,
): ActorContext<unknown> {
  const { deps } = actor;
  return {
    actorId: actor.id,
    type: actor.def.type,
    nodeId: deps.nodeId,
    ...(actor.template ? { template: actor.template } : {}),
    state,
    message: env,
    get replaying() {
      return journal.replaying;
    },
    attempt,
    now: () => journal.now(),
    random: () => journal.random(),
    newId: () => journal.newId(),
    step: (name, fn, opts) => journal.step(name, fn, opts),
    send: async (fields, opts = {}) => {
      // The id is fixed before the publish by what the journal already holds (actor,
      // message, step index), so a replay on any node sends the same id and JetStream's
      // duplicate window (or the receiver's processed ids) drops the repeat. A v1 record
      // (written before this rule) drew it from ctx.newId(), and replays that way.
      const id = fields.id ?? (journal.record.v >= 2 ? derivedId("uuid", actor.id, env.id, `send:${journal.nextStep}`) : journal.newId());
      return journal.step(
        `send:${fields.type}:${fields.to}`,
        async () => {
          if (opts.requireKnownAgent) await deps.bus.checkAgent(fields.to);
          await deps.bus.send(createEnvelope({ ...fields, id, from: actor.id }));
          crashPoint("after-publish-ack", actor.id);
          return id;
        },
        { idempotent: true },
      );
    },
    emit: async (type, data, opts = {}) => {
      const event = eventOf(actor, type, data, opts, journal.now());
      // Its Nats-Msg-Id is derived like a send's id (actor, message, step index): the step
      // runs again when the turn is resumed before its result was recorded (a restart, a
      // takeover), and the EVENTS stream's duplicate window then stores the event once.
      const msgId = derivedId("uuid", actor.id, env.id, `emit:${journal.nextStep}`);
      await journal.step(`emit:${type}`, () => deps.bus.publishEvent(event, { msgId }), { idempotent: true });
    },
    stream: (type, data, opts = {}) => {
      // A step is fenced when it starts, not while it runs: a host stalled in the middle of
      // one (a model call streaming its tokens) may find, when it runs again, that peers
      // counted it dead and another node took the actor over and runs the same step again.
      // Its tokens from then on would interleave with the new host's on the run's subject,
      // so a host that cannot prove its lease now publishes nothing live; the fence ends
      // the turn at its next step or acknowledgement.
      try {
        deps.fenceNow(actor.id);
      } catch (err) {
        actor.log.debug({ err, type }, "stream event not published: this node cannot prove it holds the actor's lease");
        return;
      }
      const event = eventOf(actor, type, data, opts, Date.now());
      // Best effort by design: a lost token event must never fail the turn. Published at
      // once (not a microtask later), so it keeps its place among the turn's other publishes
      // on the connection.
      let published: Promise<void>;
      try {
        published = deps.bus.publishEvent(event, { durable: false });
      } catch (err) {
        published = Promise.reject(err instanceof Error ? err : new Error(String(err)));
      }
      published.catch((err: unknown) => actor.log.debug({ err, type }, "stream event not published"));
    },
    working: () => mailbox?.working(),
    signal,
  };
}
