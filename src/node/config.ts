import { readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname, isAbsolute, resolve } from "node:path";
import {
  type ConfigTable,
  intValue,
  optionalTable as table,
  boolValue,
  rejectUnknown,
  secretFromEnv,
  stringList,
  stringValue,
  tableAt,
  tablesAt,
  ConfigError,
  parseTomlText,
  durationOrNever,
  isValidId,
  parseInstanceId,
} from "../core/index.js";
import { validateTemplate, type ActorTemplate } from "../actors/index.js";
import { redactUrl, type NatsSecurity, type SenderTrust, urlHasCredentials } from "../bus/index.js";
import { NATS_SECURITY_KEYS, natsSecurityFrom } from "./nats/config.js";
import { toolsConfigFrom, type ToolsConfig, mcpConfigFrom, type McpConfig } from "../tools/index.js";
import { parseSchedule, type ScheduleSpec } from "./schedules/spec.js";
import {
  parseModelsConfig,
  type ModelConfig,
  agentsConfigFrom,
  agentTemplatesConfigFrom,
  budgetGroupsFrom,
  checkBudgetGroups,
  idleAfterOf,
  type BudgetGroupConfig,
  type AgentDefinition,
} from "../agents/index.js";
import { swarmActorType, swarmsConfigFrom, type SwarmSpec } from "../swarm/index.js";
import { evalTrustFrom, type EvalTrust } from "../eval/index.js";

/**
 * `kova.toml`: what one node needs to join a cluster. The file uses snake_case keys
 * (TOML custom); the parsed form is camelCase. Every validation error names the key as
 * written in the file and says how to fix it, because the person reading it is editing
 * that file.
 *
 * ```toml
 * [node]
 * id = "node-1"            # KOVA_NODE_ID; stable across restarts: the WAL belongs to it
 * data_dir = "./data"      # KOVA_DATA_DIR; relative paths are relative to this file
 *
 * [cluster]
 * name = "default"         # KOVA_CLUSTER
 * heartbeat_ms = 1000
 * stale_after_ms = 5000
 * drain_timeout_ms = 20000 # a move or shutdown waits this long for a running turn
 * max_actors = 10000       # actors the cluster may register (spawns past it are refused)
 * max_actors_per_node = 5000  # a node hosts at most this many
 * unknown_agent_after_ms = 600000  # messages to undeclared agents go to the DLQ after this
 * marker_compaction = "10m" # remove passivated instances' KV delete markers this old, this often ("0" never)
 *
 * [nats]
 * urls = ["nats://127.0.0.1:4222"]   # NATS_URL (comma-separated) overrides
 * replicas = 3            # of Kova's streams and KV buckets (default: 3 on a clustered NATS, else 1)
 *
 * [wal]
 * sync = "full"            # or "normal"; KOVA_WAL_SYNC
 * ring_bits = 16
 * encryption = { algorithm = "aes-256-gcm", key_env = "KOVA_WAL_KEY" }
 * hmac = { key_env = "KOVA_WAL_HMAC_KEY" }
 *
 * [checkpoint]
 * processed_window = 1000 # envelope ids each actor's checkpoint keeps to recognise a redelivery
 *
 * [journal]
 * nats = true              # also journal each step on NATS, so a takeover resumes the turn exactly
 *
 * [mailbox]
 * ack_wait_ms = 30000
 * max_deliver = 5
 * backoff_ms = [1000, 5000, 15000, 30000]   # redelivery delays after a failed attempt
 *
 * [models.fast]            # OpenAI-compatible endpoints (src/agents/model/config.ts)
 * [[agents]]               # LLM agents (src/agents/config.ts), hosted as actors
 * [[agent_templates]]      # LLM agents per key: support--<key> exists once addressed
 * [budget_groups.team-a]   # token budgets shared by agents, cluster-wide
 *
 * [[actors]]
 * id = "counter-1"
 * type = "counter"
 * module = "./my-actors.js"   # optional: exports actor definitions to register
 *
 * [[actor_templates]]          # virtual actors: support--<key> exists once addressed
 * name = "support"
 * type = "counter"
 * idle_after = "10m"           # passivated after this long without a turn ("0" never)
 * config = { greeting = "hi" } # shared by every instance (ctx.template.config)
 * module = "./my-actors.js"    # optional, as for [[actors]]
 * ```
 */
export interface ActorSpec {
  id: string;
  type: string;
  /** Absolute path of the module that defines `type` (undefined for built-in types). */
  module?: string;
}

export interface WalConfig {
  sync: "normal" | "full";
  ringBits: number;
  encryption?: { algorithm: "aes-256-gcm" | "sm4"; key: string };
  hmac?: { key: string };
}

export interface NodeConfig {
  nodeId: string;
  cluster: string;
  /** Absolute directory of this node's WAL and (when started by us) nats-server store. */
  dataDir: string;
  /** Configured NATS URLs; undefined lets the node find or start a server. */
  natsUrls?: string[];
  /** Credentials, TLS and the inbox prefix for the node's NATS connection (`[nats]`). */
  security?: NatsSecurity;
  /** Clients' inbox prefixes this node may send replies to (besides `_INBOX`). */
  replyPrefixes?: string[];
  /** Which NATS accounts' users act for others; the others' are bus principals (`[nats] trusted_accounts`, `client_inbox_prefix`). */
  senders?: SenderTrust;
  /**
   * Replicas of Kova's streams and KV buckets. Undefined: chosen from the server the node
   * connects to (3 on a clustered NATS, else 1), so a cluster deployment that forgets the
   * key still survives the loss of one NATS server.
   */
  replicas?: number;
  /** How often a node writes its heartbeat (and renews every lease it holds). */
  heartbeatMs: number;
  /** A node whose heartbeat has not changed for this long is dead to its peers. */
  staleAfterMs: number;
  /** How often placement re-checks ownership even without membership changes. */
  reconcileMs: number;
  /**
   * How long a move or a graceful stop waits for an actor's running turn; past it the
   * turn is cut at its next step and its message goes to the next host.
   */
  drainTimeoutMs: number;
  /**
   * Actors the cluster may have registered (`kova spawn` past it is QUOTA_EXCEEDED): every
   * actor costs a durable consumer, about 40-60 KB of nats-server memory.
   */
  maxActors: number;
  /** Actors one node hosts at most; past it the node leaves further actors unplaced and says so. */
  maxActorsPerNode: number;
  /**
   * A message to an agent id nothing declared waits this long (for a spawn racing the send)
   * and then goes to the DLQ with reason `unknown_agent` (default 10 min).
   */
  unknownAgentAfterMs: number;
  wal: WalConfig;
  mailbox: { ackWaitMs?: number; maxDeliver?: number; backoffMs?: number[] };
  /**
   * Envelope ids each actor's checkpoint keeps for deduplication (`[checkpoint]
   * processed_window`, default 1000): a redelivery or resend of one of them starts no turn.
   */
  processedWindow: number;
  /**
   * Journal each step on NATS too (`[journal] nats`, default true), so the node that takes
   * an actor over resumes its turn with every recorded result; false keeps journals in the
   * local WAL only (one node, or a cluster that accepts re-run steps after a takeover).
   */
  natsJournal: boolean;
  actors: ActorSpec[];
  /** `[[actor_templates]]`: templates of virtual actors (see docs/virtual-actors.md). */
  templates: ActorTemplate[];
  /**
   * How often each node sweeps the A2A stream for messages to instances nobody activated
   * yet (raw NATS sends while no node listened; default 1 s).
   */
  activationSweepMs: number;
  /**
   * Each node also listens (core NATS, one queue group) on `kova.<c>.a2a.*` so that a
   * plain NATS send to a never-seen instance activates it within milliseconds; this
   * delivers every A2A message once more, to one node (default true).
   */
  activationListener: boolean;
  /**
   * Every this long, the first live node (by id) removes the KV delete markers older than
   * this from the registry and lease buckets (passivations leave one per instance); 0 never
   * (default 10 min). See docs/virtual-actors.md, "Purge markers".
   */
  markerCompactionMs: number;
  /** Modules to import for actor types (from `[[actors]]` and top-level `modules`), absolute. */
  modules: string[];
  /** Built-in tools and their limits (`[tools]`, see src/tools/config.ts). */
  tools: ToolsConfig;
  /** MCP servers whose tools agents may call (`[[mcp.servers]]`, see src/tools/mcp/config.ts). */
  mcp: McpConfig;
  /** Messages sent on a cron expression or an interval (`[[schedules]]`, see schedule-spec.ts). */
  schedules: ScheduleSpec[];
  /** `[models.<name>]`: the OpenAI-compatible endpoints agents call. */
  models: Map<string, ModelConfig>;
  /** `[[agents]]`: LLM agents this cluster declares (see src/agents/config.ts). */
  agents: AgentDefinition[];
  /** `[[agent_templates]]`: LLM agents instantiated per key (`template` set; docs/agents.md). */
  agentTemplates: AgentDefinition[];
  /** `[budget_groups.<name>]`: token budgets shared by the agents that name them. */
  budgetGroups: Map<string, BudgetGroupConfig>;
  /**
   * The `[gateway]` table as written: the gateway layer (above this one) parses and
   * validates it (src/gateway/config.ts); `kova node start` then serves HTTP as well.
   */
  gateway?: Record<string, unknown>;
  /** Swarm coordinators (`[[swarms]]`, docs/swarm.md); each is also in `actors`, type `swarm-<id>`. */
  swarms: SwarmSpec[];
  /**
   * `[eval]`: what experiments may use of this node (docs/evals.md): the environment
   * variables their external subjects may name, with where each may go, and the directories
   * code verifiers are imported from. Absent: nothing.
   */
  eval?: EvalTrust;
  /** The file this came from, if any. */
  configPath?: string;
}

type Table = ConfigTable;

/** Default quotas: ~0.5 GB of nats-server memory in consumers, ~100 MB of node memory for idle actors. */
export const DEFAULT_MAX_ACTORS = 10_000;
export const DEFAULT_MAX_ACTORS_PER_NODE = 5_000;

const TOP_KEYS = [
  "node",
  "cluster",
  "nats",
  "wal",
  "checkpoint",
  "journal",
  "mailbox",
  "actors",
  "actor_templates",
  "modules",
  "tools",
  "mcp",
  "schedules",
  "models",
  "agents",
  "agent_templates",
  "budget_groups",
  "swarms",
  "gateway",
  "eval",
];

/** The node id used when neither the file nor KOVA_NODE_ID names one: the host name, made id-safe. */
export function defaultNodeId(): string {
  const cleaned = hostname()
    .replace(/[^A-Za-z0-9_-]/g, "-")
    .slice(0, 64);
  return cleaned.length > 0 ? cleaned : "node";
}

/**
 * Reads and validates a config file, then applies environment overrides.
 * @throws ConfigError naming the key and the fix (also for a missing file or bad TOML)
 */
export async function loadConfig(path: string, env: NodeJS.ProcessEnv = process.env): Promise<NodeConfig> {
  const absolute = resolve(path);
  let text: string;
  try {
    text = await readFile(absolute, "utf8");
  } catch (err) {
    throw new ConfigError(
      "--config",
      `cannot read ${absolute} (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path, or omit --config to use defaults`,
      { cause: err },
    );
  }
  return parseConfig(text, { path: absolute, env });
}

/**
 * Parses TOML text into a validated config. `path` anchors relative paths (default: cwd).
 * @throws ConfigError naming the key and the fix
 */
export function parseConfig(text: string, opts: { path?: string; env?: NodeJS.ProcessEnv } = {}): NodeConfig {
  // The error's key names the file: a node started with --config k.toml says which file to fix.
  const doc = parseTomlText(text, opts.path ?? "(config text)") as Table;
  return buildConfig(doc, opts.path, opts.env ?? process.env);
}

/**
 * The config a node runs with when no file is given: defaults plus environment.
 * @throws ConfigError when an environment override is invalid
 */
export function defaultConfig(env: NodeJS.ProcessEnv = process.env): NodeConfig {
  return buildConfig({}, undefined, env);
}

function buildConfig(doc: Table, path: string | undefined, env: NodeJS.ProcessEnv): NodeConfig {
  const base = path ? dirname(path) : process.cwd();
  rejectUnknown(doc, TOP_KEYS, "");
  const node = table(doc, "node");
  const cluster = table(doc, "cluster");
  const nats = table(doc, "nats");
  const wal = table(doc, "wal");
  const mailbox = table(doc, "mailbox");
  const checkpoint = table(doc, "checkpoint");
  const journal = table(doc, "journal");
  rejectUnknown(checkpoint, ["processed_window"], "checkpoint.");
  rejectUnknown(journal, ["nats"], "journal.");
  const natsJournal = boolValue(journal.nats, "journal.nats") ?? true;
  rejectUnknown(node, ["id", "data_dir"], "node.");
  rejectUnknown(
    cluster,
    [
      "name",
      "heartbeat_ms",
      "stale_after_ms",
      "reconcile_ms",
      "drain_timeout_ms",
      "max_actors",
      "max_actors_per_node",
      "unknown_agent_after_ms",
      "activation_sweep_ms",
      "activation_listener",
      "marker_compaction",
    ],
    "cluster.",
  );
  rejectUnknown(nats, ["urls", "replicas", ...NATS_SECURITY_KEYS], "nats.");
  rejectUnknown(wal, ["sync", "ring_bits", "encryption", "hmac"], "wal.");
  rejectUnknown(mailbox, ["ack_wait_ms", "max_deliver", "backoff_ms"], "mailbox.");

  const nodeId = idValue(env.KOVA_NODE_ID, "KOVA_NODE_ID") ?? idValue(node.id, "node.id") ?? defaultNodeId();
  const clusterName = idValue(env.KOVA_CLUSTER, "KOVA_CLUSTER") ?? idValue(cluster.name, "cluster.name") ?? "default";
  const dataDirRaw = env.KOVA_DATA_DIR ?? stringValue(node.data_dir, "node.data_dir");
  const dataDir = dataDirRaw ? resolve(base, dataDirRaw) : resolve(base, ".kova-data", nodeId);

  const heartbeatMs = intValue(cluster.heartbeat_ms, "cluster.heartbeat_ms", 50, 60_000) ?? 1000;
  const staleAfterMs = intValue(cluster.stale_after_ms, "cluster.stale_after_ms", 100, 600_000) ?? 5 * heartbeatMs;
  if (staleAfterMs < 2 * heartbeatMs) {
    throw new ConfigError(
      "cluster.stale_after_ms",
      `must be at least twice cluster.heartbeat_ms (${heartbeatMs}), or one late heartbeat makes a live node look dead; raise it to ${2 * heartbeatMs} or more`,
    );
  }
  const reconcileMs = intValue(cluster.reconcile_ms, "cluster.reconcile_ms", 50, 600_000) ?? 2 * heartbeatMs;

  const config: NodeConfig = {
    nodeId,
    cluster: clusterName,
    dataDir,
    heartbeatMs,
    staleAfterMs,
    reconcileMs,
    drainTimeoutMs: intValue(cluster.drain_timeout_ms, "cluster.drain_timeout_ms", 0, 3_600_000) ?? 20_000,
    maxActors: intValue(cluster.max_actors, "cluster.max_actors", 1, 10_000_000) ?? DEFAULT_MAX_ACTORS,
    maxActorsPerNode: intValue(cluster.max_actors_per_node, "cluster.max_actors_per_node", 1, 10_000_000) ?? DEFAULT_MAX_ACTORS_PER_NODE,
    unknownAgentAfterMs: intValue(cluster.unknown_agent_after_ms, "cluster.unknown_agent_after_ms", 100, 30 * 86_400_000) ?? 600_000,
    activationSweepMs: intValue(cluster.activation_sweep_ms, "cluster.activation_sweep_ms", 50, 600_000) ?? 1000,
    activationListener: boolValue(cluster.activation_listener, "cluster.activation_listener") ?? true,
    markerCompactionMs: durationOrNever(cluster.marker_compaction, "cluster.marker_compaction") ?? 600_000,
    replicas: intValue(nats.replicas, "nats.replicas", 1, 5),
    wal: walConfig(wal, env),
    mailbox: {},
    processedWindow: intValue(checkpoint.processed_window, "checkpoint.processed_window", 1, 1_000_000) ?? 1000,
    natsJournal,
    actors: [],
    templates: [],
    modules: [],
    tools: toolsConfigFrom(doc.tools, "tools", env, base),
    mcp: mcpConfigFrom(doc.mcp, "mcp", { env, baseDir: base }),
    schedules: schedulesFrom(doc.schedules, base),
    models: parseModelsConfig(doc.models, { env, baseDir: base }),
    agents: [],
    agentTemplates: [],
    budgetGroups: budgetGroupsFrom(doc.budget_groups),
    swarms: [],
  };
  config.agents = agentsConfigFrom(doc.agents, new Set(config.models.keys()));
  checkBudgetGroups(config.agents, config.budgetGroups);
  config.agentTemplates = agentTemplatesConfigFrom(doc.agent_templates, new Set(config.models.keys()));
  checkBudgetGroups(config.agentTemplates, config.budgetGroups, "agent_templates");
  config.swarms = swarmsConfigFrom(doc.swarms, new Set(config.models.keys()));
  if (path) config.configPath = path;
  if (doc.gateway !== undefined) config.gateway = table(doc, "gateway");
  if (doc.eval !== undefined) config.eval = evalTrustFrom(doc.eval, base);
  const urls = natsUrls(env.NATS_URL, nats.urls);
  if (urls) config.natsUrls = urls;
  Object.assign(config, natsSecurityFrom(nats, base, env));
  const ackWaitMs = intValue(mailbox.ack_wait_ms, "mailbox.ack_wait_ms", 100, 3_600_000);
  if (ackWaitMs !== undefined) config.mailbox.ackWaitMs = ackWaitMs;
  const maxDeliver = intValue(mailbox.max_deliver, "mailbox.max_deliver", 1, 1000);
  if (maxDeliver !== undefined) config.mailbox.maxDeliver = maxDeliver;
  if (mailbox.backoff_ms !== undefined) {
    const list = mailbox.backoff_ms;
    if (!Array.isArray(list) || list.length === 0) {
      throw new ConfigError("mailbox.backoff_ms", "must be a non-empty array of milliseconds, e.g. backoff_ms = [1000, 5000, 15000]");
    }
    config.mailbox.backoffMs = list.map((v, i) => intValue(v, `mailbox.backoff_ms[${i}]`, 10, 3_600_000)!);
  }

  const modules = new Set<string>();
  if (doc.modules !== undefined) {
    if (!Array.isArray(doc.modules)) throw new ConfigError("modules", 'must be an array of paths, e.g. modules = ["./actors.js"]');
    for (const [i, m] of doc.modules.entries()) modules.add(modulePath(m, `modules[${i}]`, base));
  }
  config.actors = actorSpecs(doc.actors, base);
  const agentIds = new Set(config.agents.map((a) => a.id));
  config.actors.forEach((a, i) => {
    if (agentIds.has(a.id)) throw new ConfigError(`actors[${i}].id`, `"${a.id}" is also an [[agents]] id: an id names one actor; rename one of them`);
  });
  for (const a of config.actors) if (a.module) modules.add(a.module);
  const templates = templateSpecs(doc.actor_templates, base);
  config.templates = templates.map((t) => t.template);
  for (const t of templates) if (t.module) modules.add(t.module);
  config.agentTemplates.forEach((a, i) => {
    const clash = agentIds.has(a.id)
      ? "an [[agents]] id"
      : config.templates.some((t) => t.name === a.id)
        ? "an [[actor_templates]] name"
        : config.actors.some((x) => x.id === a.id)
          ? "an [[actors]] id"
          : undefined;
    if (clash) throw new ConfigError(`agent_templates[${i}].name`, `"${a.id}" is also ${clash}: a name is one actor type; rename one of them`);
  });
  const templateNames = new Set([...config.templates.map((t) => t.name), ...config.agentTemplates.map((a) => a.id)]);
  config.actors.forEach((a, i) => {
    const inst = parseInstanceId(a.id);
    if (inst && templateNames.has(inst.template)) {
      throw new ConfigError(
        `actors[${i}].id`,
        `"${a.id}" has the form of an instance of template "${inst.template}" (<template>--<key>): instances exist by being addressed; rename the actor or drop the [[actors]] entry`,
      );
    }
  });
  config.swarms.forEach((sw, i) => {
    if (config.actors.some((a) => a.id === sw.id))
      throw new ConfigError(`swarms[${i}].id`, `"${sw.id}" is also an [[actors]] id: a coordinator is an actor, give it its own id`);
    if (agentIds.has(sw.id)) throw new ConfigError(`swarms[${i}].id`, `"${sw.id}" is also an [[agents]] id: a coordinator is an actor, give it its own id`);
    if (templateNames.has(sw.id)) throw new ConfigError(`swarms[${i}].id`, `"${sw.id}" is also a template name: a coordinator is an actor, give it its own id`);
    config.actors.push({ id: sw.id, type: swarmActorType(sw.id) });
  });
  config.modules = [...modules];
  return config;
}

function walConfig(wal: Table, env: NodeJS.ProcessEnv): WalConfig {
  const syncRaw = env.KOVA_WAL_SYNC ?? wal.sync;
  const key = env.KOVA_WAL_SYNC !== undefined ? "KOVA_WAL_SYNC" : "wal.sync";
  if (syncRaw !== undefined && syncRaw !== "full" && syncRaw !== "normal") {
    throw new ConfigError(key, `must be "full" (fsync before each append resolves) or "normal" (OS decides), not ${JSON.stringify(syncRaw)}`);
  }
  const out: WalConfig = {
    sync: (syncRaw as "full" | "normal" | undefined) ?? "full",
    ringBits: intValue(wal.ring_bits, "wal.ring_bits", 4, 24) ?? 16,
  };
  if (wal.encryption !== undefined) {
    const enc = tableAt(wal.encryption, "wal.encryption");
    rejectUnknown(enc, ["algorithm", "key_env"], "wal.encryption.");
    const algorithm = enc.algorithm ?? "aes-256-gcm";
    if (algorithm !== "aes-256-gcm" && algorithm !== "sm4") {
      throw new ConfigError("wal.encryption.algorithm", `must be "aes-256-gcm" or "sm4", not ${JSON.stringify(algorithm)}`);
    }
    out.encryption = { algorithm, key: secretFromEnv(enc.key_env, "wal.encryption.key_env", env) };
  }
  if (wal.hmac !== undefined) {
    const h = tableAt(wal.hmac, "wal.hmac");
    rejectUnknown(h, ["key_env"], "wal.hmac.");
    out.hmac = { key: secretFromEnv(h.key_env, "wal.hmac.key_env", env) };
  }
  return out;
}

/** `[[schedules]]`; a `workflow` file path is read from `baseDir` (kova.toml's directory). */
function schedulesFrom(raw: unknown, baseDir: string): ScheduleSpec[] {
  const seen = new Set<string>();
  return tablesAt(raw, "schedules", "write each as [[schedules]] with id, cron or every, and to (or workflow)").map(({ table, key }) => {
    const spec = parseSchedule(table, key, baseDir);
    if (seen.has(spec.id)) throw new ConfigError(`${key}.id`, `${JSON.stringify(spec.id)} is used twice`);
    seen.add(spec.id);
    return spec;
  });
}

function actorSpecs(raw: unknown, base: string): ActorSpec[] {
  const seen = new Set<string>();
  return tablesAt(raw, "actors", "write each actor as [[actors]] with id and type").map(({ table: t, key }) => {
    rejectUnknown(t, ["id", "type", "module"], `${key}.`);
    const id = idValue(t.id, `${key}.id`);
    if (id === undefined) throw new ConfigError(`${key}.id`, 'is required: give the actor an id, e.g. id = "counter-1"');
    if (seen.has(id)) throw new ConfigError(`${key}.id`, `duplicate actor id "${id}": each [[actors]] entry needs its own id`);
    seen.add(id);
    const type = idValue(t.type, `${key}.type`);
    if (type === undefined) throw new ConfigError(`${key}.type`, 'is required: name a registered actor type, e.g. type = "counter"');
    const spec: ActorSpec = { id, type };
    if (t.module !== undefined) spec.module = modulePath(t.module, `${key}.module`, base);
    return spec;
  });
}

function templateSpecs(raw: unknown, base: string): Array<{ template: ActorTemplate; module?: string }> {
  const seen = new Set<string>();
  return tablesAt(raw, "actor_templates", "write each as [[actor_templates]] with name and type").map(({ table: t, key }) => {
    rejectUnknown(t, ["name", "type", "config", "idle_after", "idle_timeout", "capabilities", "module"], `${key}.`);
    const idleAfterMs = idleAfterOf(t, key);
    const capabilities = stringList(t.capabilities, `${key}.capabilities`, '["support"]');
    const template: ActorTemplate = {
      name: t.name as string,
      type: t.type as string,
      ...(t.config !== undefined ? { config: tableAt(t.config, `${key}.config`) } : {}),
      ...(idleAfterMs !== undefined ? { idleAfterMs } : {}),
      ...(capabilities ? { capabilities } : {}),
    };
    const valid = validateTemplate(template, key);
    if (seen.has(valid.name)) throw new ConfigError(`${key}.name`, `duplicate template "${valid.name}": each [[actor_templates]] entry needs its own name`);
    seen.add(valid.name);
    return { template, ...(t.module !== undefined ? { module: modulePath(t.module, `${key}.module`, base) } : {}) };
  });
}

function modulePath(raw: unknown, key: string, base: string): string {
  if (typeof raw !== "string" || raw.length === 0) {
    throw new ConfigError(key, 'must be a path to a JavaScript module, e.g. "./my-actors.js"');
  }
  return isAbsolute(raw) ? raw : resolve(base, raw);
}

function natsUrls(envValue: string | undefined, raw: unknown): string[] | undefined {
  if (envValue !== undefined && envValue.trim() !== "") {
    return envValue.split(",").map((u, i) => checkUrl(u.trim(), `NATS_URL[${i}]`));
  }
  if (raw === undefined) return undefined;
  const list = typeof raw === "string" ? [raw] : raw;
  if (!Array.isArray(list) || list.length === 0) {
    throw new ConfigError("nats.urls", 'must be a non-empty array of URLs, e.g. urls = ["nats://10.0.0.1:4222"]');
  }
  return list.map((u, i) => {
    const url = checkUrl(u, `nats.urls[${i}]`);
    if (urlHasCredentials(url)) {
      throw new ConfigError(
        `nats.urls[${i}]`,
        "holds credentials: secrets are not read from the config file; use user with password_env or password_file, token_env, nkey_seed_file or creds_file in [nats]",
      );
    }
    return url;
  });
}

// Without a scheme nats.js reads `[user[:pass]@]host:port` as `nats://…`, and so do we
// (urlHasCredentials, redactUrl), so that user info there is found and never echoed.
function checkUrl(u: unknown, key: string): string {
  if (typeof u !== "string" || !/^(nats|tls|wss?):\/\/[^\s/]+(:\d+)?\/?$|^([^\s/@]+@)?[^\s:/@]+:\d+$/.test(u)) {
    throw new ConfigError(key, `${typeof u === "string" ? JSON.stringify(redactUrl(u)) : JSON.stringify(u)} is not a NATS URL: write it as nats://host:port`);
  }
  return u;
}

function idValue(value: unknown, key: string): string | undefined {
  if (value === undefined || value === "") return undefined;
  if (!isValidId(value)) {
    throw new ConfigError(key, `${JSON.stringify(value)} is not a valid id: use 1-128 characters from [A-Za-z0-9_-]`);
  }
  return value;
}
