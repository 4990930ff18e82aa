import {
  intValue,
  rejectUnknown,
  stringList,
  stringValue,
  tableAt,
  tablesAt,
  type ConfigTable,
  ConfigError,
  durationMs,
  durationOrNever,
  isValidId,
  isValidTemplateName,
  TEMPLATE_NAME_MAX,
} from "../core/index.js";
import { defineAgent, type AgentDefinition, type AgentSpec } from "./definition.js";

/**
 * `[[agents]]` and `[budget_groups.<name>]` of kova.toml:
 *
 * ```toml
 * [[agents]]
 * id = "researcher"
 * model = "fast"                             # a [models.<name>] table
 * system = "You research and cite sources."
 * tools = ["http_request", "mcp:everything/*"]
 * approval = ["http_request"]               # calls that wait for kova approve; or { tools = [...], timeout = "30min" } (default 1h)
 * memory = { policy = "summary_first", keep_last = 20, max_tokens = 60000 }   # or fifo, sliding_window (window = 40)
 * budget = { tokens_per_minute = 200000, max_tokens_per_run = 50000, group = "team-a" }
 * run = { max_turns = 20, max_tool_calls = 50, time_budget_ms = 300000, parallel_tool_calls = true }
 * capabilities = ["research"]
 * temperature = 0.2
 * max_output_tokens = 4096
 * priority = 10                              # model-call priority under scheduling = "priority" (-100..100, default 0)
 *
 * [budget_groups.team-a]
 * max_tokens = 1000000                       # shared by every agent naming the group, cluster-wide
 * ```
 */
export interface BudgetGroupConfig {
  maxTokens: number;
}

const AGENT_KEYS = ["id", "model", "system", "tools", "approval", "memory", "budget", "run", "capabilities", "temperature", "max_output_tokens", "priority"];
const MEMORY_KEYS = ["policy", "max_tokens", "keep_last", "window"];
const BUDGET_KEYS = ["tokens_per_minute", "max_tokens_per_run", "max_tokens_total", "group", "session_max_tokens", "user_max_tokens"];
const RUN_KEYS = ["max_turns", "max_tool_calls", "time_budget_ms", "parallel_tool_calls"];
const MAX_INT = 1_000_000_000_000;

/** Keys of `[[agent_templates]]`: those of `[[agents]]` with `name` for `id`, plus the idle time. */
const TEMPLATE_KEYS = ["name", ...AGENT_KEYS.filter((k) => k !== "id"), "idle_after", "idle_timeout"];

/**
 * Parses `[[agents]]`.
 * @param models the configured model names, to check each agent's `model` here rather than at its first call
 * @throws ConfigError naming the key as written (`agents[0].memory.keep_last`) and the fix
 */
export function agentsConfigFrom(raw: unknown, models: ReadonlySet<string>): AgentDefinition[] {
  const seen = new Set<string>();
  return tablesAt(raw, "agents", "write each agent as [[agents]] with id and model").map(({ table: t, key }) => {
    rejectUnknown(t, AGENT_KEYS, `${key}.`);
    const id = stringValue(t.id, `${key}.id`);
    if (id === undefined) throw new ConfigError(`${key}.id`, 'is required: the agent id, e.g. id = "researcher"');
    if (seen.has(id)) throw new ConfigError(`${key}.id`, `duplicate agent id "${id}": each [[agents]] entry needs its own id`);
    seen.add(id);
    return defineAgent(agentSpecFrom(t, id, key, models), key);
  });
}

/**
 * Parses `[[agent_templates]]`: an agent declared once and instantiated per key
 * (`support--user-42`) on its first message, passivated after `idle_after` (alias
 * `idle_timeout`; default 10 min, `0` never) without a run.
 *
 * ```toml
 * [[agent_templates]]
 * name = "support"          # instances are support--<key>
 * model = "fast"
 * system = "You help customers."
 * idle_after = "10m"
 * budget = { tokens_per_minute = 20000 }   # per instance; a group stays shared by name
 * ```
 * @throws ConfigError naming the key as written (`agent_templates[0].name`) and the fix
 */
export function agentTemplatesConfigFrom(raw: unknown, models: ReadonlySet<string>): AgentDefinition[] {
  const seen = new Set<string>();
  return tablesAt(raw, "agent_templates", "write each as [[agent_templates]] with name and model").map(({ table: t, key }) => {
    rejectUnknown(t, TEMPLATE_KEYS, `${key}.`);
    const name = stringValue(t.name, `${key}.name`);
    if (name === undefined) throw new ConfigError(`${key}.name`, 'is required: the template name, instances are <name>--<key>, e.g. name = "support"');
    if (!isValidTemplateName(name)) {
      throw new ConfigError(
        `${key}.name`,
        `${JSON.stringify(name)} is not a template name: use 1-${TEMPLATE_NAME_MAX} characters from [A-Za-z0-9_-], without "--" (it separates the key in <name>--<key>) and not ending in "-"`,
      );
    }
    if (seen.has(name)) throw new ConfigError(`${key}.name`, `duplicate template "${name}": each [[agent_templates]] entry needs its own name`);
    seen.add(name);
    const idleAfterMs = idleAfterOf(t, key);
    const spec = agentSpecFrom(t, name, key, models);
    spec.template = idleAfterMs === undefined ? true : { idleAfterMs };
    return defineAgent(spec, key);
  });
}

/**
 * A template's `idle_after` (alias `idle_timeout`): a duration (`"10m"`, milliseconds), or 0 for never.
 * @throws ConfigError when both are given or the value is no duration
 */
export function idleAfterOf(t: ConfigTable, key: string): number | undefined {
  if (t.idle_after !== undefined && t.idle_timeout !== undefined)
    throw new ConfigError(`${key}.idle_timeout`, "is another name for idle_after: give one of them");
  const idleKey = t.idle_timeout !== undefined ? "idle_timeout" : "idle_after";
  return durationOrNever(t[idleKey], `${key}.${idleKey}`);
}

/** The keys `[[agents]]` and `[[agent_templates]]` share, as a defineAgent spec. */
function agentSpecFrom(t: ConfigTable, id: string, key: string, models: ReadonlySet<string>): AgentSpec {
  const model = stringValue(t.model, `${key}.model`);
  if (model === undefined) throw new ConfigError(`${key}.model`, 'is required: name a [models.<name>] table, e.g. model = "fast"');
  if (!models.has(model)) {
    throw new ConfigError(`${key}.model`, `no [models.${model}] table: configured models are ${[...models].join(", ") || "(none)"}`);
  }
  const spec: AgentSpec = { id, model };
  const system = stringValue(t.system, `${key}.system`);
  if (system !== undefined) spec.system = system;
  const tools = stringList(t.tools, `${key}.tools`, '["clock_now", "mcp:everything/*"]');
  if (tools) spec.tools = tools;
  if (t.approval !== undefined) spec.approval = approvalFrom(t.approval, `${key}.approval`);
  const caps = stringList(t.capabilities, `${key}.capabilities`, '["research"]', (c, k) => {
    if (!isValidId(c)) throw new ConfigError(k, "a capability is an id token of [A-Za-z0-9_-]");
    return c;
  });
  if (caps) spec.capabilities = caps;
  if (t.memory !== undefined) spec.memory = memoryFrom(tableAt(t.memory, `${key}.memory`), `${key}.memory`);
  if (t.budget !== undefined) spec.budget = budgetFrom(tableAt(t.budget, `${key}.budget`), `${key}.budget`);
  if (t.run !== undefined) spec.run = runFrom(tableAt(t.run, `${key}.run`), `${key}.run`);
  if (t.temperature !== undefined) {
    if (typeof t.temperature !== "number") throw new ConfigError(`${key}.temperature`, "must be a number from 0 to 2");
    spec.temperature = t.temperature;
  }
  const maxOut = intValue(t.max_output_tokens, `${key}.max_output_tokens`, 1, 10_000_000);
  if (maxOut !== undefined) spec.maxOutputTokens = maxOut;
  // Any number here: defineAgent checks the range and names the key.
  if (t.priority !== undefined) spec.priority = t.priority as number;
  return spec;
}

/**
 * Parses `[budget_groups.<name>]`.
 * @throws ConfigError naming the key and the fix
 */
export function budgetGroupsFrom(raw: unknown): Map<string, BudgetGroupConfig> {
  const out = new Map<string, BudgetGroupConfig>();
  if (raw === undefined) return out;
  const t = tableAt(raw, "budget_groups");
  for (const name of Object.keys(t)) {
    const key = `budget_groups.${name}`;
    if (!isValidId(name)) throw new ConfigError(key, "a group name may use only A-Z, a-z, 0-9, _ and -: rename the table");
    const g = tableAt(t[name], key);
    rejectUnknown(g, ["max_tokens"], `${key}.`);
    const maxTokens = intValue(g.max_tokens, `${key}.max_tokens`, 1, MAX_INT);
    if (maxTokens === undefined)
      throw new ConfigError(`${key}.max_tokens`, "is required: the tokens the group's agents may use together, e.g. max_tokens = 1000000");
    out.set(name, { maxTokens });
  }
  return out;
}

/**
 * Checks that every agent's `budget.group` names a `[budget_groups.<name>]` table.
 * @throws ConfigError naming the agent's key
 */
export function checkBudgetGroups(agents: readonly AgentDefinition[], groups: ReadonlyMap<string, BudgetGroupConfig>, section = "agents"): void {
  agents.forEach((a, i) => {
    const g = a.budget.group;
    if (g !== undefined && !groups.has(g)) {
      throw new ConfigError(
        `${section}[${i}].budget.group`,
        `no [budget_groups.${g}] table: add one with max_tokens, e.g. [budget_groups.${g}] max_tokens = 1000000`,
      );
    }
  });
}

function approvalFrom(raw: unknown, key: string): NonNullable<AgentSpec["approval"]> {
  const example = '["shell_exec", "db_*"]';
  if (Array.isArray(raw)) return stringList(raw, key, example) ?? [];
  const t = tableAt(raw, key);
  rejectUnknown(t, ["tools", "timeout"], `${key}.`);
  const tools = stringList(t.tools, `${key}.tools`, example);
  if (!tools) throw new ConfigError(`${key}.tools`, `is required: the tools whose calls wait for approval, e.g. tools = ${example}`);
  return { tools, ...(t.timeout !== undefined ? { timeoutMs: durationMs(t.timeout, `${key}.timeout`) } : {}) };
}

function memoryFrom(t: ConfigTable, key: string): AgentSpec["memory"] {
  rejectUnknown(t, MEMORY_KEYS, `${key}.`);
  const out: NonNullable<AgentSpec["memory"]> = {};
  const policy = stringValue(t.policy, `${key}.policy`);
  if (policy !== undefined) {
    if (policy !== "fifo" && policy !== "summary_first" && policy !== "sliding_window") {
      throw new ConfigError(`${key}.policy`, `must be "fifo", "summary_first" or "sliding_window", not ${JSON.stringify(policy)}`);
    }
    out.policy = policy;
  }
  const maxTokens = intValue(t.max_tokens, `${key}.max_tokens`, 256, MAX_INT);
  if (maxTokens !== undefined) out.maxTokens = maxTokens;
  const keepLast = intValue(t.keep_last, `${key}.keep_last`, 1, 100_000);
  if (keepLast !== undefined) out.keepLast = keepLast;
  const window = intValue(t.window, `${key}.window`, 1, 100_000);
  if (window !== undefined) out.window = window;
  return out;
}

function budgetFrom(t: ConfigTable, key: string): NonNullable<AgentSpec["budget"]> {
  rejectUnknown(t, BUDGET_KEYS, `${key}.`);
  const out: NonNullable<AgentSpec["budget"]> = {};
  const num = (k: string) => intValue(t[k], `${key}.${k}`, 1, MAX_INT);
  const set = <K extends keyof typeof out>(field: K, v: (typeof out)[K] | undefined) => {
    if (v !== undefined) out[field] = v;
  };
  set("tokensPerMinute", num("tokens_per_minute"));
  set("maxTokensPerRun", num("max_tokens_per_run"));
  set("maxTokensTotal", num("max_tokens_total"));
  set("sessionMaxTokens", num("session_max_tokens"));
  set("userMaxTokens", num("user_max_tokens"));
  set("group", stringValue(t.group, `${key}.group`));
  return out;
}

function runFrom(t: ConfigTable, key: string): NonNullable<AgentSpec["run"]> {
  rejectUnknown(t, RUN_KEYS, `${key}.`);
  const out: NonNullable<AgentSpec["run"]> = {};
  const maxTurns = intValue(t.max_turns, `${key}.max_turns`, 1, 10_000);
  if (maxTurns !== undefined) out.maxTurns = maxTurns;
  const maxToolCalls = intValue(t.max_tool_calls, `${key}.max_tool_calls`, 1, 100_000);
  if (maxToolCalls !== undefined) out.maxToolCalls = maxToolCalls;
  const time = intValue(t.time_budget_ms, `${key}.time_budget_ms`, 1, 7 * 86_400_000);
  if (time !== undefined) out.timeBudgetMs = time;
  if (t.parallel_tool_calls !== undefined) {
    if (typeof t.parallel_tool_calls !== "boolean") throw new ConfigError(`${key}.parallel_tool_calls`, "must be true or false");
    out.parallelToolCalls = t.parallel_tool_calls;
  }
  return out;
}
