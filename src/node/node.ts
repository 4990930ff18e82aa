import { hostname } from "node:os";
import { join } from "node:path";
import { mkdir } from "node:fs/promises";
import { ErrorCode, isKovaError, KovaError, newId, childLogger, componentLogger, createLogger, type Logger, KOVA_VERSION } from "../core/index.js";
import { Bus } from "../bus/index.js";
import { Wal, type WalFailedError } from "../wal/index.js";
import {
  ActorHost,
  ActorTemplateRegistry,
  ActorTypeRegistry,
  LeaseLostError,
  NatsCheckpointStore,
  UnknownActorTypeError,
  type ActorState,
  type ActorTemplate,
  type RegisteredTemplate,
} from "../actors/index.js";
import { WORKFLOW_ACTOR_TYPE, workflowActor } from "../workflow/index.js";
import type { NodeConfig } from "./config.js";
import type { StartNodeOptions } from "./start-options.js";
import { loadActorModules } from "./actor-modules.js";
import {
  type AgentStatusView,
  type NodeStatusView,
  mirrorTiming,
  LeaseTable,
  Membership,
  type MicroService,
  ActorAdmission,
  refuseNodeIdInUse,
  AgentRegistry,
  RegistryWrites,
} from "../cluster/index.js";
import { NodeControl } from "./control-handlers.js";
import { AgentControl } from "./agent-control.js";
import { startNodeService } from "./node-service.js";
import type { NodeParts } from "./node-parts.js";
import { startMarkerCompaction, startUnknownAgentSweep, type NodeJob } from "./node-jobs.js";
import { WorkflowWiring, workflowRunPorts } from "./workflow-wiring.js";
import { registerEvalTemplates, registerEvalTypes } from "./eval-wiring.js";
import type { EvalStore } from "../eval/index.js";
import { jetStreamReplicas, resolveNats, type ResolvedNats } from "./nats/bootstrap.js";
import { PlacementController } from "./placement/controller.js";
import { placementHostPort } from "./placement/host-port.js";
import { whenNatsReady } from "./nats/ready.js";
import { recoverPendingTurns, type NodeRecoveryReport } from "./recovery-policy.js";
import { ScheduleService } from "./schedules/service.js";
import { VirtualActors } from "./virtual-actors.js";
import { startAgentServices, type AgentServices } from "./agent-services.js";
import { type AgentDefinition, modelScheduler, type ModelCallScheduler } from "../agents/index.js";
import type { Tool } from "../tools/index.js";
import { registerSwarms } from "./swarms.js";

export { KOVA_VERSION };

/** Session id of the cluster's own events (agent state changes, placement, signals). */
export const CLUSTER_EVENTS_SESSION = "kova-cluster";

export type { StartNodeOptions };

/**
 * One Kova cluster node: the composition root. Start order matters and is why this file
 * exists: config → NATS → WAL (recovery scan) → cluster state (registry, leases,
 * heartbeat) → actor host with the lease fence → WAL recovery decisions (finish what we
 * still own, abandon what moved) → placement → control endpoints. What the node starts
 * lives in files of its own (control-handlers.ts and agent-control.ts behind node-service.ts,
 * workflow-wiring.ts, node-jobs.ts, host-port.ts); this one holds the order, the lifecycle
 * (stop, failover, teardown) and the glue between the parts: the fence, registry writes, events.
 */
export class KovaNode {
  readonly incarnation = newId();
  readonly startedAt = Date.now();
  private stopping: Promise<void> | undefined;
  /** Set when the WAL failed: the node stops taking turns and hands its actors over. */
  private failure: WalFailedError | undefined;
  private markEnded!: (reason: Error | null) => void;
  private readonly ended = new Promise<Error | null>((resolve) => (this.markEnded = resolve));
  private readonly recovery: NodeRecoveryReport = { finished: [], recovering: [], abandoned: [], corrupt: 0, pendingRecords: 0 };
  private bus!: Bus;
  private wal!: Wal;
  private nats!: ResolvedNats;
  private dlqMover: { stop(): Promise<void> } | undefined;
  private registry!: AgentRegistry;
  /** The node's registry writes, in order per actor; set once the registry is open. */
  private registryWrites!: RegistryWrites;
  private leases!: LeaseTable;
  private membership!: Membership;
  private host!: ActorHost;
  private placement!: PlacementController;
  private micro: MicroService | undefined;
  private control!: NodeControl;
  private unknownSweep: NodeJob | undefined;
  private markerCompaction: NodeJob | undefined;
  private schedules: ScheduleService | undefined;
  private virtual!: VirtualActors;
  private admission!: ActorAdmission;
  private agentServices: AgentServices | undefined;
  /** What the node's handlers, wiring and jobs are built from; set once the actor host exists. */
  private parts!: NodeParts;
  /** Workflow runs' and swarm coordinators' ports; set once the actor host exists. */
  private workflow!: WorkflowWiring;
  /** The experiment templates (eval, eval-subject), registered after the node's own. */
  private evalTemplates: ActorTemplate[] = [];
  /** The evals bucket, where the `control.eval` endpoint stores experiments' specs. */
  private evalStore!: () => Promise<EvalStore>;
  /** The node's own lines (`component: "node"`). */
  private readonly log: Logger;
  /**
   * What the node hands its parts (bus, WAL, registry, placement…): bound to the node's id
   * only, since each part binds its own `component` and pino would repeat a key bound twice.
   */
  private readonly scope: Logger;

  private constructor(
    readonly config: NodeConfig,
    private readonly types: ActorTypeRegistry,
    private readonly templates: ActorTemplateRegistry,
    /** The per-node provider-call scheduler: agents take model-call slots from it. */
    readonly modelScheduler: ModelCallScheduler,
    logger: Logger,
    private readonly agentDefs: AgentDefinition[] = [],
    private readonly codeTools: Tool[] = [],
  ) {
    this.scope = childLogger(logger, { nodeId: config.nodeId });
    this.log = componentLogger(this.scope, "node");
  }

  get nodeId(): string {
    return this.config.nodeId;
  }

  get cluster(): string {
    return this.config.cluster;
  }

  /** The node's NATS bus, for an application that embeds a node and sends from it. */
  get busClient(): Bus {
    return this.bus;
  }

  /**
   * Starts a node and joins the cluster.
   * @throws ConfigError for an unknown actor type or module, or an invalid template; UnknownActorTypeError
   *   for a template whose type is not registered; NatsBootstrapError / NatsUnreachableError
   *   when NATS cannot be found; WAL errors (WAL_BAD_KEY for a wrong key)
   */
  static async start(opts: StartNodeOptions): Promise<KovaNode> {
    const logger = opts.logger ?? createLogger();
    const types = opts.types ?? new ActorTypeRegistry();
    // Coordinators reach the bus through the node, which connects after types are known.
    let node: KovaNode | undefined;
    // One scheduler per node: agents and coordinators calling one model share its slots.
    const scheduler = opts.modelScheduler ?? modelScheduler(opts.config.models, logger);
    if (opts.modelScheduler) for (const [name, m] of opts.config.models) scheduler.setModel(name, { maxConcurrency: m.maxConcurrency, policy: m.scheduling });
    registerSwarms(
      opts.config,
      types,
      { bus: () => node!.busClient, interrupt: (agentId, messageId) => node!.workflow.interruptDelegation(agentId, messageId) },
      scheduler,
      logger,
    );
    const fromModules = await loadActorModules(opts.config, types);
    const templates = opts.templates instanceof ActorTemplateRegistry ? opts.templates : new ActorTemplateRegistry(opts.templates ?? []);
    for (const [i, t] of opts.config.templates.entries()) templates.register(t, `actor_templates[${i}]`);
    for (const t of templates.list()) if (!types.has(t.type)) throw new UnknownActorTypeError(t.type, types.types());
    node = new KovaNode(
      opts.config,
      types,
      templates,
      scheduler,
      logger,
      [...(opts.agents ?? []), ...opts.config.agents, ...opts.config.agentTemplates, ...fromModules.agents],
      [...(opts.tools ?? []), ...fromModules.tools],
    );
    // Every node can host workflow runs (docs/workflows.md), unless the application
    // registered its own type of that name.
    if (!types.has(WORKFLOW_ACTOR_TYPE)) {
      const n = node;
      types.register(workflowActor(workflowRunPorts(() => n.workflow)));
    }
    // Every node can host experiments and their subjects' runners (docs/evals.md).
    {
      const n = node;
      ({ templates: n.evalTemplates, store: n.evalStore } = registerEvalTypes(types, {
        cluster: opts.config.cluster,
        bus: () => n.bus,
        replicas: () => n.replicas(),
        agents: () => n.agentDefs,
        runtime: () => n.agentServices?.runtime,
        timers: () => n.workflow.timers(),
        interrupt: (agentId, messageId) => n.workflow.interruptDelegation(agentId, messageId),
        ...(opts.config.eval ? { trust: opts.config.eval } : {}),
        logger,
      }));
    }
    try {
      await node.boot(opts);
    } catch (err) {
      await node.teardown().catch(() => undefined);
      throw err;
    }
    return node;
  }

  private async boot(opts: StartNodeOptions): Promise<void> {
    const { config } = this;
    await mkdir(config.dataDir, { recursive: true });
    this.nats = await resolveNats({ configuredUrls: config.natsUrls, dataDir: config.dataDir, logger: this.scope, ...opts.nats });
    const { nodeId, cluster } = config;
    this.bus = await this.whenNatsReady("connect", () =>
      Bus.connect({
        servers: this.nats.urls,
        cluster,
        name: `kova-node-${nodeId}`,
        logger: this.scope,
        ...(config.security ? { security: config.security } : {}),
        ...(config.replyPrefixes ? { replyPrefixes: config.replyPrefixes } : {}),
        ...(config.senders ? { senders: config.senders } : {}),
      }),
    );
    try {
      await this.whenNatsReady("node id check", () => refuseNodeIdInUse(this.bus.nc, cluster, nodeId, this.log));
    } catch (err) {
      // Another node answered, so this NATS server is shared: maybe that node's own (started
      // by it, found by its record in the same data dir). Leave it running.
      if (isKovaError(err, ErrorCode.INVALID_CONFIG)) this.nats = { ...this.nats, stop: async () => undefined };
      throw err;
    }
    const replicas = this.replicas();
    await this.whenNatsReady("streams", () => this.bus.ensureStreams({ replicas }));
    // Every node moves messages that exhausted max_deliver to the DLQ; several movers are
    // safe because a DLQ entry's msg id is derived from the original's stream sequence.
    this.dlqMover = this.bus.startDlqMover();
    // Bus clients' durable sends come in through here (their account imports it as the
    // agents' inboxes): held to what their users own, then stored (docs/security.md).
    this.bus.serveIngress();
    // Opened (created on a fresh cluster) now rather than at the first actor start: on
    // nats-server 2.9 a KV Direct Get sent right after several nodes created the bucket at
    // once sometimes gets no answer, and that first start then waited out the 5 s request
    // timeout (docs/benchmarks.md, "Activation latency").
    const checkpoints = await this.whenNatsReady("checkpoints", () => NatsCheckpointStore.open({ js: this.bus.js, cluster, replicas, bus: this.bus }));

    this.wal = await Wal.open({
      dir: join(config.dataDir, "wal"),
      ringBits: config.wal.ringBits,
      sync: config.wal.sync,
      ...(config.wal.encryption ? { encryption: config.wal.encryption } : {}),
      ...(config.wal.hmac ? { hmac: config.wal.hmac } : {}),
      logger: this.scope,
    });
    this.recovery.corrupt = this.wal.recovery.corrupt.length;
    // Agent types are registered before recovery: a recovered turn may be an agent's.
    this.agentServices = await startAgentServices(config, this.agentDefs, {
      bus: this.bus,
      types: this.types,
      logger: this.scope,
      replicas,
      scheduler: this.modelScheduler,
      tools: this.codeTools,
    });
    // An agent template is a template of virtual actors whose type is the agent's actor type.
    for (const a of this.agentDefs) {
      if (a.template)
        this.templates.register({ name: a.id, type: a.id, idleAfterMs: a.template.idleAfterMs, capabilities: [...a.capabilities] }, `agent_templates.${a.id}`);
    }
    registerEvalTemplates(this.templates, this.evalTemplates);
    this.recovery.pendingRecords = this.wal.recovery.pending.length;

    const nc = this.bus.nc;
    const timing = mirrorTiming(config.heartbeatMs);
    this.registry = await this.whenNatsReady("registry", () => AgentRegistry.open({ nc, cluster, replicas, logger: this.scope, timing }));
    this.registryWrites = new RegistryWrites(this.registry, this.log);
    this.leases = await this.whenNatsReady("leases", () =>
      LeaseTable.open({ nc, cluster, nodeId, incarnation: this.incarnation, replicas, logger: this.scope, timing }),
    );
    // Heartbeat before any lease is touched: peers must see this incarnation live before
    // it reclaims a lease of its previous life, or they would count it dead and take over.
    this.membership = await this.whenNatsReady("membership", () =>
      Membership.join({
        nc,
        cluster: config.cluster,
        heartbeatMs: config.heartbeatMs,
        staleAfterMs: config.staleAfterMs,
        replicas,
        timing,
        logger: componentLogger(this.scope, "membership"),
        actorCount: () => this.host?.list().length ?? 0,
        self: {
          id: config.nodeId,
          incarnation: this.incarnation,
          startedAt: this.startedAt,
          version: KOVA_VERSION,
          pid: process.pid,
          host: hostname(),
          types: this.types.types(),
        },
      }),
    );

    this.host = new ActorHost({
      bus: this.bus,
      wal: this.wal,
      nodeId: config.nodeId,
      types: this.types,
      logger: this.scope,
      mailbox: config.mailbox,
      checkpoints,
      processedWindow: config.processedWindow,
      stepJournal: config.natsJournal ? "nats" : "local",
      fence: (actorId: string) => this.fence(actorId),
      fenceNow: (actorId: string) => this.fenceNow(actorId),
      onStateChange: (actorId: string, state: ActorState, info?: unknown) => this.onStateChange(actorId, state, info),
    });

    this.parts = {
      config,
      nodeId,
      cluster,
      incarnation: this.incarnation,
      bus: this.bus,
      host: this.host,
      registry: this.registry,
      leases: this.leases,
      membership: this.membership,
      templates: this.templates,
      log: this.log,
      scope: this.scope,
      replicas: () => this.replicas(),
      writeRegistry: (id, change) => this.registryWrites.write(id, change),
      publish: (type, runId, data) => this.publish(type, runId, data),
    };
    this.workflow = new WorkflowWiring({ ...this.parts, kickPlacement: () => this.placement.kick() });
    await this.whenNatsReady("workflow timers", () => this.workflow.startTimers());
    await this.whenNatsReady("workflow waits", () => this.workflow.startWaits());

    // Decided now, finished in the background: each recovered actor replays its turns
    // while placement starts and serves the node's other actors (recovery-policy.ts).
    // Recovery starts the actors it reclaims the way placement starts any actor it takes
    // over: the mailbox consumer reset first (host-port.ts).
    const hostPort = placementHostPort(this.parts);
    await recoverPendingTurns(
      { nodeId, wal: this.wal, host: this.host, port: hostPort, leases: this.leases, registry: this.registry, types: this.types, log: this.log },
      this.recovery,
    );
    for (const a of config.actors) {
      const capabilities = this.types.get(a.type).capabilities ?? [];
      await this.whenNatsReady("declare", () => this.registry.declare({ id: a.id, type: a.type, capabilities }));
    }
    for (const a of this.agentDefs) {
      if (a.template) continue; // instances are registered when they are activated
      await this.whenNatsReady("declare", () => this.registry.declare({ id: a.id, type: a.id, capabilities: [...a.capabilities] }));
    }

    this.placement = new PlacementController({
      nodeId: config.nodeId,
      membership: this.membership,
      leases: this.leases,
      registry: this.registry,
      host: hostPort,
      logger: this.scope,
      reconcileMs: config.reconcileMs,
      maxActors: config.maxActorsPerNode,
      onCapped: (e) => this.publish("placement_capped", this.nodeId, { ...e, node: this.nodeId }),
      onPlacement: (e) => this.onPlacement(e),
    });
    this.placement.start();
    this.admission = new ActorAdmission({ registry: this.registry, maxActors: config.maxActors, liveNodes: () => this.membership.liveNodes().length });
    this.virtual = new VirtualActors({
      nodeId,
      bus: this.bus,
      registry: this.registry,
      leases: this.leases,
      host: this.host,
      placement: this.placement,
      templates: this.templates,
      types: this.types,
      maxActors: config.maxActors,
      admission: this.admission,
      drainTimeoutMs: config.drainTimeoutMs,
      listen: config.activationListener,
      logger: this.scope,
      removeRecord: (id, mayRemove) => this.registryWrites.remove(id, mayRemove),
      publish: (type, runId, data) => this.publish(type, runId, data),
      onPassivated: (id) => this.agentServices?.runtime.forget(id),
    });
    this.virtual.start();
    const jobs = { ...this.parts, virtual: this.virtual };
    this.unknownSweep = startUnknownAgentSweep(jobs);
    this.markerCompaction = startMarkerCompaction(jobs);
    await this.whenNatsReady("announce", () => this.membership.markUp());
    this.schedules = await this.whenNatsReady("schedules", () =>
      ScheduleService.start({
        nc: this.bus.nc,
        bus: this.bus,
        cluster,
        replicas,
        logger: this.scope,
        nodeId: this.nodeId,
        // The control handlers exist once services start; a tick due before then is sent again after the reclaim wait.
        spawn: (req) =>
          (this.control as NodeControl | undefined)?.spawn(req) ??
          Promise.reject(new KovaError(ErrorCode.INTERNAL, "node services are not started yet", { retryable: true })),
        onFired: (e) => this.publish("schedule_fired", e.id, { ...e, node: this.nodeId }),
        onSkipped: (e) => this.publish("schedule_skipped", e.id, { ...e, node: this.nodeId }),
      }),
    );
    for (const spec of config.schedules) await this.whenNatsReady("schedules", () => this.schedules!.upsert(spec, "config"));
    await this.whenNatsReady("services", () => this.startServices());
    void this.wal.failure.then((err) => this.failOver(err));
    this.log.info({ cluster: config.cluster, nats: this.nats.source, recovery: this.recovery }, "node started");
  }

  /** A start-up step that waits for NATS to come up (nats-ready.ts). */
  private whenNatsReady<T>(what: string, step: () => Promise<T>): Promise<T> {
    return whenNatsReady(this.log, what, step);
  }

  /** Replicas of the cluster's streams and buckets: `[cluster] replicas`, else what the NATS server supports. */
  private replicas(): number {
    return this.config.replicas ?? jetStreamReplicas(this.bus.nc);
  }

  /**
   * The fence checked before every journaled step and acknowledgement: a node whose own
   * heartbeat is stale (frozen, cut off), whose lease view says the actor moved, or whose
   * WAL failed must not touch it. The checks are local, so the fence costs no round trip
   * per step; only while the lease view is being re-checked (a reconnect, a process
   * freeze, a KV watch restarting) does a step wait, for at most the staleness window
   * less one heartbeat, and then give the actor up rather than trust a stale view.
   */
  private fence(actorId: string): void | Promise<void> {
    if (!this.failure && !this.leases.healthy()) {
      const waitMs = Math.max(this.config.heartbeatMs, this.config.staleAfterMs - this.config.heartbeatMs);
      return this.leases.whenHealthy(waitMs).then(() => this.fenceNow(actorId));
    }
    this.fenceNow(actorId);
  }

  /**
   * The fence without the wait. The fast path checks it before answering from memory: an
   * actor's rpc subscription outlives the lease of a node that was frozen or cut off
   * until the node notices the loss, and meanwhile its copy of the actor may be stale.
   */
  private fenceNow(actorId: string): void {
    if (this.failure) {
      throw new LeaseLostError(actorId, { data: { reason: "this node's WAL failed; its actors move to its peers" } });
    }
    if (!this.membership.selfHealthy()) {
      throw new LeaseLostError(actorId, { data: { reason: "this node's heartbeat is stale; peers may have taken over" } });
    }
    if (!this.leases.healthy()) {
      throw new LeaseLostError(actorId, { data: { reason: "this node's lease view is not current (its KV watch is being restarted)" } });
    }
    if (!this.leases.holds(actorId)) {
      throw new LeaseLostError(actorId, { data: { holder: this.leases.get(actorId)?.value.node ?? null } });
    }
  }

  private onStateChange(actorId: string, state: ActorState, info?: unknown): void {
    // Idle⇄Running of every ordinary turn would cost two KV writes per message; the
    // registry records lifecycle changes (start, pause, recovery, failure, stop) only.
    if ((info as { turn?: boolean } | undefined)?.turn === true) return;
    this.registryWrites.write(actorId, (cur) => (this.leases.holds(actorId) ? { ...cur, node: this.nodeId, state } : undefined));
    this.publish("agent_state", actorId, { actorId, node: this.nodeId, state });
  }

  private onPlacement(e: { actorId: string; action: string; reason: string }): void {
    if (e.action !== "acquired") {
      this.registryWrites.write(e.actorId, (cur) => (cur.node === this.nodeId ? { ...cur, node: null } : undefined));
    }
    this.publish(`agent_${e.action}`, e.actorId, { ...e, node: this.nodeId });
  }

  private publish(type: string, runId: string, data: unknown): void {
    this.bus
      .publishEvent({ type, sessionId: CLUSTER_EVENTS_SESSION, runId, ts: Date.now(), data }, { durable: false })
      .catch((err: unknown) => this.log.debug({ err, type }, "event not published"));
  }

  private async startServices(): Promise<void> {
    const agentControl = new AgentControl({ ...this.parts, agentServices: this.agentServices, schedules: this.schedules! });
    this.control = new NodeControl({
      ...this.parts,
      startedAt: this.startedAt,
      nats: this.nats,
      types: this.types,
      placement: this.placement,
      recovery: this.recovery,
      maxActors: this.config.maxActors,
      admission: this.admission,
      stopping: () => this.stopping !== undefined,
      switchModel: (id: string, model: string) => agentControl.switchModel(id, model),
      virtual: () => this.virtual.view(),
      models: () => this.modelScheduler.stats(),
    });
    this.micro = await startNodeService({
      ...this.parts,
      control: this.control,
      agentControl,
      virtual: this.virtual,
      evalStore: this.evalStore,
      models: () => this.modelScheduler.stats(),
    });
  }

  /** This node's status (what the `status` endpoint answers). */
  status(): NodeStatusView {
    return this.control.status();
  }

  /**
   * Registers a template of virtual actors (also after the start): a message to
   * `kova.<c>.a2a.<name>--<key>` then activates an instance. Register the same templates
   * on every node of the cluster.
   * @throws ConfigError for an invalid template or another one under the same name;
   *   UnknownActorTypeError when its type is not registered on this node
   */
  registerTemplate(template: ActorTemplate): RegisteredTemplate {
    if (!this.types.has(template.type)) throw new UnknownActorTypeError(template.type, this.types.types());
    return this.templates.register(template);
  }

  /** The templates this node instantiates. */
  listTemplates(): RegisteredTemplate[] {
    return this.templates.list();
  }

  /** Actors hosted here (what the `agents` endpoint answers). */
  agents(): AgentStatusView[] {
    return this.control.agents();
  }

  /**
   * Graceful stop: stop answering control requests and placing actors, drain every
   * actor (finish its turn, checkpoint), release its lease so a peer takes it at once,
   * leave the membership, flush and close the WAL, disconnect. Idempotent.
   */
  stop(reason = "stop"): Promise<void> {
    this.stopping ??= this.gracefulStop(reason).finally(() => this.markEnded(this.failure ?? null));
    return this.stopping;
  }

  /**
   * Resolves once the node has stopped: with null after a graceful stop, with the error
   * that made it hand its actors over otherwise (a failed WAL: WalFailedError). `kova node
   * start` exits non-zero on an error, so a supervisor restarts it on a repaired disk.
   */
  closed(): Promise<Error | null> {
    return this.ended;
  }

  private async gracefulStop(reason: string): Promise<void> {
    this.log.info({ reason }, "node stopping");
    await this.micro?.stop().catch(() => undefined);
    await this.placement.stop();
    await this.placement.releaseAll("shutdown");
    await this.registryWrites.settled();
    await this.membership.leave().catch((err: unknown) => this.log.warn({ err }, "leave failed; peers will notice by staleness"));
    await this.teardown();
  }

  /**
   * The WAL failed (a commit or flush error, a full disk): no turn can be journaled here
   * any more, and a node that went on heartbeating would keep its actors and nak each of
   * their messages until `max_deliver` sent it to the DLQ. So the node fails over instead:
   * the fence refuses every step from now on, running turns are cut (their messages go
   * back to the mailbox unacknowledged), every lease is released and the node leaves, so
   * peers take its actors at once, and `closed()` resolves with the error.
   */
  private failOver(err: WalFailedError): void {
    if (this.failure) return;
    this.failure = err;
    this.log.fatal({ err }, "the WAL failed: this node stops taking turns, hands its actors to its peers and stops");
    if (this.stopping) return; // a graceful stop is under way; the fence now cuts its turns short
    this.stopping = this.failStop().finally(() => this.markEnded(err));
  }

  private async failStop(): Promise<void> {
    // Each step is bounded: a turn stuck in a step that ignores its abort signal, or a
    // NATS that does not answer, must not keep a node that cannot journal from exiting.
    const bounded = (p: Promise<unknown>) => Promise.race([p.catch(() => undefined), delay(this.config.drainTimeoutMs)]);
    await bounded(this.micro?.stop() ?? Promise.resolve());
    await bounded(this.placement.stop());
    await bounded(this.host.stopAll({ reason: "wal-failed", drainTimeoutMs: 0 }));
    const held = this.leases.heldHere();
    const released = await Promise.all(held.map((id) => this.leases.release(id, "wal-failed").catch(() => false)));
    this.log.warn({ released: released.filter(Boolean).length, held: held.length }, "leases released after the WAL failure");
    await bounded(this.registryWrites.settled());
    await this.membership.leave().catch((e: unknown) => this.log.warn({ err: e }, "leave failed; peers will notice by staleness"));
    await this.teardown({ hostStopMs: 0 });
  }

  /**
   * Closes whatever was opened, in reverse order; used by stop and by a failed start.
   * `hostStopMs` bounds the wait for the actors (a failover has cut them already).
   */
  private async teardown(opts: { hostStopMs?: number } = {}): Promise<void> {
    this.unknownSweep?.stop();
    this.markerCompaction?.stop();
    this.virtual?.stop();
    this.modelScheduler.close();
    this.schedules?.stop();
    this.workflow?.stop();
    await this.placement?.stop().catch(() => undefined);
    const hostStopped = this.host?.stopAll().catch(() => undefined);
    await (opts.hostStopMs === undefined ? hostStopped : Promise.race([hostStopped, delay(opts.hostStopMs)]));
    await this.agentServices?.close().catch(() => undefined);
    this.membership?.stop();
    this.leases?.stop();
    this.registry?.stop();
    await this.dlqMover?.stop().catch(() => undefined);
    await this.wal?.close().catch(() => undefined);
    await this.bus?.close().catch(() => undefined);
    await this.nats?.stop().catch(() => undefined);
  }
}

/** A wait that does not keep the process alive (bounds on a failing node's clean-up). */
function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
