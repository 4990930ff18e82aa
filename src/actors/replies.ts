import { backoffMs, fromWire, derivedId, type Logger } from "../core/index.js";
import type { A2AEnvelope } from "../bus/index.js";
import type { CheckpointReply, OwedReply, ReplyAddress } from "./checkpoint-store.js";
import type { ActorMemory } from "./memory.js";
import type { HostDeps } from "./ports.js";

/**
 * The answer of a committed turn (docs/actors.md, "Owed replies"): sent under an id derived
 * from the actor and the message; when its publish fails it is *owed* — saved with the
 * actor's checkpoint until a host has sent it — and retried on a timer while the host hosts
 * the actor. A host that loads the checkpoint (a restart, a takeover) sends what it owes.
 */

/** What sending, owing and retrying a reply needs from its actor. */
export interface ReplyingActor {
  readonly id: string;
  readonly def: { readonly type: string };
  readonly deps: HostDeps;
  // biome-ignore lint/suspicious/noExplicitAny: actors of every state type share this code
  readonly memory: ActorMemory<any>;
  readonly log: Logger;
  /** A reply became owed: the host retries it (ReplyRetry) while it hosts the actor. */
  replyOwed(): void;
}

/** How the host retries owed replies: the first pass after about `baseMs`, doubling (jittered) up to `maxMs`. */
export interface ReplyRetryOptions {
  baseMs?: number;
  maxMs?: number;
}

export const DEFAULT_REPLY_RETRY: Required<ReplyRetryOptions> = { baseMs: 1_000, maxMs: 30_000 };

/**
 * Sends the `result_notify` to the asker's inbox under an id derived from the message, so
 * every resend — after a crash, by the retry timer, by another node — is the same reply
 * (an asker takes the first; a reader can drop the repeat).
 * @throws the bus's error when it cannot be published
 */
export async function sendReply(actor: Pick<ReplyingActor, "id" | "deps">, asked: A2AEnvelope, answer: CheckpointReply): Promise<void> {
  // No flush of its own: the mailbox ack goes out after it on the same connection (a
  // reply lost with the connection loses that ack too, and the redelivery resends it).
  const opts = { id: derivedId("uuid", actor.id, asked.id, "reply"), flush: false, ...(answer.encoding === "json" ? { encoding: "json" as const } : {}) };
  if (answer.error !== undefined) await actor.deps.bus.respond(asked, null, { ...opts, error: fromWire(answer.error) ?? new Error(String(answer.error)) });
  else await actor.deps.bus.respond(asked, answer.result, opts);
}

/**
 * Sends the saved reply of a committed turn. When the publish fails the reply is owed
 * before the error is rethrown (the caller parks the turn and naks its message): kept in
 * memory, retried on the host's timer, and saved with the checkpoint at once — one extra
 * KV write, only on this failure — so that the actor's next host sends it even if the
 * message is dead-lettered before any delivery gets the reply out.
 * @throws the bus's error when the reply cannot be published
 */
export async function deliverReply(actor: ReplyingActor, asked: A2AEnvelope, answer: CheckpointReply): Promise<void> {
  try {
    await sendReply(actor, asked, answer);
  } catch (err) {
    await oweReply(actor, asked, answer);
    throw err;
  }
  actor.memory.replied(asked.id);
}

async function oweReply(actor: ReplyingActor, asked: A2AEnvelope, answer: CheckpointReply): Promise<void> {
  actor.memory.owe({ ...answer, asked: replyAddress(asked) });
  actor.replyOwed();
  try {
    // Fenced: a host that lost the actor must not write its checkpoint (the compare-and-set also refuses it).
    await actor.deps.fence(actor.id);
    const store = await actor.deps.checkpoints();
    await store.save(actor.id, actor.memory.current({ type: actor.def.type, nodeId: actor.deps.nodeId, ts: Date.now() }));
  } catch (err) {
    actor.log.warn(
      { err, envelopeId: asked.id },
      "could not save an owed reply with the checkpoint; this host retries it, and the next turn's checkpoint carries it",
    );
  }
}

function replyAddress(env: A2AEnvelope): ReplyAddress {
  const { id, from, to, type, replyTo, correlationId, traceId } = env;
  return { id, from, to, type, ...(replyTo ? { replyTo } : {}), ...(correlationId ? { correlationId } : {}), ...(traceId ? { traceId } : {}) };
}

/** The asked message of an owed reply, as far as its reply needs it (the payload is not kept). */
export function askedEnvelope(owed: OwedReply): A2AEnvelope {
  return { ...owed.asked, payload: null };
}

/**
 * Passes over an actor's owed replies on a timer while its host hosts it: `pass` sends
 * what it can and says whether nothing is left. After a pass that left some, the next one
 * waits longer (exponential backoff with jitter, up to `maxMs`); a newly owed reply arms
 * it again. Timers are unref'd: they never keep a process alive.
 */
export class ReplyRetry {
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #rearm = false;
  #stopped = false;
  /** Passes in a row that left a reply owed. */
  #failed = 0;

  constructor(
    private readonly pass: () => Promise<boolean>,
    private readonly policy: Required<ReplyRetryOptions>,
    private readonly log: Logger,
  ) {}

  /** Schedules a pass after `delayMs` (default: the backoff so far), unless one is scheduled or running. */
  arm(delayMs?: number): void {
    if (this.#stopped || this.#timer) return;
    if (this.#running) {
      this.#rearm = true;
      return;
    }
    const ms = delayMs ?? backoffMs(this.#failed + 1, this.policy.baseMs, this.policy.maxMs);
    this.#timer = setTimeout(() => void this.#run(), ms);
    this.#timer.unref();
  }

  async #run(): Promise<void> {
    this.#timer = undefined;
    this.#running = true;
    let done = false;
    try {
      done = await this.pass();
    } catch (err) {
      this.log.warn({ err }, "a pass over the owed replies failed");
    } finally {
      this.#running = false;
    }
    this.#failed = done ? 0 : this.#failed + 1;
    if (!done || this.#rearm) {
      this.#rearm = false;
      this.arm();
    }
  }

  /** No more passes (the actor leaves this host; its next host sends what is still owed). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
