import { decodeValue, tenantAgentId, type CodecLimits } from "../bus/index.js";
import { assertId, ArgumentError, isKovaError, KOVA_VERSION } from "../core/index.js";
import type { ModelSlotStats } from "../agents/index.js";
import type { AgentControl } from "./agent-control.js";
import type { NodeControl } from "./control-handlers.js";
import {
  approveSubject,
  nodeSubject,
  schedulesSubject,
  spawnSubject,
  type SchedulesRequest,
  type SignalRequest,
  type SpawnRequest,
  type ToolsRequest,
  startMicroService,
  type MicroEndpoint,
  type MicroService,
} from "../cluster/index.js";
import type { NodeParts } from "./node-parts.js";
import type { VirtualActors } from "./virtual-actors.js";
import { evalControlSubject, handleEvalSpecRequest, type EvalStore } from "../eval/index.js";

/** What the `kova-node` endpoints answer from. */
export interface NodeServiceDeps extends Pick<NodeParts, "nodeId" | "cluster" | "bus" | "scope"> {
  readonly control: NodeControl;
  readonly agentControl: AgentControl;
  readonly virtual: VirtualActors;
  /** The evals bucket: the `eval` endpoint stores experiments' specs there (docs/evals.md). */
  evalStore(): Promise<EvalStore>;
  /** The provider-call scheduler's slots and waits per model. */
  models(): ModelSlotStats[];
}

/**
 * The `kova-node` micro service and its endpoint table: which subject reaches which
 * handler. Kept apart from the handlers (control-handlers.ts, agent-control.ts) so the
 * whole control surface a node offers reads in one place, next to the request decoding
 * every endpoint shares.
 */
export function startNodeService(d: NodeServiceDeps): Promise<MicroService> {
  const { cluster, nodeId, bus } = d;
  return startMicroService(bus.nc, {
    name: "kova-node",
    version: KOVA_VERSION,
    description: "Kova cluster node: hosts actors, answers control requests",
    metadata: { node_id: nodeId, cluster },
    logger: d.scope,
    acceptsReply: (reply, subject) => bus.replies.allows(reply, subject),
    endpoints: nodeEndpoints(d),
  });
}

function nodeEndpoints(d: NodeServiceDeps): MicroEndpoint[] {
  const { cluster, nodeId, control, agentControl, virtual, bus } = d;
  const body = (data: Uint8Array, endpoint: string) => requestBody(data, bus.limits, endpoint);
  return [
    {
      name: "status",
      subject: nodeSubject(cluster, nodeId, "status"),
      handler: async () => control.status(),
      // `nats micro stats kova-node`: model-call queues and waits, and virtual actors.
      stats: () => ({ models: d.models(), virtual: virtual.view() }),
    },
    { name: "agents", subject: nodeSubject(cluster, nodeId, "agents"), handler: async () => control.agents() },
    { name: "spawn", subject: spawnSubject(cluster), handler: async (data) => control.spawn(body(data, "spawn") as unknown as SpawnRequest) },
    {
      name: "activate",
      subject: bus.subjects.activate,
      // A bus client activates its own instances only: `support--x` is its `support--<scope>x` (the reply names it).
      handler: async (data, headers) => {
        const id = body(data, "activate").id as string;
        const sender = bus.senderOf(headers);
        return virtual.activate(sender ? tenantAgentId(assertId("actor id", id), sender) : id, "request");
      },
    },
    {
      name: "schedules",
      subject: schedulesSubject(cluster),
      handler: async (data) => agentControl.scheduleRequest(body(data, "schedules") as unknown as SchedulesRequest),
    },
    {
      name: "signal",
      subject: nodeSubject(cluster, nodeId, "signal"),
      handler: async (data) => control.signal(body(data, "signal") as unknown as SignalRequest),
    },
    { name: "approve", subject: approveSubject(cluster), handler: async (data) => agentControl.approve(body(data, "approve")) },
    {
      name: "eval",
      subject: evalControlSubject(cluster),
      // Stores an experiment's spec, in parts; a bus principal is refused (spec-requests.ts says why).
      handler: async (data, headers) => handleEvalSpecRequest(await d.evalStore(), body(data, "eval"), bus.senderOf(headers)),
    },
    {
      name: "tools",
      subject: nodeSubject(cluster, nodeId, "tools"),
      handler: async (data) => agentControl.toolsRequest(body(data, "tools") as unknown as ToolsRequest),
    },
  ];
}

/**
 * A request body as one JSON object; an empty body reads as `{}`. Any user the account
 * lets reach an endpoint can send one (the client role reaches `control.activate`), so it
 * is read by the bus's decoder within the bus's limits (size, depth, no `__proto__` key),
 * like a message to an agent: a megabyte of `[` costs a linear scan, not a recursive parse.
 * @throws ArgumentError (INVALID_ARGUMENT) for a body that is not one JSON object within the limits
 */
function requestBody(data: Uint8Array, limits: Readonly<CodecLimits>, endpoint: string): Record<string, unknown> {
  if (data.length === 0) return {};
  const fix = "send one JSON object, as docs/protocol.md shows for each control endpoint";
  let value: unknown;
  try {
    value = decodeValue(data, "json", limits, `the ${endpoint} endpoint`);
  } catch (err) {
    if (!isKovaError(err)) throw err;
    throw new ArgumentError(`${endpoint} request body`, `${err.message}: ${fix}`, { cause: err });
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new ArgumentError(`${endpoint} request body`, `is ${value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`}: ${fix}`);
  }
  return value as Record<string, unknown>;
}
