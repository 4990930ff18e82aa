import { newId } from "../core/ids.js";
import { KovaError } from "../core/errors.js";
import { BusErrorCode } from "../bus/errors.js";
import { createEnvelope } from "../bus/envelope.js";
import type { Bus } from "../bus/bus.js";
import type { KovaEvent } from "../bus/events.js";
import { AGENT_CHAT, type AgentResult, type AgentTaskPayload, type HistoryTurn, type TaskConstraints } from "./protocol.js";

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
  const payload: AgentTaskPayload | Record<string, unknown> = opts.chat
    ? { message: input, sessionId, runId, ...(opts.parentRunId ? { parentRunId: opts.parentRunId } : {}) }
    : {
        input,
        runId,
        ...(opts.sessionId ? { sessionId } : {}),
        ...(opts.history ? { history: opts.history } : {}),
        ...(opts.parentRunId ? { parentRunId: opts.parentRunId } : {}),
        ...(opts.constraints ? { constraints: opts.constraints } : {}),
      };
  // Only a caller that follows the run subscribes to its events: a NATS user with the
  // `client` role of deploy/nats/accounts.conf may ask, but not read events.
  let ended!: () => void;
  const streamEnded = new Promise<void>((r) => (ended = r));
  let refused: unknown;
  const onEvent = opts.onEvent;
  const subject = bus.subjects.events(sessionId, runId);
  const events = onEvent
    ? bus.nc.subscribe(subject, {
        callback: (err, m) => {
          if (err) {
            refused = err;
            ended();
            return;
          }
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
