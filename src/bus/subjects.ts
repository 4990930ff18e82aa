import { assertId } from "../core/index.js";

/**
 * Every subject, stream and bucket name Kova uses, derived from the cluster name in
 * one place. This is the public wire contract (docs/protocol.md): other services,
 * `nats` CLI users and other languages build the same strings.
 */
export interface Subjects {
  readonly prefix: string;
  /** An agent's durable inbox: `kova.<c>.a2a.<agentId>`. */
  a2a(agentId: string): string;
  readonly a2aWildcard: string;
  /**
   * Where a bus client's durable sends land (principals.ts, ingress.ts): `kova.<c>.ingress.a2a.<agentId>`,
   * which its account imports as `kova.<c>.a2a.>`; a node admits each one and stores it.
   */
  ingress(agentId: string): string;
  readonly ingressWildcard: string;
  /** The fast, unstored request path: `kova.<c>.rpc.<agentId>`. */
  rpc(agentId: string): string;
  /** `kova.<c>.events.<sessionId>.<runId>`. */
  events(sessionId: string, runId: string): string;
  /** All runs of one session: `kova.<c>.events.<sessionId>.*`. */
  sessionEvents(sessionId: string): string;
  readonly eventsWildcard: string;
  /** `kova.<c>.dlq.<reason>`. */
  dlq(reason: string): string;
  readonly dlqWildcard: string;
  /** The JetStream advisory sent when a message of the A2A stream exhausts max_deliver. */
  readonly maxDeliveriesAdvisory: string;
  /** An actor's step journal, read by the node that takes the actor over: `kova.<c>.journal.<actorId>`. */
  journal(actorId: string): string;
  readonly journalWildcard: string;
  /** The streams: Kova's four, and `waits`, which holds the subjects workflow runs wait on while a wait exists. */
  readonly streams: { readonly a2a: string; readonly events: string; readonly dlq: string; readonly journal: string; readonly waits: string };
  /** Every KV bucket, `kova_<c>_<name>` (KV_BUCKETS). */
  readonly kv: { readonly [B in KvBucket]: string };
  /** The durable consumer name of an agent's mailbox. */
  consumer(agentId: string): string;
  /**
   * Activation requests for template instances (virtual actors): `kova.<c>.control.activate`,
   * JSON `{ id }`, answered by any node (a micro service endpoint in a queue group).
   */
  readonly activate: string;
}

/** Kova's KV buckets by role, each `kova_<cluster>_<name>` (docs/architecture.md, "KV buckets"). */
export const KV_BUCKETS = {
  agents: "agents",
  nodes: "nodes",
  leases: "leases",
  checkpoints: "checkpoints",
  schedules: "schedules",
  approvals: "approvals",
  agentMemory: "agent_memory",
  agentSettings: "agent_settings",
  agentBudgets: "agent_budgets",
  workflowTimers: "workflow_timers",
  workflowWaits: "workflow_waits",
  gatewayKeys: "gateway_keys",
  gatewayTasks: "gateway_tasks",
  evals: "evals",
} as const;
export type KvBucket = keyof typeof KV_BUCKETS;

/**
 * The name of one of a cluster's buckets. Bucket names keep the cluster's case, because
 * `nats kv` users type them.
 * @throws InvalidIdError for a cluster name that is not a token of `[A-Za-z0-9_-]`
 */
export function bucketName(cluster: string, bucket: KvBucket): string {
  return `kova_${assertId("cluster name", cluster)}_${KV_BUCKETS[bucket]}`;
}

/**
 * @throws InvalidIdError when `cluster` (or, later, an agent id) is not a token of
 *   `[A-Za-z0-9_-]`: a dot would add a subject level, `*`/`>` are wildcards.
 */
export function subjectsFor(cluster: string): Subjects {
  assertId("cluster name", cluster);
  const prefix = `kova.${cluster}`;
  // Stream names are upper case by convention (KOVA_DEFAULT_A2A).
  const upper = cluster.toUpperCase();
  const streams = {
    a2a: `KOVA_${upper}_A2A`,
    events: `KOVA_${upper}_EVENTS`,
    dlq: `KOVA_${upper}_DLQ`,
    journal: `KOVA_${upper}_JOURNAL`,
    waits: `KOVA_${upper}_WAITS`,
  };
  return {
    prefix,
    a2a: (agentId) => `${prefix}.a2a.${assertId("agent id", agentId)}`,
    a2aWildcard: `${prefix}.a2a.*`,
    ingress: (agentId) => `${prefix}.ingress.a2a.${assertId("agent id", agentId)}`,
    ingressWildcard: `${prefix}.ingress.a2a.*`,
    rpc: (agentId) => `${prefix}.rpc.${assertId("agent id", agentId)}`,
    events: (sessionId, runId) => `${prefix}.events.${assertId("session id", sessionId)}.${assertId("run id", runId)}`,
    sessionEvents: (sessionId) => `${prefix}.events.${assertId("session id", sessionId)}.*`,
    eventsWildcard: `${prefix}.events.>`,
    dlq: (reason) => `${prefix}.dlq.${assertId("DLQ reason", reason)}`,
    dlqWildcard: `${prefix}.dlq.*`,
    maxDeliveriesAdvisory: `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${streams.a2a}.*`,
    journal: (actorId) => `${prefix}.journal.${assertId("actor id", actorId)}`,
    journalWildcard: `${prefix}.journal.*`,
    streams,
    kv: Object.fromEntries(Object.keys(KV_BUCKETS).map((b) => [b, bucketName(cluster, b as KvBucket)])) as Subjects["kv"],
    consumer: (agentId) => `agent_${assertId("agent id", agentId)}`,
    activate: `${prefix}.control.activate`,
  };
}
