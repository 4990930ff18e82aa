import type { ModelSlotStats } from "../agents/index.js";

// One control request with a JSON body (the bus's: the eval layer's client sends them too).
export { controlRequest } from "../bus/index.js";

/**
 * The node control protocol: endpoints of the `kova-node` micro service. Per-node
 * endpoints live under `kova.<c>.node.<nodeId>.<endpoint>` so a caller can address the
 * node that hosts an actor; `spawn` is cluster-wide (`kova.<c>.control.spawn`, one node
 * of the queue group answers) because any node can declare an actor. Replies are JSON;
 * failures carry the `Nats-Service-Error*` headers and `{ code, message, ... }`.
 */
export const NODE_ENDPOINTS = ["status", "agents", "signal", "tools"] as const;
export type NodeEndpoint = (typeof NODE_ENDPOINTS)[number];

export function nodeSubject(cluster: string, nodeId: string, endpoint: NodeEndpoint): string {
  return `kova.${cluster}.node.${nodeId}.${endpoint}`;
}

/**
 * Schedules are cluster-wide like spawn (any node answers): `{ op: "add", schedule }`,
 * `{ op: "rm", id }`, `{ op: "ls" }`.
 */
export function schedulesSubject(cluster: string): string {
  return `kova.${cluster}.control.schedules`;
}

export type SchedulesRequest = { op: "add"; schedule: Record<string, unknown> } | { op: "rm"; id: string } | { op: "ls" };

/**
 * Decisions on agents' tool-call approvals are cluster-wide like spawn: any node writes
 * them to KV `kova_<c>_approvals`, where the waiting run (on whatever node hosts it now,
 * or later) finds them. Body `ApproveRequest`, reply `ApproveReply`.
 */
export function approveSubject(cluster: string): string {
  return `kova.${cluster}.control.approve`;
}

/** The approval by its id, or by the id of the tool call it holds (one of the two). */
export type ApproveRequest = { runId: string; approved: boolean; by?: string; comment?: string } & (
  | { approvalId: string; callId?: never }
  | { callId: string; approvalId?: never }
);

export interface ApproveReply {
  runId: string;
  approvalId: string;
  /** The tool call the approval holds. */
  callId: string;
  status: "approved" | "rejected";
  /** False when the same decision was already recorded (a repeated request). */
  changed: boolean;
  agentId: string;
  tool: string;
  /** The node that recorded it. */
  via: string;
}

export function spawnSubject(cluster: string): string {
  return `kova.${cluster}.control.spawn`;
}

export interface SpawnRequest {
  id: string;
  type: string;
  capabilities?: string[];
}

export interface SpawnReply {
  created: boolean;
  id: string;
  type: string;
  /** The node that took the request (placement then chooses the host). */
  via: string;
}

/** `tools` endpoint: what an agent of this node can call, or the node's whole registry. */
export interface ToolsRequest {
  agent?: string;
}

/** One tool as `kova tools ls` shows it (ToolDescription, with the agent's approval list applied). */
export interface ToolView {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  idempotency: "idempotent" | "not_idempotent" | "per_call";
  requiresApproval: boolean;
  /** `code` (built-in or defined in code), `mcp:<server>`, `agents`. */
  source: string;
}

/** A tool an MCP server lists that the node does not offer (a name Kova cannot carry, a schema that does not compile, …). */
export interface SkippedToolView {
  /** `<server>/<tool>` as the server names it. */
  name: string;
  /** `mcp:<server>`. */
  source: string;
  reason: string;
}

export interface ToolsReply {
  node: string;
  agent?: string;
  tools: ToolView[];
  /** Present when servers list tools not offered: those the agent's list would name, or all of them. */
  skipped?: SkippedToolView[];
}

export interface SignalRequest {
  actorId: string;
  /** An actor signal, or `model=<name>` to switch an agent's model from its next model call. */
  signal: "pause" | "resume" | "interrupt" | "kill" | `model=${string}`;
  /**
   * With `interrupt`: interrupt only the turn of this message (an envelope id), now if it
   * runs, else when it starts on this node; another message's turn is never cut.
   */
  messageId?: string;
}

export interface SignalReply {
  actorId: string;
  signal: string;
  node: string;
  state: string;
  /** With `messageId`: whether its turn was cut now or will be when it starts. */
  interrupted?: "interrupted" | "when_started";
}

export interface AgentStatusView {
  id: string;
  type: string;
  state: string;
  inFlight: number;
  handled: number;
  /** For a template instance: its template, and how long it has had no turn. */
  template?: string;
  idleMs?: number;
}

export interface NodeStatusView {
  nodeId: string;
  cluster: string;
  incarnation: string;
  pid: number;
  version: string;
  startedAt: number;
  uptimeMs: number;
  nats: { source: string; urls: string[] };
  liveNodes: string[];
  healthy: boolean;
  actors: { hosted: number; byState: Record<string, number> };
  /** WAL recovery at start: actors whose pending turns were finished, are being finished now, or were abandoned (moved). */
  recovery: { finished: string[]; recovering: string[]; abandoned: string[]; corrupt: number; pendingRecords: number };
  stopping: boolean;
  /** process.memoryUsage() of the node, bytes. */
  memory: { rss: number; heapUsed: number; external: number };
  /** Templates of virtual actors, and the activations, passivations and refusals of this node. */
  virtual: VirtualActorsView;
  /** The provider-call scheduler per model: policy, slots in use, queued calls, wait times per class. */
  models: ModelSlotStats[];
}

/** Part of the node's status: templates and what activation and passivation did here. */
export interface VirtualActorsView {
  templates: Array<{ name: string; type: string; idleAfterMs: number; hosted: number }>;
  /** Instances this node registered on their first message (or after a passivation). */
  activations: number;
  /** Instances this node passivated. */
  passivations: number;
  /** Activations refused by `[cluster] max_actors` (their messages wait in the stream). */
  refused: number;
}
