import { KovaError, sleep } from "../core/index.js";
import { createEnvelope } from "../bus/index.js";
import { ActorErrorCode } from "../actors/index.js";
import { SubjectWaitService, SubjectWaits, TimerService, WorkflowMessageType, WorkflowTimers, type WorkflowActorPorts } from "../workflow/index.js";
import { controlRequest, nodeSubject } from "../cluster/index.js";
import { resetMailbox } from "./placement/host-port.js";
import type { NodeConfig } from "./config.js";
import type { NodeParts } from "./node-parts.js";
import { openOnce } from "./open-once.js";

/** The node's parts that workflow runs and swarm coordinators reach through the wiring. */
export interface WorkflowWiringDeps
  extends Pick<NodeParts, "nodeId" | "cluster" | "incarnation" | "bus" | "host" | "registry" | "leases" | "replicas" | "log" | "scope" | "writeRegistry"> {
  /**
   * `drainTimeoutMs` bounds the wait for a retired run to stop; `staleAfterMs` is how much
   * later than its host a peer fires a run's timer.
   */
  readonly config: Pick<NodeConfig, "drainTimeoutMs" | "staleAfterMs">;
  /** Makes placement reconcile now. */
  kickPlacement(): void;
}

/**
 * The node's side of the workflow and swarm ports (WorkflowActorPorts, the coordinators'
 * interrupt): the cluster-wide timer and subject-wait buckets, opened once, the services
 * that fire them, interrupting a delegated turn wherever its agent is hosted, and retiring
 * a finished run. Kept out of node.ts, which only creates it at its place in the start order.
 */
export class WorkflowWiring {
  private timerService: TimerService | undefined;
  private waitService: SubjectWaitService | undefined;

  constructor(private readonly d: WorkflowWiringDeps) {}

  /** The workflow timers bucket, opened once (also by the first run that needs it). */
  readonly timers = openOnce(() => WorkflowTimers.open({ js: this.d.bus.js, cluster: this.d.cluster, replicas: this.d.replicas() }));

  /** The workflow subject waits (bucket and capture stream), opened once. */
  readonly waits = openOnce(() =>
    SubjectWaits.open({
      nats: this.d.bus,
      cluster: this.d.cluster,
      replicas: this.d.replicas(),
      owner: `${this.d.nodeId}/${this.d.incarnation}`,
    }),
  );

  /** Starts firing due workflow timers: each one as a timer message to its run. */
  async startTimers(): Promise<void> {
    const { bus, host } = this.d;
    this.timerService = await TimerService.start({
      timers: await this.timers(),
      fire: async (t) => {
        await bus.send(createEnvelope({ id: t.timerId, from: "kova-timers", to: t.runId, type: WorkflowMessageType.timer, payload: { timerId: t.timerId } }));
      },
      isLocal: (runId) => host.status(runId) !== undefined,
      graceMs: this.d.config.staleAfterMs,
      logger: this.d.scope,
    });
  }

  /** Starts delivering what arrives on a waited-for subject: each message as a signal to its run. */
  async startWaits(): Promise<void> {
    const { bus, host } = this.d;
    this.waitService = await SubjectWaitService.start({
      waits: await this.waits(),
      fire: async (w, data, seq) => {
        const payload = { waitId: w.waitId, subject: w.subject, data, seq };
        await bus.send(createEnvelope({ id: `${w.waitId}-m`, from: "kova-waits", to: w.runId, type: WorkflowMessageType.signal, payload }));
      },
      isLocal: (runId) => host.status(runId) !== undefined,
      logger: this.d.scope,
    });
  }

  /** A run's own A2A inbox subject (`kova.<c>.a2a.<runId>`), where agents send their result_notify. */
  inbox(runId: string): string {
    return this.d.bus.subjects.a2a(runId);
  }

  /** Stops firing timers and delivering waits (the buckets stay: they are the cluster's). */
  stop(): void {
    this.timerService?.stop();
    this.waitService?.stop();
  }

  /**
   * Interrupts an agent's turn on one delegated message through the `signal` endpoint of
   * the node that hosts the agent (this one included). An agent between nodes is looked up
   * again once; one that cannot be reached is logged and left (its result is ignored).
   */
  async interruptDelegation(agentId: string, messageId: string): Promise<boolean> {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const node = this.d.registry.get(agentId)?.node ?? this.d.leases.get(agentId)?.value.node;
      try {
        if (!node) throw new KovaError(ActorErrorCode.NOT_HOSTED, `agent ${agentId} is not hosted now`);
        await controlRequest(this.d.bus.nc, nodeSubject(this.d.cluster, node, "signal"), { actorId: agentId, signal: "interrupt", messageId }, 5000);
        return true;
      } catch (err) {
        if (attempt === 3) {
          this.d.log.warn({ err, agentId, messageId }, "could not interrupt a delegated turn; its result will be ignored");
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
  async retireRun(runId: string): Promise<void> {
    const { host } = this.d;
    await this.d.writeRegistry(runId, (cur) => (cur.desired === "killed" ? undefined : { ...cur, desired: "killed" }));
    this.d.kickPlacement();
    void (async () => {
      const deadline = performance.now() + 2 * this.d.config.drainTimeoutMs + 10_000;
      while (host.status(runId) !== undefined && performance.now() < deadline) await sleep(100);
      if (host.status(runId) === undefined) await resetMailbox(this.d.bus, runId);
    })().catch((err: unknown) => this.d.log.debug({ err, runId }, "consumer of a retired run not deleted"));
  }
}

/**
 * The ports of the workflow run type, which is registered before the node boots: each
 * reaches the wiring when called, and no run is hosted before the wiring exists.
 */
export function workflowRunPorts(wiring: () => WorkflowWiring): WorkflowActorPorts {
  return {
    timers: () => wiring().timers(),
    waits: () => wiring().waits(),
    retire: (runId) => wiring().retireRun(runId),
    inbox: (runId) => wiring().inbox(runId),
    interrupt: (agentId, messageId) => wiring().interruptDelegation(agentId, messageId),
  };
}
