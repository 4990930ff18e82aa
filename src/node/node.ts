import { hostname } from "node:os";
import { join } from "node:path";
import { mkdir } from "node:fs/promises";
import { ArgumentError, ErrorCode, isKovaError, KovaError } from "../core/errors.js";
import { sleep } from "../core/clock.js";
import { assertId, newId, parseInstanceId } from "../core/ids.js";
import { childLogger, componentLogger, createLogger, type Logger } from "../core/logger.js";
import { KOVA_VERSION } from "../core/version.js";
import { Bus, BusErrorCode, isConsumerNotFound, isTransientNatsError, UnknownAgentError } from "../bus/index.js";
import { Wal, type WalFailedError } from "../wal/index.js";
import {
  ActorErrorCode,
  ActorHost,
  ActorTemplateRegistry,
  ActorTypeRegistry,
  LeaseLostError,
  UnknownActorTypeError,
  type ActorState,
  type ActorTemplate,
  type RegisteredTemplate,
} from "../actors/index.js";
import { createEnvelope } from "../bus/index.js";
import { SubjectWaitService, SubjectWaits, TimerService, WORKFLOW_ACTOR_TYPE, WorkflowMessageType, WorkflowTimers, workflowActor } from "../workflow/index.js";
import type { NodeConfig } from "./config.js";
import { loadActorModules } from "./actor-modules.js";
import {
  approveSubject,
  controlRequest,
  nodeSubject,
  schedulesSubject,
  type ApproveReply,
  type ToolsReply,
  type ToolsRequest,
  spawnSubject,
  type SchedulesRequest,
  type AgentStatusView,
  type NodeStatusView,
  type SignalRequest,
  type SpawnRequest,
} from "./control.js";
import { NodeControl } from "./control-handlers.js";
import { mirrorTiming } from "./kv-mirror.js";
import { LeaseTable } from "./lease.js";
import { Membership } from "./membership.js";
import { startMicroService, type MicroService } from "./micro-service.js";
import { refuseNodeIdInUse } from "./node-id-check.js";
import { jetStreamReplicas, resolveNats, type ResolvedNats, type ResolveNatsOptions } from "./nats-bootstrap.js";
import { PlacementController, type HostPort } from "./placement-controller.js";
import { recoverPendingTurns, type NodeRecoveryReport } from "./recovery-policy.js";
import { AgentRegistry, type AgentRecord } from "./registry.js";
import { parseSchedule } from "./schedule-spec.js";
import { ScheduleService } from "./schedules.js";
import { VirtualActors } from "./virtual-actors.js";
import { compactMarkers } from "./marker-compaction.js";
import { startAgentServices, type AgentServices } from "./agent-services.js";
import type { AgentDefinition } from "../agents/definition.js";
import type { Tool } from "../tools/types.js";
import { registerSwarms } from "./swarms.js";
import { modelScheduler } from "../agents/runtime.js";
import type { ModelCallScheduler } from "../agents/model/scheduler.js";
import { NatsApprovalStore, readDecision } from "../agents/approvals.js";

export { KOVA_VERSION };

/** Session id of the cluster's own events (agent state changes, placement, signals). */
export const CLUSTER_EVENTS_SESSION = "kova-cluster";

export interface StartNodeOptions {
  config: NodeConfig;
  logger?: Logger;
  /** Actor types registered in code (the package API); config modules add to them. */
  types?: ActorTypeRegistry;
  /**
   * Templates of virtual actors registered in code; `[[actor_templates]]` add to them, and
   * `KovaNode.registerTemplate` adds more after the start (see docs/virtual-actors.md).
   */
  templates?: ActorTemplateRegistry | Iterable<ActorTemplate>;
  /**
   * The node's provider-call scheduler (default: a new one with no models). Agents take
   * model-call slots from it; its stats are in the node's status and `$SRV.STATS`.
   */
  modelScheduler?: ModelCallScheduler;
  /** Passed to resolveNats (tests point the default-URL probe elsewhere). */
  nats?: Pick<ResolveNatsOptions, "probeDefault" | "defaultUrl">;
  /**
   * Agents defined in code (`defineAgent`); `[[agents]]`, `[[agent_templates]]` and config
   * modules add to them. A definition with `template` set is an agent template: its
   * instances `<id>--<key>` are activated by their first message (docs/agents.md).
   */
  agents?: AgentDefinition[];
  /** Tools defined in code (`defineTool`), offered to the agents whose `tools` lists name them; config modules add to them. */
  tools?: Tool[];
}

/**
 * One Kova cluster node: the composition root. Start order matters and is why this file
 * exists: config → NATS → WAL (recovery scan) → cluster state (registry, leases,
 * heartbeat) → actor host with the lease fence → WAL recovery decisions (finish what we
 * still own, abandon what moved) → placement → control endpoints.
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
  private readonly registryWrites = new Map<string, Promise<unknown>>();
  private bus!: Bus;
  private wal!: Wal;
  private nats!: ResolvedNats;
  private dlqMover: { stop(): Promise<void> } | undefined;
  private registry!: AgentRegistry;
  private leases!: LeaseTable;
  private membership!: Membership;
  private host!: ActorHost;
  private placement!: PlacementController;
  private micro: MicroService | undefined;
  private control!: NodeControl;
  private unknownSweep: NodeJS.Timeout | undefined;
  private compactionTimer: NodeJS.Timeout | undefined;
  private schedules: ScheduleService | undefined;
  private virtual!: VirtualActors;
  private agentServices: AgentServices | undefined;
  private workflowTimers: Promise<WorkflowTimers> | undefined;
  private timerService: TimerService | undefined;
  private subjectWaits: Promise<SubjectWaits> | undefined;
  private waitService: SubjectWaitService | undefined;
  private approvalStore: Promise<NatsApprovalStore> | undefined;
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
      { bus: () => node!.busClient, interrupt: (agentId, messageId) => node!.interruptDelegation(agentId, messageId) },
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
      types.register(
        workflowActor({
          timers: () => n.timers(),
          waits: () => n.waits(),
          retire: (runId) => n.retireRun(runId),
          inbox: (runId) => n.bus.subjects.a2a(runId),
          interrupt: (agentId, messageId) => n.interruptDelegation(agentId, messageId),
        }),
      );
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
    const replicas = config.replicas ?? jetStreamReplicas(this.bus.nc);
    await this.whenNatsReady("streams", () => this.bus.ensureStreams({ replicas }));
    // Every node moves messages that exhausted max_deliver to the DLQ; several movers are
    // safe because a DLQ entry's msg id is derived from the original's stream sequence.
    this.dlqMover = this.bus.startDlqMover();

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
    this.recovery.pendingRecords = this.wal.recovery.pending.length;

    const nc = this.bus.nc;
    const timing = mirrorTiming(config.heartbeatMs);
    this.registry = await this.whenNatsReady("registry", () => AgentRegistry.open({ nc, cluster, replicas, logger: this.scope, timing }));
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
      checkpointReplicas: replicas,
      processedWindow: config.processedWindow,
      stepJournal: config.natsJournal ? "nats" : "local",
      fence: (actorId: string) => this.fence(actorId),
      fenceNow: (actorId: string) => this.fenceNow(actorId),
      onStateChange: (actorId: string, state: ActorState, info?: unknown) => this.onStateChange(actorId, state, info),
    });

    this.timerService = await this.whenNatsReady("workflow timers", async () =>
      TimerService.start({
        timers: await this.timers(),
        fire: async (t) => {
          await this.bus.send(
            createEnvelope({ id: t.timerId, from: "kova-timers", to: t.runId, type: WorkflowMessageType.timer, payload: { timerId: t.timerId } }),
          );
        },
        isLocal: (runId) => this.host.status(runId) !== undefined,
        graceMs: config.staleAfterMs,
        logger: this.scope,
      }),
    );

    this.waitService = await this.whenNatsReady("workflow waits", async () =>
      SubjectWaitService.start({
        waits: await this.waits(),
        fire: async (w, data, seq) => {
          const payload = { waitId: w.waitId, subject: w.subject, data, seq };
          await this.bus.send(createEnvelope({ id: `${w.waitId}-m`, from: "kova-waits", to: w.runId, type: WorkflowMessageType.signal, payload }));
        },
        isLocal: (runId) => this.host.status(runId) !== undefined,
        logger: this.scope,
      }),
    );

    // Decided now, finished in the background: each recovered actor replays its turns
    // while placement starts and serves the node's other actors (recovery-policy.ts).
    await recoverPendingTurns(
      { nodeId, wal: this.wal, host: this.host, leases: this.leases, registry: this.registry, types: this.types, templates: this.templates, log: this.log },
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

    const port: HostPort = {
      start: async (id, type, record, { takeover }) => {
        const template = record.template === undefined ? undefined : this.templates.resolve(id);
        if (record.template !== undefined && !template) {
          throw new UnknownAgentError(
            id,
            `template ${record.template} of instance ${id} is not registered on node ${this.nodeId}: register the same templates on every node`,
          );
        }
        if (takeover) await this.resetMailbox(id);
        await this.host.start(id, type, template ? { template: template.binding } : {});
        if (record.desired === "paused") await this.host.signal(id, "pause");
      },
      stop: (id, reason) => this.host.stop(id, { reason, drainTimeoutMs: config.drainTimeoutMs }),
      hosted: () => this.host.list().map((s) => s.id),
    };
    this.placement = new PlacementController({
      nodeId: config.nodeId,
      membership: this.membership,
      leases: this.leases,
      registry: this.registry,
      host: port,
      logger: this.scope,
      reconcileMs: config.reconcileMs,
      maxActors: config.maxActorsPerNode,
      onCapped: (e) => this.publish("placement_capped", this.nodeId, { ...e, node: this.nodeId }),
      onPlacement: (e) => this.onPlacement(e),
    });
    this.placement.start();
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
      drainTimeoutMs: config.drainTimeoutMs,
      listen: config.activationListener,
      logger: this.scope,
      removeRecord: (id, mayRemove) => this.removeRegistry(id, mayRemove),
      publish: (type, runId, data) => this.publish(type, runId, data),
      onPassivated: (id) => this.agentServices?.runtime.forget(id),
    });
    this.virtual.start();
    this.startUnknownAgentSweep();
    this.startMarkerCompaction();
    await this.whenNatsReady("announce", () => this.membership.markUp());
    this.schedules = await this.whenNatsReady("schedules", () =>
      ScheduleService.start({
        nc: this.bus.nc,
        bus: this.bus,
        cluster,
        replicas,
        logger: this.scope,
        nodeId: this.nodeId,
        onFired: (e) => this.publish("schedule_fired", e.id, { ...e, node: this.nodeId }),
        onSkipped: (e) => this.publish("schedule_skipped", e.id, { ...e, node: this.nodeId }),
      }),
    );
    for (const spec of config.schedules) await this.whenNatsReady("schedules", () => this.schedules!.upsert(spec, "config"));
    await this.whenNatsReady("services", () => this.startServices());
    void this.wal.failure.then((err) => this.failOver(err));
    this.log.info({ cluster: config.cluster, nats: this.nats.source, recovery: this.recovery }, "node started");
  }

  /** The workflow timers bucket, opened once (also by the first run that needs it). */
  private timers(): Promise<WorkflowTimers> {
    this.workflowTimers ??= WorkflowTimers.open({
      js: this.bus.js,
      cluster: this.cluster,
      replicas: this.config.replicas ?? jetStreamReplicas(this.bus.nc),
    }).catch((err: unknown) => {
      this.workflowTimers = undefined;
      throw err;
    });
    return this.workflowTimers;
  }

  /** The workflow subject waits (bucket and capture stream), opened once. */
  private waits(): Promise<SubjectWaits> {
    this.subjectWaits ??= SubjectWaits.open({
      js: this.bus.js,
      jsm: this.bus.jsm,
      cluster: this.cluster,
      replicas: this.config.replicas ?? jetStreamReplicas(this.bus.nc),
      owner: `${this.nodeId}/${this.incarnation}`,
    }).catch((err: unknown) => {
      this.subjectWaits = undefined;
      throw err;
    });
    return this.subjectWaits;
  }

  /**
   * Interrupts an agent's turn on one delegated message through the `signal` endpoint of
   * the node that hosts the agent (this one included). An agent between nodes is looked up
   * again once; one that cannot be reached is logged and left (its result is ignored).
   */
  private async interruptDelegation(agentId: string, messageId: string): Promise<boolean> {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const node = this.registry.get(agentId)?.node ?? this.leases.get(agentId)?.value.node;
      try {
        if (!node) throw new KovaError(ActorErrorCode.NOT_HOSTED, `agent ${agentId} is not hosted now`);
        await controlRequest(this.bus.nc, nodeSubject(this.cluster, node, "signal"), { actorId: agentId, signal: "interrupt", messageId }, 5000);
        return true;
      } catch (err) {
        if (attempt === 3) {
          this.log.warn({ err, agentId, messageId }, "could not interrupt a delegated turn; its result will be ignored");
          return false;
        }
        await sleep(250 * attempt);
      }
    }
    return false;
  }

  /**
   * Takes a finished workflow run off placement: its registry entry becomes `killed`, so
   * placement stops it (after the turn that asked for this ends) and never places it
   * again, and its durable consumer is deleted once it stopped. Its checkpoint stays in
   * KV, so `kova workflow status` still reads the run. Called from the run's own turn,
   * so it must not wait for the stop.
   */
  private async retireRun(runId: string): Promise<void> {
    await this.writeRegistry(runId, (cur) => (cur.desired === "killed" ? undefined : { ...cur, desired: "killed" }));
    this.placement.kick();
    void (async () => {
      const deadline = performance.now() + 2 * this.config.drainTimeoutMs + 10_000;
      while (this.host.status(runId) !== undefined && performance.now() < deadline) await sleep(100);
      if (this.host.status(runId) === undefined) await this.resetMailbox(runId);
    })().catch((err: unknown) => this.log.debug({ err, runId }, "consumer of a retired run not deleted"));
  }

  /**
   * Runs a start-up step, waiting for NATS: nodes are often started together with their
   * NATS servers (compose, Kubernetes), and a fresh NATS cluster answers "JetStream not
   * enabled" or times out until it has elected its JetStream leaders.
   * @throws the step's error when it is not transient, or after `startupWaitMs` (60 s)
   */
  private async whenNatsReady<T>(what: string, step: () => Promise<T>, startupWaitMs = 60_000): Promise<T> {
    const deadline = performance.now() + startupWaitMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await step();
      } catch (err) {
        const transient =
          isKovaError(err, BusErrorCode.NATS_UNREACHABLE) ||
          isKovaError(err, BusErrorCode.JETSTREAM_UNAVAILABLE) ||
          isKovaError(err, ErrorCode.TIMEOUT) ||
          isTransientNatsError(err);
        if (!transient || performance.now() > deadline) throw err;
        this.log.warn({ err: String((err as Error)?.message ?? err), attempt, what }, "waiting for NATS / JetStream to become available");
        await sleep(Math.min(2000, 250 * attempt));
      }
    }
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

  /**
   * Deletes an actor's durable consumer before hosting an actor that was hosted before.
   * A SIGKILLed node's pull requests vanish with its connection, but a frozen one
   * (SIGSTOP, a long GC, a VM pause) keeps them parked on the server, and a gracefully
   * stopped mailbox may leave its last pull request there too; the server would hand the
   * next message to that dead inbox and redeliver it only after ack_wait. The stream is
   * a work queue, so unacknowledged messages stay in it and the recreated consumer
   * delivers them from the first one at once; the old host's late acks then address a
   * consumer incarnation that no longer holds those deliveries (and are fenced anyway).
   */
  private async resetMailbox(actorId: string): Promise<void> {
    try {
      await this.bus.jsm.consumers.delete(this.bus.subjects.streams.a2a, this.bus.subjects.consumer(actorId));
    } catch (err) {
      if (!isConsumerNotFound(err)) throw err;
    }
  }

  private onStateChange(actorId: string, state: ActorState, info?: unknown): void {
    // Idle⇄Running of every ordinary turn would cost two KV writes per message; the
    // registry records lifecycle changes (start, pause, recovery, failure, stop) only.
    if ((info as { turn?: boolean } | undefined)?.turn === true) return;
    this.writeRegistry(actorId, (cur) => (this.leases.holds(actorId) ? { ...cur, node: this.nodeId, state } : undefined));
    this.publish("agent_state", actorId, { actorId, node: this.nodeId, state });
  }

  private onPlacement(e: { actorId: string; action: string; reason: string }): void {
    if (e.action !== "acquired") {
      this.writeRegistry(e.actorId, (cur) => (cur.node === this.nodeId ? { ...cur, node: null } : undefined));
    }
    this.publish(`agent_${e.action}`, e.actorId, { ...e, node: this.nodeId });
  }

  /** Removes a registry entry after the writes queued for it (a passivation). */
  private removeRegistry(actorId: string, mayRemove: (cur: AgentRecord) => boolean): Promise<boolean> {
    let removed = false;
    return this.writeRegistry(actorId, () => undefined)
      .then(async () => {
        removed = await this.registry.remove(actorId, mayRemove);
      })
      .then(() => removed);
  }

  /** Registry writes of one actor are applied in order (a later state never loses to an earlier one). */
  private writeRegistry(actorId: string, change: (cur: AgentRecord) => AgentRecord | undefined): Promise<unknown> {
    const prev = this.registryWrites.get(actorId) ?? Promise.resolve();
    const next = prev
      .then(() => this.registry.update(actorId, change))
      .catch((err: unknown) => this.log.warn({ err, actorId }, "registry update failed"))
      .finally(() => {
        if (this.registryWrites.get(actorId) === next) this.registryWrites.delete(actorId);
      });
    this.registryWrites.set(actorId, next);
    return next;
  }

  private publish(type: string, runId: string, data: unknown): void {
    this.bus
      .publishEvent({ type, sessionId: CLUSTER_EVENTS_SESSION, runId, ts: Date.now(), data }, { durable: false })
      .catch((err: unknown) => this.log.debug({ err, type }, "event not published"));
  }

  private async startServices(): Promise<void> {
    const { cluster, nodeId } = this;
    this.control = new NodeControl({
      nodeId,
      cluster,
      incarnation: this.incarnation,
      startedAt: this.startedAt,
      nats: this.nats,
      membership: this.membership,
      host: this.host,
      leases: this.leases,
      registry: this.registry,
      types: this.types,
      placement: this.placement,
      recovery: this.recovery,
      maxActors: this.config.maxActors,
      stopping: () => this.stopping !== undefined,
      writeRegistry: (id, change) => this.writeRegistry(id, change),
      switchModel: (id: string, model: string) => this.switchModel(id, model),
      publish: (type, runId, data) => this.publish(type, runId, data),
      virtual: () => this.virtual.view(),
      models: () => this.modelScheduler.stats(),
    });
    const control = this.control;
    const json = (data: Uint8Array): unknown => (data.length === 0 ? {} : JSON.parse(new TextDecoder().decode(data)));
    this.micro = await startMicroService(this.bus.nc, {
      name: "kova-node",
      version: KOVA_VERSION,
      description: "Kova cluster node: hosts actors, answers control requests",
      metadata: { node_id: nodeId, cluster },
      logger: this.scope,
      endpoints: [
        {
          name: "status",
          subject: nodeSubject(cluster, nodeId, "status"),
          handler: async () => control.status(),
          // `nats micro stats kova-node`: model-call queues and waits, and virtual actors.
          stats: () => ({ models: this.modelScheduler.stats(), virtual: this.virtual.view() }),
        },
        { name: "agents", subject: nodeSubject(cluster, nodeId, "agents"), handler: async () => control.agents() },
        { name: "spawn", subject: spawnSubject(cluster), handler: async (d) => control.spawn(json(d) as SpawnRequest) },
        {
          name: "activate",
          subject: this.bus.subjects.activate,
          handler: async (d) => this.virtual.activate((json(d) as { id?: unknown }).id as string, "request"),
        },
        { name: "schedules", subject: schedulesSubject(cluster), handler: async (d) => this.scheduleRequest(json(d) as SchedulesRequest) },
        { name: "signal", subject: nodeSubject(cluster, nodeId, "signal"), handler: async (d) => control.signal(json(d) as SignalRequest) },
        { name: "approve", subject: approveSubject(cluster), handler: async (d) => this.approve(json(d)) },
        { name: "tools", subject: nodeSubject(cluster, nodeId, "tools"), handler: async (d) => this.toolsRequest(json(d) as ToolsRequest) },
      ],
    });
  }

  /**
   * The `model=<name>` signal: switches an agent hosted here from its next model call on.
   * @throws ArgumentError when the actor is not an agent; UnknownModelError for an unknown model
   */
  private async switchModel(actorId: string, model: string): Promise<void> {
    const type = this.host.status(actorId)?.type;
    const services = this.agentServices;
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
  private async toolsRequest(req: ToolsRequest): Promise<ToolsReply> {
    const agent = req?.agent === undefined ? undefined : assertId("agent", req.agent);
    const services = this.agentServices;
    if (!services) {
      if (agent !== undefined)
        throw new KovaError(BusErrorCode.UNKNOWN_AGENT, `node ${this.nodeId} defines no agents, so not ${agent}`, { data: { agentId: agent } });
      return { node: this.nodeId, tools: [] };
    }
    return { node: this.nodeId, ...(agent !== undefined ? { agent } : {}), tools: await services.describeTools(agent) };
  }

  /**
   * `kova approve|reject` for an agent's tool call (the `approve` endpoint): records the
   * decision in the approvals bucket, whichever node hosts the run (or none, while it moves).
   * @throws ArgumentError for a malformed request; ApprovalNotFoundError; ApprovalAlreadyDecidedError
   */
  private async approve(body: unknown): Promise<ApproveReply> {
    const { runId, approvalId, decision } = readDecision(body);
    this.approvalStore ??= NatsApprovalStore.open({
      js: this.bus.js,
      cluster: this.cluster,
      replicas: this.config.replicas ?? jetStreamReplicas(this.bus.nc),
    }).catch((err: unknown) => {
      this.approvalStore = undefined;
      throw err;
    });
    const { record, changed } = await (await this.approvalStore).decide(runId, approvalId, decision);
    this.log.info(
      { runId, approvalId, agentId: record.agentId, tool: record.tool, status: record.status, by: record.by, changed },
      "tool call approval decided",
    );
    return { runId, approvalId, status: record.status as ApproveReply["status"], changed, agentId: record.agentId, tool: record.tool, via: this.nodeId };
  }

  /**
   * `kova schedules add|rm|ls` (the `schedules` endpoint).
   * @throws ConfigError for an invalid schedule; ArgumentError for an unknown op
   */
  private async scheduleRequest(req: SchedulesRequest): Promise<unknown> {
    const svc = this.schedules!;
    switch (req?.op) {
      case "add": {
        const spec = parseSchedule(req.schedule, "schedule");
        const r = await svc.upsert(spec, "api");
        const warning = this.unknownTarget(spec.to);
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
    if (this.registry.get(to) !== undefined) return undefined;
    const instance = parseInstanceId(to);
    if (instance && this.templates.has(instance.template)) return undefined;
    return (
      `no agent ${to} is declared in cluster ${this.cluster}${instance ? `, nor a template ${instance.template}` : ""} (see kova agents ls): ` +
      "its messages wait unanswered and go to the DLQ (reason unknown_agent) after [cluster] unknown_agent_after_ms unless one is declared"
    );
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
    await Promise.all([...this.registryWrites.values()]);
    await this.membership.leave().catch((err: unknown) => this.log.warn({ err }, "leave failed; peers will notice by staleness"));
    await this.teardown();
  }

  /**
   * Every node sweeps the A2A stream for messages to agents nobody declared (moves are
   * idempotent, so peers sweeping at once do no harm). The registry mirror answers "is it
   * declared" locally.
   */
  private startUnknownAgentSweep(): void {
    const after = this.config.unknownAgentAfterMs;
    // With templates, the sweep is also the activation backstop: as often as activation_sweep_ms.
    const every = () =>
      Math.max(50, Math.min(60_000, Math.floor(after / 2), this.templates.list().length > 0 ? this.config.activationSweepMs : Number.POSITIVE_INFINITY));
    const tick = () => {
      this.bus
        .sweepUnknownAgents({ isKnown: (id) => this.registry.get(id) !== undefined, olderThanMs: after, activate: (id) => this.virtual.claim(id) })
        .catch((err: unknown) => this.log.warn({ err }, "unknown-agent sweep failed; retrying on the next tick"))
        .finally(() => {
          if (this.unknownSweep === undefined) return;
          this.unknownSweep = setTimeout(tick, every());
          this.unknownSweep.unref();
        });
    };
    this.unknownSweep = setTimeout(tick, every());
    this.unknownSweep.unref();
  }

  /**
   * `[cluster] marker_compaction`: every interval, the first live node by id removes the
   * registry's and the leases' delete markers older than one interval (each passivation
   * leaves one per bucket; docs/virtual-actors.md, "Purge markers"). Peers disagreeing for
   * a moment on who is first both compact, which is harmless (compactMarkers is idempotent).
   */
  private startMarkerCompaction(): void {
    const every = this.config.markerCompactionMs;
    if (every === 0) return;
    const tick = async () => {
      if (this.membership.liveNodes()[0] !== this.nodeId) return;
      for (const kv of [this.registry.kv, this.leases.kv]) {
        const r = await compactMarkers(kv, this.bus.jsm, { olderThanMs: every });
        if (r.removed === 0) continue;
        this.log.info(r, "delete markers of passivated instances compacted");
        this.publish("markers_compacted", r.bucket, { ...r, node: this.nodeId });
      }
    };
    const schedule = () => {
      this.compactionTimer = setTimeout(() => {
        tick()
          .catch((err: unknown) => this.log.warn({ err }, "marker compaction failed; retrying at the next interval"))
          .finally(() => {
            if (this.compactionTimer !== undefined) schedule();
          });
      }, every);
      this.compactionTimer.unref();
    };
    schedule();
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
    await bounded(Promise.all([...this.registryWrites.values()]));
    await this.membership.leave().catch((e: unknown) => this.log.warn({ err: e }, "leave failed; peers will notice by staleness"));
    await this.teardown({ hostStopMs: 0 });
  }

  /**
   * Closes whatever was opened, in reverse order; used by stop and by a failed start.
   * `hostStopMs` bounds the wait for the actors (a failover has cut them already).
   */
  private async teardown(opts: { hostStopMs?: number } = {}): Promise<void> {
    clearTimeout(this.unknownSweep);
    this.unknownSweep = undefined;
    clearTimeout(this.compactionTimer);
    this.compactionTimer = undefined;
    this.virtual?.stop();
    this.modelScheduler.close();
    this.schedules?.stop();
    this.timerService?.stop();
    this.waitService?.stop();
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
