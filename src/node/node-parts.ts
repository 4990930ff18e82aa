import type { Logger } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import type { ActorHost, ActorTemplateRegistry } from "../actors/index.js";
import type { NodeConfig } from "./config.js";
import type { LeaseTable, Membership, AgentRecord, AgentRegistry } from "../cluster/index.js";

/**
 * The parts of a node that its agent-side handlers, workflow wiring, host port and
 * background jobs are built from, once the node has them (from the actor host's creation
 * on). One shape, so that each of those takes the fields it needs (`Pick<NodeParts, …>`)
 * and the node hands over one object instead of a hand-copied field list per consumer.
 */
export interface NodeParts {
  readonly config: NodeConfig;
  readonly nodeId: string;
  readonly cluster: string;
  readonly incarnation: string;
  readonly bus: Bus;
  readonly host: ActorHost;
  readonly registry: AgentRegistry;
  readonly leases: LeaseTable;
  readonly membership: Membership;
  readonly templates: ActorTemplateRegistry;
  /** The node's own logger (`component: "node"`): lines written on the node's behalf. */
  readonly log: Logger;
  /** What the node hands the services it starts: bound to the node's id only, since each binds its own `component`. */
  readonly scope: Logger;
  /** Replicas of a bucket opened on first use (`[cluster] replicas`, or what the NATS server supports). */
  replicas(): number;
  /** Ordered registry write for one actor (see RegistryWrites). */
  writeRegistry(actorId: string, change: (cur: AgentRecord) => AgentRecord | undefined): Promise<unknown>;
  /** A best-effort cluster event. */
  publish(type: string, runId: string, data: unknown): void;
}
