import type { Logger } from "../core/index.js";
import type { Bus, MailboxOptions } from "../bus/index.js";
import type { CheckpointStore } from "./checkpoint-store.js";
import type { NatsStepJournal } from "./step-journal.js";
import type { ReplyRetryOptions } from "./replies.js";
import type { ActorState } from "./lifecycle.js";
import type { SupervisionOptions } from "./types.js";

/**
 * The part of the WAL (src/wal `Wal`) the actor runtime uses. Declared here so that the
 * runtime depends on the contract, not on the WAL's internals; `Wal` satisfies it.
 */
export interface ActorWal {
  append<T>(kind: string, payload: T, opts?: { owner?: string }): Promise<number>;
  replace<T>(seq: number, payload: T, opts?: { kind?: string }): Promise<number>;
  complete(seq: number, opts?: { kv?: Array<{ key: string; value: unknown }>; defer?: boolean }): Promise<void>;
  /** Side-table entries without a record, deferred to the WAL's next write (a turn without a record's local checkpoint). */
  putKv(kv: Array<{ key: string; value: unknown }>): Promise<void>;
  getKv<V>(key: string): V | undefined;
  pendingFor(owner: string): Array<{ seq: number; kind: string; payload: unknown }>;
  /** Every PENDING record now, in seq order. */
  pendingRecords(): Array<{ seq: number; kind: string; owner?: string }>;
}

/** What every actor of a host shares. */
export interface HostDeps {
  readonly bus: Bus;
  readonly wal: ActorWal;
  readonly nodeId: string;
  readonly log: Logger;
  readonly checkpoints: () => Promise<CheckpointStore>;
  /** The step journal on NATS that another node reads on takeover; undefined: journals stay in the local WAL. */
  readonly stepJournal: NatsStepJournal | undefined;
  /** How many processed envelope ids a checkpoint keeps (`[checkpoint] processed_window`). */
  readonly processedWindow: number;
  fence(actorId: string): Promise<void>;
  /** The fence without waiting: throws LeaseLostError unless the lease is provably ours now. */
  fenceNow(actorId: string): void;
  readonly supervision: SupervisionOptions;
  readonly mailbox: MailboxOptions;
  /** Backoff of the retry of owed replies (replies of committed turns whose publish failed). */
  readonly replyRetry: Required<ReplyRetryOptions>;
  /** Publish Idle⇄Running changes of ordinary turns as events too (default false: they are per message). */
  readonly turnEvents: boolean;
  onStateChange(actorId: string, state: ActorState, info?: unknown): void;
}
