import type { A2AEnvelope, MessageType } from "../bus/index.js";
import type { TemplateBinding } from "./templates.js";

export type { A2AEnvelope, MessageType };

/** Control signals, delivered over the bus (node `signal` endpoint or the actor's rpc subject). */
export const Signals = ["pause", "resume", "interrupt", "kill"] as const;
export type Signal = (typeof Signals)[number];

export function isSignal(value: unknown): value is Signal {
  return typeof value === "string" && (Signals as readonly string[]).includes(value);
}

/** Options of a journaled step. */
export interface StepOptions {
  /**
   * True when running the step twice has the same effect as once. Only an idempotent step
   * that started before a crash and recorded no result is run again on recovery; any
   * other such step rejects with StepOutcomeUnknownError.
   */
  idempotent?: boolean;
  /**
   * false: the step's outcome is not written to the journal (one write less). Its function
   * runs again whenever the turn is replayed, so only for an idempotent step whose effects
   * are keyed by `info.key` (a re-run is deduplicated) and whose result is the same every
   * time; typically the last step of a turn, whose effects the turn's commit settles.
   * Default true.
   */
  record?: boolean;
}

/** Passed to a step's function. */
export interface StepInfo {
  /**
   * Stable across re-runs of this step (crash recovery, retries): `<actorId>.<envelopeId>.<index>`.
   * Hand it to external APIs that take an idempotency key, so that a re-run is safe.
   */
  key: string;
  /** Position of the step in the turn, from 0. */
  index: number;
  /** Supervised attempt of the turn. */
  attempt: number;
}

/** Where an event emitted by a handler goes; defaults: session `actors`, run = actor id. */
export interface EmitOptions {
  sessionId?: string;
  runId?: string;
  parentRunId?: string;
}

/**
 * What a handler sees while it handles one message (one turn). Everything that is not
 * deterministic comes from here, so a turn rebuilt from the WAL after a crash replays
 * exactly: clock, random numbers and ids are recorded in the turn record, and every
 * side effect is a `step` whose result is recorded before the handler uses it.
 */
export interface ActorContext<S> {
  readonly actorId: string;
  readonly type: string;
  readonly nodeId: string;
  /** Set for an instance of a template (virtual actor): its template name, key and shared config. */
  readonly template?: TemplateBinding;
  /** Mutable; checkpointed after each handled message. Must be JSON-serializable. */
  state: S;
  /** The message being handled. */
  readonly message: A2AEnvelope;
  /** True while a recovered (or retried) turn re-runs over recorded steps. */
  readonly replaying: boolean;
  /** Supervised attempt of this turn, starting at 1. */
  readonly attempt: number;
  now(): number;
  random(): number;
  newId(): string;
  /**
   * Runs `fn` as a journaled step: the result is recorded in the WAL before it is returned;
   * on replay the recorded result is returned without calling `fn`. Checks the lease
   * (fence) first and waits while the actor is paused.
   * @throws StepOutcomeUnknownError for a non-idempotent step interrupted by a crash
   * @throws ReplayMismatchError when replay asks for a different step than recorded
   * @throws LeaseLostError when this node no longer hosts the actor
   */
  step<R>(name: string, fn: (info: StepInfo) => Promise<R> | R, opts?: StepOptions): Promise<R>;
  /**
   * Sends an A2A message from this actor, as an idempotent step (the id is recorded, so a
   * replayed send is deduplicated by JetStream's `Nats-Msg-Id`). Resolves to the id.
   */
  send(env: Omit<A2AEnvelope, "id" | "from"> & { id?: string }, opts?: ActorSendOptions): Promise<string>;
  /**
   * Publishes an event, as an idempotent step, under a `Nats-Msg-Id` derived from the actor,
   * the message and the step's index: an emit that runs again (a turn resumed before its
   * result was recorded) is stored once.
   */
  emit(type: string, data?: unknown, opts?: EmitOptions): Promise<void>;
  /**
   * Publishes a high-rate event (tokens, progress) with a plain NATS publish: not stored,
   * not journaled. Call it inside the step that produces it, so a replay that reuses the
   * step's result does not stream it again. Dropped while the host cannot prove it holds
   * the actor's lease (a stalled host that a peer may have taken the actor from).
   */
  stream(type: string, data?: unknown, opts?: EmitOptions): void;
  /** Tells JetStream the message is still being worked on (long turns). */
  working(): void;
  /** Aborted on interrupt and kill, and when the lease is lost. */
  readonly signal: AbortSignal;
}

export interface ActorSendOptions {
  /**
   * Look the recipient up in the registry first and fail with UnknownAgentError instead of
   * sending when no agent of that id is declared (an instance id `<template>--<key>` is
   * activated instead; an unreadable registry lets the send go). The check is part of the
   * send's journaled step, so a replay fails (or sends) as the first try did. For a sender
   * that waits for an answer: a message to an unknown id would never get one.
   */
  requireKnownAgent?: boolean;
}

export type ActorHandler<S> = (ctx: ActorContext<S>) => Promise<unknown>;
export type RpcType = "info_request" | "capability_query";
export type RpcHandler<S> = (env: A2AEnvelope, state: Readonly<S>) => Promise<unknown> | unknown;

/** Supervision of a crashing handler: retried with exponential backoff, Failed after `maxAttempts`. */
export interface SupervisionOptions {
  /** Attempts per message before the actor is Failed (default 3). */
  maxAttempts?: number;
  /** First backoff (default 200 ms); doubles per attempt, with jitter. */
  baseBackoffMs?: number;
  /** Backoff ceiling (default 10 s). */
  maxBackoffMs?: number;
}

/** An actor type: its state, its handlers by A2A message type, and how it is supervised. */
export interface ActorDefinition<S = unknown> {
  /** Type name, an id token ([A-Za-z0-9_-]). */
  type: string;
  capabilities?: string[];
  /** State of a new actor; a template instance gets its binding (template name, key, config). */
  initialState(template?: TemplateBinding): S;
  /** Durable mailbox path. A type without a handler goes to the DLQ with reason `unhandled`. */
  handlers: Partial<Record<MessageType, ActorHandler<S>>>;
  /** Fast request path (core NATS request/reply); not journaled, reads state only. */
  rpc?: Partial<Record<RpcType, RpcHandler<S>>>;
  /**
   * Messages whose turn writes no record (docs/actors.md, "Turns without a record"): true
   * when the handler, run again on the committed state with the same message, does exactly
   * what it did. It reads no clock and draws no random number or id, and its steps return
   * the same every time with effects keyed by ids derived from the message, as
   * `record: false` steps do: none of them is written. Such a turn skips the PENDING record
   * (a flushed WAL write before the handler) and the step journal on NATS; a crash before
   * its checkpoint leaves the message un-acked, and its redelivery runs the handler again.
   * A redelivered message (delivery count above 1) is recorded all the same, so a turn that
   * brings its process down still counts towards `maxAttempts`. A throw counts as false.
   */
  unrecorded?(env: A2AEnvelope, state: Readonly<S>): boolean;
  /** Shorthand for `supervision.maxAttempts`. */
  maxAttempts?: number;
  supervision?: SupervisionOptions;
  /**
   * Called, awaited, when a turn ends Failed without its handler having returned: the
   * process ended during every attempt (the handler never runs again), or the handler threw
   * on its last attempt. Runs before the message is dead-lettered and the turn committed, so
   * it can tell whoever follows the message's work that it ended (docs/actors.md,
   * "Supervision"). It may run again for the same turn (a crash before the commit): what it
   * publishes should carry ids derived from `env.id`. A throw is logged, not raised.
   */
  onTurnFailed?(info: TurnFailure): Promise<void> | void;
}

/** What `onTurnFailed` is told: the message whose turn failed, and why. */
export interface TurnFailure {
  readonly actorId: string;
  readonly env: A2AEnvelope;
  /** An ActorFailedError for a crash loop; the handler's last error otherwise. */
  readonly error: unknown;
  /** `crash`: the process ended during every attempt; `threw`: the handler threw on its last one. */
  readonly cause: "crash" | "threw";
}
