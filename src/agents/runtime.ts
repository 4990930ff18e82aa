import { componentLogger, silentLogger, type Logger, timedPhase } from "../core/index.js";
import type { Bus, KovaEvent } from "../bus/index.js";
import { type ToolRegistry, ToolSet, DEFAULT_ARGUMENT_REPAIRS, DEFAULT_RESULT_MAX_BYTES } from "../tools/index.js";
import type { ModelConfig } from "./model/config.js";
import { createOpenAiModel } from "./model/openai-model.js";
import { ModelCallScheduler } from "./model/scheduler.js";
import { loadTokenCounter, type TokenCounter } from "./model/tokens.js";
import type { ModelClient } from "./model/types.js";
import { NatsGroupLedger, type GroupLedger } from "./budget-groups.js";
import type { BudgetGroupConfig } from "./config.js";
import type { AgentDefinition } from "./definition.js";
import { UnknownModelError } from "./errors.js";
import { NatsMemoryStore, type MemoryStore } from "./memory/store.js";
import { NatsApprovalStore, type ApprovalStore } from "./approvals.js";
import { NatsSettingsStore, type SettingsStore } from "./settings.js";
import { TokenBucket } from "./token-bucket.js";

export interface AgentRuntimeOptions {
  /** The node's bus: events, and the KV buckets of memory, budgets and settings. */
  bus: Bus;
  /** `[models.<name>]`. */
  models: ReadonlyMap<string, ModelConfig>;
  tools: ToolRegistry;
  /** `[budget_groups.<name>]`. */
  budgetGroups?: ReadonlyMap<string, BudgetGroupConfig>;
  /** Replicas of the buckets this runtime creates (default 1). */
  replicas?: number;
  logger?: Logger;
  /** Builds a model client (default: the `openai` package, imported on first use). */
  modelFactory?: (config: ModelConfig, logger: Logger) => Promise<ModelClient>;
  /** Starts lazy MCP servers an agent's tool patterns name, before they are resolved. */
  prepareTools?: (patterns: readonly string[]) => Promise<void>;
  /** `[tools] max_argument_repairs` and `max_result_bytes`. */
  maxArgumentRepairs?: number;
  maxResultBytes?: number;
  /**
   * The node's model-call scheduler (`KovaNode.modelScheduler`), shared with whatever else on
   * the node calls models (swarm coordinators), so that `max_concurrency` bounds the node's
   * calls to a model, not each caller's, and its queues and waits show in the node's status
   * and `$SRV.STATS`. Default: one of its own, closed by `close()`.
   */
  scheduler?: ModelCallScheduler;
  /** Stores; defaults are NATS KV buckets opened on first use (tests pass their own). */
  memory?: MemoryStore;
  approvals?: ApprovalStore;
  ledger?: GroupLedger;
  settings?: SettingsStore;
  /**
   * Opens the settings store on first use instead of the plain KV bucket: a node passes
   * one that keeps a watched copy of the bucket, so a run reads its model switch without
   * a round trip.
   */
  openSettings?: () => Promise<SettingsStore>;
}

/**
 * What the agents of one node share: model clients and their call scheduler (only the
 * provider call holds a slot), the tool registry, conversation memory, budget ledgers,
 * per-agent token buckets and model switches, and the event publisher.
 */
export class AgentRuntime {
  readonly scheduler: ModelCallScheduler;
  readonly log: Logger;
  readonly budgetGroups: ReadonlyMap<string, BudgetGroupConfig>;
  readonly maxArgumentRepairs: number;
  readonly maxResultBytes: number;
  readonly #models = new Map<string, Promise<ModelClient>>();
  readonly #buckets = new Map<string, TokenBucket>();
  readonly #overrides = new Map<string, string | null>();
  readonly #running = new Map<string, string>();
  readonly #prepared = new Map<string, Promise<void>>();
  readonly #ownsScheduler: boolean;
  readonly #awaitingApproval = new Set<string>();
  #memory: Promise<MemoryStore> | undefined;
  #approvals: Promise<ApprovalStore> | undefined;
  #ledger: Promise<GroupLedger> | undefined;
  #settings: Promise<SettingsStore> | undefined;

  constructor(readonly opts: AgentRuntimeOptions) {
    this.log = componentLogger(opts.logger ?? silentLogger(), "agents");
    this.#ownsScheduler = opts.scheduler === undefined;
    this.scheduler = opts.scheduler ?? modelScheduler(opts.models, opts.logger ?? this.log);
    this.budgetGroups = opts.budgetGroups ?? new Map();
    this.maxArgumentRepairs = opts.maxArgumentRepairs ?? DEFAULT_ARGUMENT_REPAIRS;
    this.maxResultBytes = opts.maxResultBytes ?? DEFAULT_RESULT_MAX_BYTES;
    if (opts.memory) this.#memory = Promise.resolve(opts.memory);
    if (opts.ledger) this.#ledger = Promise.resolve(opts.ledger);
    if (opts.approvals) this.#approvals = Promise.resolve(opts.approvals);
    if (opts.settings) this.#settings = Promise.resolve(opts.settings);
  }

  get bus(): Bus {
    return this.opts.bus;
  }

  modelNames(): string[] {
    return [...this.opts.models.keys()];
  }

  /** @throws UnknownModelError */
  modelConfig(name: string, where = "model"): ModelConfig {
    const c = this.opts.models.get(name);
    if (!c) throw new UnknownModelError(name, this.modelNames(), where);
    return c;
  }

  /** The client of a configured model, built once. @throws UnknownModelError */
  model(name: string): Promise<ModelClient> {
    let m = this.#models.get(name);
    if (!m) {
      const config = this.modelConfig(name);
      const factory = this.opts.modelFactory ?? ((c: ModelConfig, log: Logger) => createOpenAiModel(c, { logger: log }));
      m = factory(config, this.opts.logger ?? this.log);
      m.catch(() => this.#models.delete(name));
      this.#models.set(name, m);
    }
    return m;
  }

  /** The token counter of a model's encoding (loaded on first use). */
  counter(name: string): Promise<TokenCounter> {
    return loadTokenCounter(this.modelConfig(name).model);
  }

  /** The agent's tools, resolved now (an MCP server's tools may come and go). @throws ConfigError for an unknown tool */
  async toolsFor(def: AgentDefinition, agentId: string): Promise<ToolSet> {
    if (def.tools.length > 0 && this.opts.prepareTools) {
      let p = this.#prepared.get(def.id);
      if (!p) {
        p = this.opts.prepareTools(def.tools);
        p.catch(() => this.#prepared.delete(def.id));
        this.#prepared.set(def.id, p);
      }
      await p;
    }
    const set = this.opts.tools.resolve(def.tools, `agent ${agentId} tools`);
    // `agent:*` must not offer an agent itself: the call would wait for its own turn.
    const self = new Set([`agent:${agentId}`, `agent:${def.id}`]);
    return set.tools.some((t) => self.has(t.name)) ? new ToolSet(set.tools.filter((t) => !self.has(t.name))) : set;
  }

  memory(): Promise<MemoryStore> {
    this.#memory ??= this.#open(
      () => NatsMemoryStore.open({ js: this.bus.js, cluster: this.bus.cluster, replicas: this.opts.replicas ?? 1, maxBytes: this.bus.maxPayload }),
      () => (this.#memory = undefined),
    );
    return this.#memory;
  }

  /** Pending and decided tool-call approvals (KV `kova_<c>_approvals`). */
  approvals(): Promise<ApprovalStore> {
    this.#approvals ??= this.#open(
      () => NatsApprovalStore.open({ js: this.bus.js, cluster: this.bus.cluster, replicas: this.opts.replicas ?? 1 }),
      () => (this.#approvals = undefined),
    );
    return this.#approvals;
  }

  ledger(): Promise<GroupLedger> {
    this.#ledger ??= this.#open(
      () => NatsGroupLedger.open({ js: this.bus.js, cluster: this.bus.cluster, replicas: this.opts.replicas ?? 1 }),
      () => (this.#ledger = undefined),
    );
    return this.#ledger;
  }

  settings(): Promise<SettingsStore> {
    this.#settings ??= this.#open(
      this.opts.openSettings ?? (() => NatsSettingsStore.open({ js: this.bus.js, cluster: this.bus.cluster, replicas: this.opts.replicas ?? 1 })),
      () => (this.#settings = undefined),
    );
    return this.#settings;
  }

  #open<T>(open: () => Promise<T>, reset: () => void): Promise<T> {
    const p = open();
    p.catch(() => reset());
    return p;
  }

  /**
   * The model an agent calls now: its definition's, unless switched. The switch is read
   * from NATS once per run (`refresh`), so a node that took the agent over uses it too.
   */
  async currentModel(agentId: string, def: AgentDefinition, refresh = false): Promise<string> {
    if (refresh || !this.#overrides.has(agentId)) {
      const settings = await this.settings();
      const s = await timedPhase("kv.settings", agentId, () => settings.get(agentId));
      this.#overrides.set(agentId, s.model && this.opts.models.has(s.model) ? s.model : null);
    }
    return this.#overrides.get(agentId) ?? def.model;
  }

  /** The model last known for an agent, without a round trip (for info replies). */
  knownModel(agentId: string, def: AgentDefinition): string {
    return this.#overrides.get(agentId) ?? def.model;
  }

  /**
   * Switches an agent's model from its next model call on (and on any node that hosts it later).
   * @throws UnknownModelError for a name no `[models.<name>]` defines
   */
  async switchModel(agentId: string, name: string): Promise<void> {
    this.modelConfig(name, `model switch of ${agentId}`);
    await (await this.settings()).set(agentId, { model: name });
    this.#overrides.set(agentId, name);
  }

  /** The agent's token bucket (`tokens_per_minute`), kept per node: one node hosts an agent at a time. */
  bucket(agentId: string, tokensPerMinute: number): TokenBucket {
    let b = this.#buckets.get(agentId);
    if (!b || b.tokensPerMinute !== tokensPerMinute) {
      b = new TokenBucket(tokensPerMinute, Date.now());
      this.#buckets.set(agentId, b);
    }
    return b;
  }

  /**
   * Releases what the runtime keeps for one agent outside its actor (a passivated template
   * instance, so a node's memory follows its active instances): the model-switch cache
   * (read from NATS again at its next run) and its token bucket once refilled. A new bucket
   * starts full, so dropping a full one changes nothing; one still in debt is kept until it
   * has refilled, so passivating does not reset `tokens_per_minute`.
   */
  forget(agentId: string): void {
    this.#overrides.delete(agentId);
    const bucket = this.#buckets.get(agentId);
    if (!bucket) return;
    const drop = () => {
      if (this.#buckets.get(agentId) !== bucket || this.#running.has(agentId)) return;
      const left = bucket.msUntilFull(Date.now());
      if (left === 0) this.#buckets.delete(agentId);
      // A timer may fire a millisecond early by the wall clock: look again rather than keep it forever.
      else setTimeout(drop, left + 1).unref();
    };
    drop();
  }

  /** Agents with a token bucket on this node (what `forget` releases). */
  get bucketCount(): number {
    return this.#buckets.size;
  }

  runStarted(agentId: string, runId: string): void {
    this.#running.set(agentId, runId);
  }

  runEnded(agentId: string): void {
    this.#running.delete(agentId);
    this.#awaitingApproval.delete(agentId);
  }

  /** Marks an agent's run as waiting for a human's approval (or not any more). */
  awaitingApproval(agentId: string, waiting: boolean): void {
    if (waiting) this.#awaitingApproval.add(agentId);
    else this.#awaitingApproval.delete(agentId);
  }

  /** `waiting_approval` while the run waits for a decision, `Running` during the rest of a run, else `Idle`. */
  runState(agentId: string): "Idle" | "Running" | "waiting_approval" {
    if (!this.#running.has(agentId)) return "Idle";
    return this.#awaitingApproval.has(agentId) ? "waiting_approval" : "Running";
  }

  /** The run in progress for an agent hosted here, if any. */
  runningRun(agentId: string): string | undefined {
    return this.#running.get(agentId);
  }

  /**
   * Publishes a run event: durable (stored, retried) unless `durable` is false. `msgId`
   * (durable only): the same id for the same event when its step runs again, so the stream
   * stores it once within its duplicate window.
   */
  publish(event: KovaEvent, durable = true, msgId?: string): Promise<void> {
    if (!durable) return this.bus.publishEvent(event, { durable });
    return timedPhase(`event:${event.type}`, undefined, () => this.bus.publishEvent(event, msgId === undefined ? {} : { msgId }));
  }

  /** Stops the scheduler if it is this runtime's own (waiting calls fail with MODEL_SCHEDULER_CLOSED). */
  close(): void {
    if (this.#ownsScheduler) this.scheduler.close();
    void this.#settings?.then((s) => s.close?.()).catch(() => undefined);
  }
}

/** A scheduler with one lane per configured model (`max_concurrency`, `scheduling`). */
export function modelScheduler(models: ReadonlyMap<string, ModelConfig>, logger?: Logger): ModelCallScheduler {
  return new ModelCallScheduler(
    [...models].map(([name, m]) => [name, { maxConcurrency: m.maxConcurrency, policy: m.scheduling }]),
    logger ? { logger } : {},
  );
}
