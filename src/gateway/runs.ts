import { ErrorCode, isKovaError, isTimeout, KovaError, parseInstanceId, type Logger } from "../core/index.js";
import {
  isRunStatus,
  reportedError,
  reportedUsage,
  runPayload as payloadOf,
  type AgentChatPayload,
  type HistoryTurn,
  type TaskDelegatePayload,
} from "../agents/index.js";
import { ActorErrorCode } from "../actors/index.js";
import { BusErrorCode, createEnvelope, type ActivationReply, type Bus, type KovaEvent } from "../bus/index.js";
import { controlRequest, nodeSubject, type SignalReply, type AgentRecord, type AgentRegistry, ClusterErrorCode } from "../cluster/index.js";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";
import { zeroUsage, type RunOutcome } from "./task-projection.js";
import type { RunTicket } from "./quotas.js";

/** What the gateway asks an agent to do: one run, under ids the gateway chose. */
export interface RunRequest {
  agentId: string;
  /** `task_delegate` for a one-shot task; `agent.chat` continues the session's conversation. */
  kind: "task_delegate" | "agent.chat";
  input: string;
  /**
   * A task of its own: no session memory is loaded or kept (`sessionId` is then the run's
   * id, which the agent uses by itself), and `history` is the conversation the client keeps.
   */
  stateless?: { history: HistoryTurn[] };
  /**
   * For `agent.chat`: the client's turns before `input`, which start the session when the
   * agent has no memory of it yet (and are ignored once it has).
   */
  chatHistory?: HistoryTurn[];
  sessionId: string;
  runId: string;
  /**
   * The id of the message that starts the run: an interrupt names it, so it cuts this run
   * only (never a turn the agent runs after it, maybe another key's).
   */
  messageId: string;
  /** How long the run may take (the message's deadline too); past it the run is interrupted. */
  timeoutMs: number;
  /** `max_tokens`, and the end user the run is for (sessions.ts, endUserOf). */
  constraints?: { max_tokens?: number; user?: string };
  traceId?: string;
  /** The caller's quotas (quotas.ts): ended with the run's usage when the run ends. */
  quota?: RunTicket;
}

/** The payload of the message that starts a run (docs/protocol.md, "Agents"). */
export function runPayload(req: RunRequest): AgentChatPayload | TaskDelegatePayload {
  const { input, sessionId, runId, constraints } = req;
  if (req.kind === "agent.chat") return payloadOf({ message: input, sessionId, runId, history: req.chatHistory, constraints });
  // A task of its own names no session: the agent keeps no memory of it.
  return payloadOf({ input, ...(req.stateless ? { history: req.stateless.history } : { sessionId }), runId, constraints });
}

/** One event of a run with its position in the events stream. */
export interface RunEvent {
  seq: number;
  event: KovaEvent;
  /** Events of the run stored after this one (0: this is the newest). */
  pending: number;
}

export interface FollowOptions {
  /** Stream sequence to start after (0: from the run's first event). */
  afterSeq?: number;
  signal?: AbortSignal;
}

/**
 * The gateway's side of the agent protocol (docs/protocol.md, "Agent runs"): send the
 * message that starts a run, read the run's events from the EVENTS stream, interrupt it.
 * It knows nothing of HTTP; the A2A, OpenAI and web front ends share it.
 */
export class RunClient {
  constructor(
    private readonly bus: Bus,
    private readonly registry: AgentRegistry,
    private readonly log: Logger,
  ) {}

  get cluster(): string {
    return this.bus.cluster;
  }

  /**
   * The agent's record, checked before anything is sent.
   * @throws GatewayHttpError 404 naming the agent when the cluster has no such agent (or it was killed)
   */
  agent(agentId: string) {
    const record = this.registry.get(agentId);
    if (!record || record.desired === "killed") {
      throw new GatewayHttpError(
        404,
        BusErrorCode.UNKNOWN_AGENT,
        `no agent ${JSON.stringify(agentId)} in cluster ${this.bus.cluster}: GET /v1/models or /agents lists the agents`,
        { data: { agentId } },
      );
    }
    return record;
  }

  /**
   * The agent's record, activating a template instance (`<template>--<key>`) the registry
   * does not list (never addressed, or passivated) as `ask` does, before anything is sent.
   * An instance just activated may not be in this gateway's registry mirror yet: it is then
   * described from the activation reply.
   * @throws GatewayHttpError 404 when there is no such agent and no template matches the id;
   *   429 QUOTA_EXCEEDED past the cluster's `max_actors`; 503 when no node answers
   */
  async ready(agentId: string): Promise<AgentRecord> {
    const record = this.registry.get(agentId);
    if ((record && record.desired !== "killed") || parseInstanceId(agentId) === undefined) return this.agent(agentId);
    let reply: ActivationReply | undefined;
    try {
      reply = await this.bus.activate(agentId);
    } catch (err) {
      if (isKovaError(err, BusErrorCode.UNKNOWN_AGENT))
        throw new GatewayHttpError(404, BusErrorCode.UNKNOWN_AGENT, err.message, { data: { agentId }, cause: err });
      if (isKovaError(err, ClusterErrorCode.QUOTA_EXCEEDED))
        throw new GatewayHttpError(429, ClusterErrorCode.QUOTA_EXCEEDED, err.message, { data: { agentId }, cause: err });
      throw err;
    }
    if (!reply)
      throw new GatewayHttpError(
        503,
        GatewayErrorCode.NO_NODE,
        `no Kova node answered the activation of ${agentId} in cluster ${this.bus.cluster}; retry when a node is up`,
        { data: { agentId } },
      );
    return (
      this.registry.get(agentId) ?? {
        id: agentId,
        type: reply.template ?? agentId,
        ...(reply.template ? { template: reply.template } : {}),
        node: null,
        state: "Created",
        capabilities: [],
        desired: "running",
        updatedAt: Date.now(),
      }
    );
  }

  /**
   * Sends the message that starts the run (durable: it is processed even if this gateway
   * goes away) and resolves with the agent's reply. Never rejects: a failure to send, an
   * error reply or a timeout become a failed (or cancelled) outcome. On the timeout the run
   * is interrupted too: nobody waits for it any more, and a run that hangs (a model call
   * that never answers) would hold the agent and every message queued behind it.
   */
  run(req: RunRequest): Promise<RunOutcome> {
    return Promise.resolve()
      .then(() =>
        this.bus.ask<unknown>(
          createEnvelope({
            id: req.messageId,
            from: this.bus.clientId,
            to: req.agentId,
            type: req.kind,
            payload: runPayload(req),
            ...(req.traceId ? { traceId: req.traceId } : {}),
          }),
          { timeoutMs: req.timeoutMs, checkAgent: false },
        ),
      )
      .then(
        (reply) => outcomeOf(reply.payload),
        (err: unknown) => {
          if (isTimeout(err)) this.abandon(req, "past its timeout");
          return failureOf(err);
        },
      )
      .then((outcome) => {
        req.quota?.end(outcome.usage);
        return outcome;
      });
  }

  /**
   * Interrupts a run nobody waits for any more (`why` says which, for the log), in the
   * background: a failure to reach its node is logged, the run then holds the agent until it ends.
   */
  abandon(req: Pick<RunRequest, "agentId" | "runId" | "messageId">, why: string): void {
    this.interrupt(req.agentId, req.messageId).then(
      (reply) => this.log.info({ agentId: req.agentId, runId: req.runId, interrupted: reply.interrupted }, `interrupted a run ${why}`),
      (err: unknown) => this.log.warn({ err, agentId: req.agentId, runId: req.runId }, `could not interrupt a run ${why}; it holds the agent until it ends`),
    );
  }

  /**
   * A run's events, in order, from the EVENTS stream (so a follower that starts late, on
   * another replica or after a restart, misses nothing); ends when the run's
   * `run_stream_end` arrives or `signal` aborts.
   */
  async *follow(sessionId: string, runId: string, opts: FollowOptions = {}): AsyncGenerator<RunEvent> {
    const subject = this.bus.subjects.events(sessionId, runId);
    const reader = await this.bus.readStoredEvents(subject, opts.afterSeq ? { afterSeq: opts.afterSeq } : undefined, { maxMessages: 256 });
    const stop = () => reader.close();
    opts.signal?.addEventListener("abort", stop, { once: true });
    try {
      if (opts.signal?.aborted) return;
      for await (const m of reader.messages) {
        let event: KovaEvent;
        try {
          event = m.json<KovaEvent>();
        } catch {
          this.log.debug({ subject }, "skipped a message that is not a Kova event");
          continue;
        }
        yield { seq: m.seq, event, pending: m.info.pending };
        if (event.type === "run_stream_end") return;
      }
    } finally {
      opts.signal?.removeEventListener("abort", stop);
      reader.close();
    }
  }

  /** Stream sequence of the run's newest stored event (0: none yet). */
  async lastSeq(sessionId: string, runId: string): Promise<number> {
    const m = await this.bus.jsm.streams.getMessage(this.bus.subjects.streams.events, { last_by_subj: this.bus.subjects.events(sessionId, runId) });
    return m?.seq ?? 0;
  }

  /**
   * Interrupts the run started by message `messageId` (the node's `interrupt` signal naming
   * it): its model call is aborted and the run ends `cancelled`. A run whose message has not
   * started yet is cut when it starts; the agent's other turns are never touched.
   * @throws KovaError NOT_HOSTED when the agent is not placed on a node right now
   */
  async interrupt(agentId: string, messageId: string): Promise<SignalReply> {
    const record = this.agent(agentId);
    if (!record.node)
      throw new KovaError(ActorErrorCode.NOT_HOSTED, `agent ${agentId} is not hosted on any node right now; retry when it is placed`, { retryable: true });
    return controlRequest<SignalReply>(this.bus.nc, nodeSubject(this.bus.cluster, record.node, "signal"), { actorId: agentId, signal: "interrupt", messageId });
  }
}

/** Reads an agent's `result_notify` payload; a plain actor's reply becomes its JSON text. */
export function outcomeOf(payload: unknown): RunOutcome {
  const p = (payload ?? {}) as Record<string, unknown>;
  if (!isRunStatus(p.status))
    return { status: "completed", output: typeof payload === "string" ? payload : JSON.stringify(payload ?? null), usage: zeroUsage() };
  const error = reportedError(p.error);
  const output = typeof p.output === "string" ? p.output : JSON.stringify(p.output ?? "");
  return { status: p.status, output, usage: reportedUsage(p.usage) ?? zeroUsage(), ...(error ? { error } : {}) };
}

function failureOf(err: unknown): RunOutcome {
  if (isKovaError(err, ErrorCode.INTERRUPTED)) return { status: "cancelled", output: "", usage: zeroUsage() };
  const code = isKovaError(err) ? err.code : GatewayErrorCode.RUN_FAILED;
  return { status: "failed", output: "", usage: zeroUsage(), error: { code, message: err instanceof Error ? err.message : String(err) } };
}
