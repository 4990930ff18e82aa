import { ArgumentError, KovaError, assertId, parseInstanceId } from "../core/index.js";
import { BusErrorCode } from "../bus/index.js";
import { NatsApprovalStore, readDecision } from "../agents/index.js";
import type { AgentServices } from "./agent-services.js";
import type { ApproveReply, SchedulesRequest, ToolsReply, ToolsRequest } from "../cluster/index.js";
import type { NodeParts } from "./node-parts.js";
import { openOnce } from "./open-once.js";
import { parseSchedule } from "./schedules/spec.js";
import type { ScheduleService } from "./schedules/service.js";

/** What the agent-side control endpoints read and change: the node's parts, once it has booted. */
export interface AgentControlDeps extends Pick<NodeParts, "nodeId" | "cluster" | "bus" | "host" | "registry" | "templates" | "replicas" | "log"> {
  /** The agent level; undefined on a node that defines no agents. */
  readonly agentServices: AgentServices | undefined;
  readonly schedules: ScheduleService;
}

/**
 * The handlers behind the `kova-node` endpoints that address agents and what they run
 * rather than the node itself (a model switch, `tools`, `approve`, `schedules`). They live
 * apart from NodeControl because they depend on the agent level and its buckets, which a
 * node of plain actors never loads; like NodeControl they validate what a remote caller
 * sends before touching anything.
 */
export class AgentControl {
  /** The approvals bucket, opened by the first decision this node records. */
  private readonly approvalStore = openOnce(() => NatsApprovalStore.open({ js: this.d.bus.js, cluster: this.d.cluster, replicas: this.d.replicas() }));

  constructor(private readonly d: AgentControlDeps) {}

  /**
   * The `model=<name>` signal: switches an agent hosted here from its next model call on.
   * @throws ArgumentError when the actor is not an agent; UnknownModelError for an unknown model
   */
  async switchModel(actorId: string, model: string): Promise<void> {
    const type = this.d.host.status(actorId)?.type;
    const services = this.d.agentServices;
    if (!services?.agents.some((a) => a.id === type)) {
      throw new ArgumentError("signal", `actor ${actorId} (type ${type ?? "unknown"}) is not an agent: only agents take model=<name>`);
    }
    await services.runtime.switchModel(actorId, model);
  }

  /**
   * `kova tools ls [agent]` (the `tools` endpoint): what an agent of this node can call, or
   * the node's whole registry (empty on a node without agents: it loads no tools).
   * @throws InvalidIdError; KovaError UNKNOWN_AGENT for an agent this node does not define
   */
  async toolsRequest(req: ToolsRequest): Promise<ToolsReply> {
    const { nodeId } = this.d;
    const agent = req?.agent === undefined ? undefined : assertId("agent", req.agent);
    const services = this.d.agentServices;
    if (!services) {
      if (agent !== undefined)
        throw new KovaError(BusErrorCode.UNKNOWN_AGENT, `node ${nodeId} defines no agents, so not ${agent}`, { data: { agentId: agent } });
      return { node: nodeId, tools: [] };
    }
    const tools = await services.describeTools(agent);
    const skipped = services.skippedTools(agent);
    return { node: nodeId, ...(agent !== undefined ? { agent } : {}), tools, ...(skipped.length > 0 ? { skipped } : {}) };
  }

  /**
   * `kova approve|reject` for an agent's tool call (the `approve` endpoint): records the
   * decision in the approvals bucket, whichever node hosts the run (or none, while it moves).
   * @throws ArgumentError for a malformed request; ApprovalNotFoundError; ApprovalAlreadyDecidedError
   */
  async approve(body: unknown): Promise<ApproveReply> {
    const { runId, target, decision } = readDecision(body);
    const store = await this.approvalStore();
    const approvalId = await store.approvalIdOf(runId, target);
    const { record, changed } = await store.decide(runId, approvalId, decision);
    this.d.log.info(
      { runId, approvalId, agentId: record.agentId, tool: record.tool, status: record.status, by: record.by, changed },
      "tool call approval decided",
    );
    return {
      runId,
      approvalId,
      callId: record.callId,
      status: record.status as ApproveReply["status"],
      changed,
      agentId: record.agentId,
      tool: record.tool,
      via: this.d.nodeId,
    };
  }

  /**
   * `kova schedules add|rm|ls` (the `schedules` endpoint).
   * @throws ConfigError for an invalid schedule; ArgumentError for an unknown op
   */
  async scheduleRequest(req: SchedulesRequest): Promise<unknown> {
    const svc = this.d.schedules;
    switch (req?.op) {
      case "add": {
        const spec = parseSchedule(req.schedule, "schedule");
        const r = await svc.upsert(spec, "api");
        const warning = spec.to === undefined ? undefined : this.unknownTarget(spec.to);
        return warning ? { ...r, warning } : r;
      }
      case "rm":
        return { removed: await svc.remove(assertId("schedule id", req.id)) };
      case "ls":
        return svc.list();
      default:
        throw new ArgumentError("op", `unknown schedules operation ${JSON.stringify((req as { op?: unknown })?.op)}: use add, rm or ls`);
    }
  }

  /**
   * Why messages to `to` would wait unanswered, for a warning to whoever addresses it
   * (undefined: an agent of that id is declared, or a template has that instance form).
   */
  private unknownTarget(to: string): string | undefined {
    if (this.d.registry.get(to) !== undefined) return undefined;
    const instance = parseInstanceId(to);
    if (instance && this.d.templates.has(instance.template)) return undefined;
    return (
      `no agent ${to} is declared in cluster ${this.d.cluster}${instance ? `, nor a template ${instance.template}` : ""} (see kova agents ls): ` +
      "its messages wait unanswered and go to the DLQ (reason unknown_agent) after [cluster] unknown_agent_after_ms unless one is declared"
    );
  }
}
