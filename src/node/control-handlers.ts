import { ArgumentError, KovaError, assertId, KOVA_VERSION } from "../core/index.js";
import { redactUrls } from "../bus/index.js";
import { ActorErrorCode, UnknownActorTypeError, isSignal, type ActorHost, type ActorTypeRegistry, type Signal } from "../actors/index.js";
import {
  type AgentStatusView,
  type NodeStatusView,
  type SignalReply,
  type SignalRequest,
  type SpawnReply,
  type SpawnRequest,
  type LeaseTable,
  type ActorAdmission,
  QuotaExceededError,
  type Membership,
  type AgentRecord,
  type AgentRegistry,
  type VirtualActorsView,
} from "../cluster/index.js";
import type { ResolvedNats } from "./nats/bootstrap.js";
import type { PlacementController } from "./placement/controller.js";
import type { NodeRecoveryReport } from "./recovery-policy.js";
import type { ModelSlotStats } from "../agents/index.js";

/** What the control endpoints read and change: the node's parts, once it has booted. */
export interface ControlDeps {
  readonly nodeId: string;
  readonly cluster: string;
  readonly incarnation: string;
  readonly startedAt: number;
  readonly nats: ResolvedNats;
  readonly membership: Membership;
  readonly host: ActorHost;
  readonly leases: LeaseTable;
  readonly registry: AgentRegistry;
  readonly types: ActorTypeRegistry;
  readonly placement: PlacementController;
  readonly recovery: NodeRecoveryReport;
  /** `[cluster] max_actors`, enforced by `admission`. */
  readonly maxActors: number;
  /** Decides whether a new actor fits under max_actors (exact per node, fenced near the cap; spawns and activations share it). */
  readonly admission: ActorAdmission;
  stopping(): boolean;
  /** Ordered registry write for one actor (see RegistryWrites). */
  writeRegistry(actorId: string, change: (cur: AgentRecord) => AgentRecord | undefined): Promise<unknown>;
  /** A best-effort cluster event. */
  publish(type: string, runId: string, data: unknown): void;
  /** Templates, activations and passivations (virtual-actors.ts). */
  virtual(): VirtualActorsView;
  /** The provider-call scheduler's slots and waits per model. */
  models(): ModelSlotStats[];
  /**
   * Switches an agent's model (the `model=<name>` signal).
   * @throws ArgumentError when the actor is not an agent
   */
  switchModel(agentId: string, model: string): Promise<void>;
}

/**
 * The handlers behind the `kova-node` endpoints (status, agents, spawn, signal). They
 * validate what a remote caller sends before touching anything, and answer with errors
 * that name the fix.
 */
export class NodeControl {
  constructor(private readonly d: ControlDeps) {}

  /** This node's status (the `status` endpoint). */
  status(): NodeStatusView {
    const d = this.d;
    const byState: Record<string, number> = {};
    const hosted = d.host.list();
    for (const a of hosted) byState[a.state] = (byState[a.state] ?? 0) + 1;
    return {
      nodeId: d.nodeId,
      cluster: d.cluster,
      incarnation: d.incarnation,
      pid: process.pid,
      version: KOVA_VERSION,
      startedAt: d.startedAt,
      uptimeMs: Date.now() - d.startedAt,
      nats: { source: d.nats.source, urls: redactUrls(d.nats.urls) },
      liveNodes: d.membership.liveNodes(),
      healthy: d.membership.selfHealthy(),
      actors: { hosted: hosted.length, byState },
      recovery: { ...d.recovery },
      stopping: d.stopping(),
      memory: (({ rss, heapUsed, external }) => ({ rss, heapUsed, external }))(process.memoryUsage()),
      virtual: d.virtual(),
      models: d.models(),
    };
  }

  /** Actors hosted here (the `agents` endpoint). */
  agents(): AgentStatusView[] {
    return this.d.host.list().map((a) => ({
      id: a.id,
      type: a.type,
      state: a.state,
      inFlight: a.inFlight,
      handled: a.handled,
      ...(a.template ? { template: a.template, idleMs: Date.now() - a.lastActiveAt } : {}),
    }));
  }

  /**
   * Declares an actor; placement hosts it on its rendezvous owner.
   * @throws InvalidIdError; UnknownActorTypeError for a type this node does not know; QuotaExceededError past `[cluster] max_actors`
   */
  async spawn(req: SpawnRequest): Promise<SpawnReply> {
    const d = this.d;
    const id = assertId("actor id", req?.id);
    const type = assertId("actor type", req?.type);
    if (!d.types.has(type)) throw new UnknownActorTypeError(type, d.types.types());
    const capabilities = req.capabilities ?? d.types.get(type).capabilities ?? [];
    // Every registered actor costs a durable consumer on the server: a flood of spawns
    // stops at the cap instead of exhausting nats-server's memory (admission.ts).
    const created = await d.admission.admit(
      id,
      (fence) => d.registry.declare({ id, type, capabilities }, fence === undefined ? {} : { fence }),
      (live) =>
        new QuotaExceededError(
          "[cluster] max_actors",
          d.maxActors,
          live,
          "kill actors you no longer need (kova signal <id> kill) or raise max_actors in kova.toml",
        ),
    );
    d.publish("agent_spawned", id, { id, type, created, via: d.nodeId });
    return { created, id, type, via: d.nodeId };
  }

  /**
   * Delivers a signal to an actor hosted here and records the wish in the registry, so
   * a pause survives a move and a killed actor is never placed again.
   * @throws ArgumentError for an unknown signal; KovaError NOT_HOSTED naming the node that hosts it
   */
  async signal(req: SignalRequest): Promise<SignalReply> {
    const d = this.d;
    const actorId = assertId("actor id", req?.actorId);
    const sig = req?.signal;
    const model = typeof sig === "string" && sig.startsWith("model=") ? sig.slice("model=".length) : undefined;
    if (!isSignal(sig) && model === undefined) {
      throw new ArgumentError("signal", `unknown signal ${JSON.stringify(sig)}: use pause, resume, interrupt, kill or model=<name>`);
    }
    if (!d.host.status(actorId)) {
      const holder = d.leases.get(actorId)?.value.node ?? null;
      throw new KovaError(
        ActorErrorCode.NOT_HOSTED,
        `actor ${actorId} is not hosted on node ${d.nodeId} (lease holder: ${holder ?? "none"}); send the signal to that node`,
        { data: { actorId, holder } },
      );
    }
    if (req.messageId !== undefined) {
      if (sig !== "interrupt") throw new ArgumentError("messageId", "only an interrupt names a message");
      const messageId = assertId("message id", req.messageId);
      const interrupted = d.host.interruptMessage(actorId, messageId);
      d.publish("agent_signal", actorId, { actorId, signal: sig, messageId, interrupted, node: d.nodeId });
      return { actorId, signal: sig, node: d.nodeId, state: d.host.status(actorId)?.state ?? "Completed", interrupted };
    }
    if (model !== undefined) {
      await d.switchModel(actorId, model);
      d.publish("agent_signal", actorId, { actorId, signal: sig, node: d.nodeId });
      return { actorId, signal: sig, node: d.nodeId, state: d.host.status(actorId)?.state ?? "Completed" };
    }
    const desired = sig === "pause" ? "paused" : sig === "resume" ? "running" : sig === "kill" ? "killed" : undefined;
    if (desired) await d.writeRegistry(actorId, (cur) => ({ ...cur, desired }));
    await d.host.signal(actorId, sig as Signal);
    d.publish("agent_signal", actorId, { actorId, signal: sig, node: d.nodeId });
    if (sig === "kill") d.placement.kick();
    return { actorId, signal: sig, node: d.nodeId, state: d.host.status(actorId)?.state ?? "Completed" };
  }
}
