import { newId, KovaError } from "../core/index.js";
import { BusErrorCode, createEnvelope, firstDelivery, type Bus, type KovaEvent } from "../bus/index.js";
import { AGENT_CHAT, runPayload, type AgentResult, type HistoryTurn, type TaskConstraints } from "./run-protocol.js";

/**
 * How a caller runs an agent: `askAgent` waits for the result (the CLI, the gateway, tests),
 * `delegateTask` sends a task whose result arrives on an inbox of the delegator's (workflows,
 * swarms, agents as tools). The payloads are the agent-run protocol's (run-protocol.ts).
 */

export interface AskAgentOptions {
  /** The conversation to continue (and keep); omitted: a task of its own, with no memory kept. */
  sessionId?: string;
  /** The run's id (default a new UUID): events go to `kova.<c>.events.<sessionId>.<runId>`. */
  runId?: string;
  /** Makes this a child run of that run (events carry it; run trees link on it). */
  parentRunId?: string;
  constraints?: TaskConstraints;
  /** Send `agent.chat` (requires sessionId) instead of `task_delegate`. */
  chat?: boolean;
  /** The conversation before `input`, for a task without a session (the caller keeps it). */
  history?: HistoryTurn[];
  /** Every event of the run as it arrives (tokens included), until `run_stream_end`. */
  onEvent?: (event: KovaEvent) => void;
  /** How long to wait for the result (default 10 min). */
  timeoutMs?: number;
  /** The envelope id (default new): resending the same id within the duplicate window runs once. */
  messageId?: string;
  /** Sender id (default the client's id). */
  from?: string;
  /** Look the agent up in the registry first (default true; see AskOptions.checkAgent). */
  checkAgent?: boolean;
}

/** Where the run's events and reply arrive, and how long to wait for the last events. */
const STREAM_END_GRACE_MS = 2_000;
const utf8 = new TextDecoder();

/**
 * Runs an agent by id and resolves with its result: a durable `task_delegate` (or
 * `agent.chat`) with a reply inbox, while the run's events stream to `onEvent`. What the
 * workflow, swarm and gateway layers call; any NATS client can do the same by the wire
 * protocol (docs/protocol.md). Ids are chosen here when the caller gives none, so that the
 * event subscription is in place before the message is sent.
 * @returns the `result_notify` payload; a failed or cancelled run resolves too (see `status`)
 * @throws UnknownAgentError when no agent of that id is declared; KovaTimeoutError when no
 *   result comes in time; RemoteError when the agent's node failed the message itself;
 *   KovaError PERMISSION_DENIED, before anything is sent, when `onEvent` is given and the
 *   NATS user may not read the run's events
 */
export async function askAgent(client: Bus | { bus: Bus }, agentId: string, input: string, opts: AskAgentOptions = {}): Promise<AgentResult> {
  const bus = "bus" in client ? client.bus : client;
  const runId = opts.runId ?? newId();
  const sessionId = opts.sessionId ?? runId;
  const payload = opts.chat
    ? runPayload({ message: input, sessionId, runId, parentRunId: opts.parentRunId })
    : runPayload({ input, runId, sessionId: opts.sessionId, history: opts.history, parentRunId: opts.parentRunId, constraints: opts.constraints });
  // Only a caller that follows the run subscribes to its events: a NATS user with the
  // `client` role of deploy/nats/accounts.conf may ask, but not read events.
  let ended!: () => void;
  const streamEnded = new Promise<void>((r) => (ended = r));
  let refused: unknown;
  const onEvent = opts.onEvent;
  const subject = bus.subjects.events(sessionId, runId);
  const isFirst = firstDelivery();
  const events = onEvent
    ? bus.nc.subscribe(subject, {
        callback: (err, m) => {
          if (err) {
            refused = err;
            ended();
            return;
          }
          // A publish retried while its ack was slow reaches a live subscriber twice.
          if (!isFirst(m.headers)) return;
          let e: KovaEvent;
          try {
            e = JSON.parse(utf8.decode(m.data)) as KovaEvent;
          } catch {
            return;
          }
          try {
            onEvent(e);
          } catch {
            // the caller's callback must not stop the stream
          }
          if (e.type === "run_stream_end") ended();
        },
      })
    : undefined;
  try {
    await bus.nc.flush();
    // The server refuses a subscription before it answers the flush: nothing is sent yet.
    if (refused !== undefined) {
      throw new KovaError(
        BusErrorCode.PERMISSION_DENIED,
        `this NATS user may not subscribe to ${subject} (the run's events): ask without onEvent, or connect as a user that may read events (the operator role of deploy/nats/accounts.conf)`,
        { cause: refused, data: { subject } },
      );
    }
    const env = createEnvelope({
      from: opts.from ?? bus.clientId,
      to: agentId,
      type: opts.chat ? AGENT_CHAT : "task_delegate",
      payload,
      ...(opts.messageId ? { id: opts.messageId } : {}),
    });
    const reply = await bus.ask<AgentResult>(env, { timeoutMs: opts.timeoutMs ?? 600_000, ...(opts.checkAgent === false ? { checkAgent: false } : {}) });
    // The reply is sent after the run's last event is stored; live delivery may still be on its way.
    if (events) await Promise.race([streamEnded, new Promise((r) => setTimeout(r, STREAM_END_GRACE_MS).unref())]);
    return reply.payload;
  } finally {
    events?.unsubscribe();
  }
}

/**
 * Interrupts the agent's turn on one delegated message (the node's `interrupt` signal for
 * that message only, through the `signal` endpoint of the node hosting the agent), so a
 * delegator that no longer wants a result — a cancelled workflow, a swarm past its deadline —
 * ends the child run `cancelled` instead of letting it spend tokens for nothing. A message
 * still queued is interrupted when its turn starts on that node. Resolves false when the
 * agent could not be reached; it never throws (the delegator carries on either way).
 */
export type InterruptDelegation = (agentId: string, messageId: string) => Promise<boolean>;

/** One `task_delegate` to an agent, with every id chosen by the delegator. */
export interface Delegation {
  /**
   * The envelope id (and `Nats-Msg-Id`). Derive it from what the delegator has recorded
   * (`derivedId`, core/ids.ts): a re-send after a crash is then a duplicate the stream and the agent drop.
   */
  id: string;
  from: string;
  to: string;
  input: string;
  sessionId: string;
  runId: string;
  parentRunId?: string;
  constraints?: TaskConstraints;
  /** Where the `result_notify` goes (a RunWatcher's inbox). */
  replyTo?: string;
  /** Envelope deadline, epoch ms: a message still queued after it goes to the DLQ (`expired`) instead of running late. */
  deadline?: number;
}

/**
 * Sends the delegation durably; resolves after JetStream stored it.
 * @returns whether the stream already held it (a re-send inside the duplicate window)
 * @throws what Bus.send throws (InvalidEnvelopeError naming a bad field, timeouts)
 */
export async function delegateTask(bus: Bus, d: Delegation): Promise<{ duplicate: boolean }> {
  const payload = runPayload({ input: d.input, sessionId: d.sessionId, runId: d.runId, parentRunId: d.parentRunId, constraints: d.constraints });
  const env = createEnvelope({
    id: d.id,
    from: d.from,
    to: d.to,
    type: "task_delegate",
    payload,
    correlationId: d.id,
    ...(d.replyTo ? { replyTo: d.replyTo } : {}),
    ...(d.deadline ? { deadline: Math.round(d.deadline) } : {}),
  });
  const ack = await bus.send(env);
  return { duplicate: ack.duplicate };
}
