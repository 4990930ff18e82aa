import { createEnvelope, type Bus } from "../bus/index.js";
import type { TaskConstraints, TaskDelegatePayload } from "./run-protocol.js";

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
  const payload: TaskDelegatePayload = { input: d.input, sessionId: d.sessionId, runId: d.runId };
  if (d.parentRunId) payload.parentRunId = d.parentRunId;
  if (d.constraints && Object.keys(d.constraints).length > 0) payload.constraints = d.constraints;
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
