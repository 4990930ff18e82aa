import { assertId, type Logger, componentLogger } from "../core/index.js";
import { isConsumerNotFound, UnknownAgentError, type ActivationReply, type Bus, isMessageGone } from "../bus/index.js";
import { UnknownActorTypeError, type ActorHost, type ActorTemplateRegistry, type ActorTypeRegistry, type RegisteredTemplate } from "../actors/index.js";
import { type ActorAdmission, QuotaExceededError, type LeaseTable, type AgentRecord, type AgentRegistry, type VirtualActorsView } from "../cluster/index.js";
import type { PlacementController } from "./placement/controller.js";

export interface VirtualActorsOptions {
  nodeId: string;
  bus: Bus;
  registry: AgentRegistry;
  leases: LeaseTable;
  host: ActorHost;
  placement: PlacementController;
  templates: ActorTemplateRegistry;
  types: ActorTypeRegistry;
  /** `[cluster] max_actors`: activations past it are refused (the messages wait). */
  maxActors: number;
  /** Shared with spawns: decides whether a new instance fits under max_actors (exact per node, fenced near the cap). */
  admission: ActorAdmission;
  /** How long a passivation waits for a turn that started after its idle check. */
  drainTimeoutMs: number;
  /** Listen on `kova.<c>.a2a.*` (core NATS, one queue group) for messages to unactivated instances. */
  listen: boolean;
  logger: Logger;
  /** Removes a registry entry in order with the node's other writes for it. */
  removeRecord(id: string, mayRemove: (current: AgentRecord) => boolean): Promise<boolean>;
  /** A best-effort cluster event. */
  publish(type: string, runId: string, data: unknown): void;
  /** An instance hosted here was passivated: release what the node keeps for it outside the actor. */
  onPassivated?(id: string): void;
}

/** Passivations running at once on one node (each is a handful of JetStream requests). */
const PASSIVATION_CONCURRENCY = 32;
/** At most one `activation_refused` event per this interval (a full cluster would flood). */
const REFUSED_EVENT_MS = 5_000;

/**
 * Template instances (virtual actors) on one node: activation on first message and
 * passivation when idle. See docs/virtual-actors.md.
 *
 * Activation registers the instance in the agents registry (compare-and-set create, so
 * nodes racing do it once); placement then hosts it on its rendezvous owner like any
 * declared actor. Three paths lead there, fastest first: an `activate` request (ask and
 * KovaClient send it before the first message), the listener (a core NATS queue
 * subscription on `kova.<c>.a2a.*`: one node sees each message, a plain `nats pub` to a
 * never-seen instance included), and the A2A stream sweep (messages stored while no node
 * listened, or in the moment a passivation removed the instance).
 *
 * Passivation runs on the host: an instance without a turn for its template's
 * `idleAfterMs`, with nothing waiting for it, is stopped (its state is checkpointed after
 * every turn already), its consumer deleted, its registry entry and lease removed. Its
 * checkpoint stays in KV, so its next message activates it with its state. A message
 * that arrived while it was being passivated found it still registered; the passivation
 * looks for one at the end and activates the instance again.
 */
export class VirtualActors {
  private sub: { unsubscribe(): void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private passivating = 0;
  private readonly activating = new Map<string, Promise<ActivationReply>>();
  private readonly counts = { activations: 0, passivations: 0, refused: 0 };
  private lastRefusedEvent = 0;
  private readonly prefix: string;
  private readonly log: Logger;

  constructor(private readonly o: VirtualActorsOptions) {
    this.log = componentLogger(o.logger, "virtual-actors");
    this.prefix = `${o.bus.subjects.prefix}.a2a.`;
  }

  start(): void {
    if (this.o.listen) {
      this.sub = this.o.bus.nc.subscribe(this.o.bus.subjects.a2aWildcard, {
        queue: "kova-activator",
        callback: (err, msg) => {
          if (!err) this.onMessage(msg.subject.slice(this.prefix.length));
        },
      });
    }
    this.schedulePassivation();
  }

  stop(): void {
    this.stopped = true;
    this.sub?.unsubscribe();
    if (this.timer) clearTimeout(this.timer);
  }

  view(): VirtualActorsView {
    const hosted = new Map<string, number>();
    for (const a of this.o.host.list()) if (a.template) hosted.set(a.template, (hosted.get(a.template) ?? 0) + 1);
    return {
      templates: this.o.templates.list().map((t) => ({ name: t.name, type: t.type, idleAfterMs: t.idleAfterMs, hosted: hosted.get(t.name) ?? 0 })),
      ...this.counts,
    };
  }

  private onMessage(id: string): void {
    if (this.o.registry.get(id) !== undefined || this.o.templates.resolve(id) === undefined) return;
    this.activate(id, "listener").catch((err: unknown) => this.log.debug({ err, actorId: id }, "activation from the listener failed; the sweep retries"));
  }

  /**
   * The sweep's hook: claims an unregistered id that a template matches (its messages
   * then wait for the instance instead of going to the DLQ) and activates it.
   */
  claim(id: string): boolean {
    if (this.o.templates.resolve(id) === undefined) return false;
    this.activate(id, "sweep").catch((err: unknown) => this.log.debug({ err, actorId: id }, "activation from the sweep failed; retrying on the next sweep"));
    return true;
  }

  /**
   * Registers a template instance so that placement hosts it (the `activate` endpoint).
   * Concurrent calls for one id share one attempt.
   * @throws InvalidIdError; UnknownAgentError when no template matches the id;
   *   UnknownActorTypeError when the template's type is not registered here;
   *   QuotaExceededError past `[cluster] max_actors`
   */
  activate(id: string, via: string): Promise<ActivationReply> {
    const running = this.activating.get(id);
    if (running) return running;
    const p = this.register(id, via).finally(() => this.activating.delete(id));
    this.activating.set(id, p);
    return p;
  }

  private async register(id: string, via: string): Promise<ActivationReply> {
    const { registry, templates, types, nodeId } = this.o;
    assertId("actor id", id);
    const resolved = templates.resolve(id);
    // A declared agent is no instance, but a caller that cannot read the registry (a bus
    // client) learns here that it exists, as ask's check needs.
    const declared = resolved ? undefined : registry.get(id);
    if (declared && declared.desired !== "killed") return { id, created: false, via: nodeId };
    if (!resolved) {
      const names = templates.list().map((t) => t.name);
      // A template's own name is the likeliest mistake: it is no agent, its instances are.
      if (names.includes(id))
        throw new UnknownAgentError(
          id,
          `${id} is a template, not an agent: its agents are its instances ${id}--<key>, one per key (a user, a session)`,
          `address one, e.g. kova ask ${id} --key <key> "…" (which asks ${id}--<key>), or send to ${id}--<key>`,
        );
      throw new UnknownAgentError(
        id,
        `no agent ${id} is declared and no template matches it (templates: ${names.join(", ") || "none"}; an instance id is <template>--<key>)`,
      );
    }
    const { template } = resolved;
    if (registry.get(id)) return { id, template: template.name, created: false, via: nodeId };
    if (!types.has(template.type)) throw new UnknownActorTypeError(template.type, types.types());
    // Every active instance costs a durable consumer on the server, like a declared actor.
    const spec = { id, type: template.type, capabilities: capabilitiesOf(template, types), template: template.name };
    const created = await this.o.admission.admit(
      id,
      (fence) => registry.declare(spec, fence === undefined ? {} : { fence }),
      (live) => {
        this.counts.refused++;
        if (Date.now() - this.lastRefusedEvent > REFUSED_EVENT_MS) {
          this.lastRefusedEvent = Date.now();
          this.o.publish("activation_refused", id, { id, template: template.name, live, max: this.o.maxActors, node: nodeId, refused: this.counts.refused });
        }
        return new QuotaExceededError(
          "[cluster] max_actors",
          this.o.maxActors,
          live,
          "lower the templates' idle_after so idle instances are passivated sooner, kill actors you no longer need, or raise max_actors in kova.toml",
        );
      },
    );
    if (created) {
      this.counts.activations++;
      this.o.publish("agent_activated", id, { id, template: template.name, via, node: nodeId });
    }
    return { id, template: template.name, created, via: nodeId };
  }

  private schedulePassivation(): void {
    if (this.stopped) return;
    let shortest = Number.POSITIVE_INFINITY;
    for (const t of this.o.templates.list()) if (t.idleAfterMs > 0) shortest = Math.min(shortest, t.idleAfterMs);
    // A quarter of the shortest idle time: an instance is passivated at most 25% late.
    const every = Math.max(50, Math.min(5_000, Math.floor(shortest / 4)));
    this.timer = setTimeout(() => {
      this.passivateIdle();
      this.schedulePassivation();
    }, every);
    this.timer.unref();
  }

  private passivateIdle(): void {
    const now = Date.now();
    for (const a of this.o.host.list()) {
      if (this.passivating >= PASSIVATION_CONCURRENCY) return;
      const t = a.template === undefined ? undefined : this.o.templates.get(a.template);
      if (!t || t.idleAfterMs === 0 || a.state !== "Idle" || a.inFlight > 0 || now - a.lastActiveAt < t.idleAfterMs) continue;
      if (!this.o.leases.holds(a.id)) continue;
      const started = this.o.placement.exclusive(a.id, async () => {
        this.passivating++;
        let done = false;
        try {
          done = await this.passivate(a.id, t);
        } finally {
          this.passivating--;
        }
        // Refill the freed place at once instead of at the next check (up to 5 s away): 32
        // places per check passivated ~6 instances per second per node, and an idle instance
        // keeps its consumer until then. Only after a real passivation: one that found a
        // backlog returns at once and would spin on the same instance.
        if (done && !this.stopped) this.passivateIdle();
      });
      if (!started) continue;
    }
  }

  /** @returns whether the instance was passivated (false: it stays active, or is no longer this node's) */
  private async passivate(id: string, t: RegisteredTemplate): Promise<boolean> {
    const { bus, host, leases, registry, nodeId } = this.o;
    const record = registry.get(id);
    const status = host.status(id);
    if (!record || record.template === undefined || record.desired !== "running" || status?.state !== "Idle" || !leases.holds(id)) return false;
    // Messages already waiting (a backlog, or one on its way to the mailbox): stay active.
    if ((await bus.mailboxBacklog(id)) > 0) return false;
    // A turn that started after the check finishes (and is checkpointed) before the stop ends.
    await host.stop(id, { reason: "passivated", drainTimeoutMs: this.o.drainTimeoutMs });
    try {
      await bus.jsm.consumers.delete(bus.subjects.streams.a2a, bus.subjects.consumer(id));
    } catch (err) {
      if (!isConsumerNotFound(err)) throw err;
    }
    await host.forget(id);
    // Paused or killed meanwhile: leave the entry; placement hosts it again as it says.
    const removed = await this.o.removeRecord(id, (cur) => cur.template !== undefined && cur.desired === "running");
    if (!removed) return false;
    await leases.remove(id);
    this.counts.passivations++;
    this.o.onPassivated?.(id);
    this.o.publish("agent_passivated", id, { id, template: t.name, idleAfterMs: t.idleAfterMs, node: nodeId });
    this.log.debug({ actorId: id }, "instance passivated");
    // A message stored while the instance was stopping found it registered, so nothing
    // activated it for that message: look now (a later one finds it unregistered).
    if (await this.waiting(id)) await this.activate(id, "passivation");
    return true;
  }

  /** Whether the A2A stream holds a message for `id`. */
  private async waiting(id: string): Promise<boolean> {
    const { bus } = this.o;
    try {
      // nats.js 3 answers "no such message" with null; older servers with an error.
      return (await bus.jsm.streams.getMessage(bus.subjects.streams.a2a, { last_by_subj: bus.subjects.a2a(id) })) !== null;
    } catch (err) {
      if (isMessageGone(err)) return false;
      throw err;
    }
  }
}

function capabilitiesOf(t: RegisteredTemplate, types: ActorTypeRegistry): string[] {
  return t.capabilities ?? types.get(t.type).capabilities ?? [];
}
