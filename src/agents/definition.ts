import { ConfigError, INSTANCE_SEPARATOR, isValidId, isValidTemplateName, TEMPLATE_NAME_MAX } from "../core/index.js";
import { DEFAULT_IDLE_AFTER_MS } from "../actors/index.js";
import { parseToolPattern, TOOL_NAME_RULE } from "../tools/index.js";
import { DEFAULT_APPROVAL_TIMEOUT_MS, MAX_APPROVAL_TIMEOUT_MS } from "./approvals.js";
import type { ChatMessage } from "./model/types.js";
import { priorityValue, type AgentResult } from "./run-protocol.js";

/** How the conversation is fitted to the model's window before each model call (memory/policy.ts). */
export interface MemoryPolicy {
  /**
   * `fifo`: drop the oldest messages; `summary_first`: keep the last `keepLast`, replace
   * older ones with a summary the model writes; `sliding_window`: keep the last `window`.
   */
  policy: "fifo" | "summary_first" | "sliding_window";
  /** Tokens the context may take (the model's `context_window` also bounds it). */
  maxTokens: number;
  /** `summary_first`: messages kept verbatim (default 20). */
  keepLast?: number;
  /** `sliding_window`: messages kept (default 40). */
  window?: number;
}

/** Token budgets, checked before every model call (budget.ts). */
export interface BudgetPolicy {
  /** Token bucket of the agent: refills this many per minute; a call waits while it is empty. */
  tokensPerMinute?: number;
  maxTokensPerRun?: number;
  /** Over the agent's lifetime (its checkpointed usage). */
  maxTokensTotal?: number;
  /** A named group (`[budget_groups.<name>]`) shared by every agent that names it, cluster-wide. */
  group?: string;
  /** A group per session: every run of a session, on any agent that sets it, shares this many tokens. */
  sessionMaxTokens?: number;
  /** A group per sender (the envelope's `from`): a user's runs share this many tokens. */
  userMaxTokens?: number;
}

/** When a run stops even without a final answer (a clear RUN_LIMIT_EXCEEDED result). */
export interface RunPolicy {
  /** Model calls per run (default 20). */
  maxTurns?: number;
  /** Tool calls per run (default 50). */
  maxToolCalls?: number;
  /** Wall time of a run, from its start (default none). */
  timeBudgetMs?: number;
  /** Tool calls of one response run concurrently (default true). */
  parallelToolCalls?: boolean;
}

/** What a hook sees. `addToMemory` appends to the session's conversation (kept after the run). */
export interface HookContext {
  readonly agentId: string;
  readonly runId: string;
  readonly sessionId: string;
  readonly parentRunId?: string;
  /** Messages so far in this run's context (a copy). */
  readonly messages: readonly ChatMessage[];
}

/** What a hook may return to steer the loop (all optional). */
export interface HookResult {
  /** before_user_message: the message to use instead. */
  message?: string;
  /** Stop the loop now: the run ends completed with `output` (default the last answer). */
  stop?: boolean;
  output?: string;
  /** Messages to add to the conversation memory (user or assistant text only). */
  addToMemory?: Array<{ role: "user" | "assistant" | "system"; content: string }>;
}

/**
 * Code hooks. Each call is journaled as a step (its result is recorded), so a replayed run
 * sees the same results without running the hook again: keep results JSON.
 */
export interface AgentHooks {
  /** Before the user's message enters the context: may rewrite it or stop the run. */
  beforeUserMessage?(message: string, ctx: HookContext): HookResult | undefined | Promise<HookResult | undefined>;
  /** After each model response (and its tool calls, if any). */
  afterTurn?(turn: { index: number; content: string | null; toolCalls: number }, ctx: HookContext): HookResult | undefined | Promise<HookResult | undefined>;
  /** After the loop ended, before the reply is sent. */
  afterLoop?(result: AgentResult, ctx: HookContext): HookResult | undefined | Promise<HookResult | undefined>;
}

/**
 * Which tool calls wait for a human (docs/tools.md, "Approval"): the tools matching
 * `tools` (names or patterns, as in the agent's `tools` list), besides every tool that
 * declares `requiresApproval`. No decision within `timeoutMs` rejects the call.
 */
export interface ApprovalPolicy {
  readonly tools: readonly string[];
  readonly timeoutMs: number;
}

/**
 * What makes a definition an agent template (docs/agents.md, "Agent templates"): an instance
 * `<id>--<key>` exists as soon as it is addressed, shares the definition and has its own
 * memory, state, usage and token bucket; it is passivated after `idleAfterMs` without a run.
 */
export interface AgentTemplatePolicy {
  /** An instance with no run for this long is passivated (default 10 min; 0 never). */
  readonly idleAfterMs: number;
}

/** An agent: a prompt, a model, tools, memory, budgets, run policies, hooks and capabilities. */
export interface AgentDefinition {
  /** The agent's id (its actor id and inbox); for a template, the template name. */
  readonly id: string;
  /** Set for an agent template: the node declares no agent `id`, it instantiates `id--<key>` on demand. */
  readonly template?: AgentTemplatePolicy;
  /** A `[models.<name>]` name; switchable at run time (`kova signal <id> model=<name>`). */
  readonly model: string;
  readonly system: string;
  /** Tool names and patterns (`http_request`, `everything/*`, `mcp:server/tool`). */
  readonly tools: readonly string[];
  /** Tool calls that wait for a human's approval before they run. */
  readonly approval: ApprovalPolicy;
  readonly memory: MemoryPolicy;
  readonly budget: BudgetPolicy;
  readonly run: RunPolicy;
  readonly hooks: AgentHooks;
  readonly capabilities: readonly string[];
  readonly temperature?: number;
  /** Upper bound of generated tokens per model call. */
  readonly maxOutputTokens?: number;
  /**
   * Model-call priority of the agent's runs under `scheduling = "priority"` (-100..100,
   * higher first, default 0); a task's `constraints.priority` overrides it.
   */
  readonly priority?: number;
}

/** The form `defineAgent` takes: everything but id, model and system has a default. */
export type AgentSpec = Pick<AgentDefinition, "id" | "model"> & {
  system?: string;
  tools?: readonly string[];
  /** Tool names or patterns needing approval (`["shell_exec", "db_*"]`), or the whole policy. */
  approval?: readonly string[] | { tools: readonly string[]; timeoutMs?: number };
  memory?: Partial<MemoryPolicy>;
  budget?: BudgetPolicy;
  run?: RunPolicy;
  hooks?: AgentHooks;
  capabilities?: readonly string[];
  temperature?: number;
  maxOutputTokens?: number;
  priority?: number;
  /**
   * Make this an agent template: `true` (passivate after 10 min idle) or `{ idleAfterMs }`
   * (0 never). `id` is then the template's name.
   */
  template?: boolean | { idleAfterMs?: number };
};

export const DEFAULT_MEMORY: MemoryPolicy = Object.freeze({ policy: "fifo", maxTokens: 60_000 });
export const DEFAULT_MAX_TURNS = 20;
export const DEFAULT_MAX_TOOL_CALLS = 50;

const MARK = Symbol.for("kova.agentDefinition");

/**
 * Declares an agent in code. Register it with a node (`KovaNode.start({ agents: [...] })`
 * or export it from a module named in kova.toml's `modules`). Validated here, before any
 * message can reach it.
 * @throws ConfigError naming the field at fault and the fix
 */
export function defineAgent(spec: AgentSpec, key = spec.id ?? "agent"): AgentDefinition {
  if (!isValidId(spec.id)) throw new ConfigError(`${key}.id`, `${JSON.stringify(spec.id)} is not an agent id: use 1-128 characters from [A-Za-z0-9_-]`);
  if (spec.id.includes(INSTANCE_SEPARATOR))
    throw new ConfigError(`${key}.id`, `"${INSTANCE_SEPARATOR}" is reserved for template instances (<template>--<key>): rename ${spec.id}`);
  const template = templatePolicy(spec, key);
  if (!isValidId(spec.model)) throw new ConfigError(`${key}.model`, 'must name a [models.<name>] table, e.g. model = "fast"');
  const memory: MemoryPolicy = { ...DEFAULT_MEMORY, ...spec.memory };
  if (!["fifo", "summary_first", "sliding_window"].includes(memory.policy)) {
    throw new ConfigError(`${key}.memory.policy`, `must be fifo, summary_first or sliding_window, not ${JSON.stringify(memory.policy)}`);
  }
  positive(memory.maxTokens, `${key}.memory.max_tokens`, 256);
  if (memory.keepLast !== undefined) positive(memory.keepLast, `${key}.memory.keep_last`, 1);
  if (memory.window !== undefined) positive(memory.window, `${key}.memory.window`, 1);
  const budget = { ...spec.budget };
  for (const [k, v] of Object.entries(budget)) {
    if (k === "group") {
      if (!isValidId(v)) throw new ConfigError(`${key}.budget.group`, "must name a [budget_groups.<name>] table with an id-safe name");
    } else if (v !== undefined) positive(v as number, `${key}.budget.${snake(k)}`, 1);
  }
  const run = { ...spec.run };
  for (const [k, v] of Object.entries(run)) if (k !== "parallelToolCalls" && v !== undefined) positive(v as number, `${key}.run.${snake(k)}`, 1);
  for (const [name, fn] of Object.entries(spec.hooks ?? {})) {
    if (!["beforeUserMessage", "afterTurn", "afterLoop"].includes(name)) {
      throw new ConfigError(`${key}.hooks.${name}`, "unknown hook: use beforeUserMessage, afterTurn or afterLoop");
    }
    if (typeof fn !== "function") throw new ConfigError(`${key}.hooks.${name}`, "must be a function");
  }
  if (spec.maxOutputTokens !== undefined) positive(spec.maxOutputTokens, `${key}.max_output_tokens`, 1);
  if (spec.priority !== undefined) priorityValue(spec.priority, (why) => new ConfigError(`${key}.priority`, why));
  const approval = approvalPolicy(spec.approval, `${key}.approval`);
  if (spec.temperature !== undefined && !(spec.temperature >= 0 && spec.temperature <= 2)) {
    throw new ConfigError(`${key}.temperature`, "must be a number from 0 to 2");
  }
  const def: AgentDefinition = {
    id: spec.id,
    ...(template ? { template } : {}),
    model: spec.model,
    system: spec.system ?? "",
    tools: Object.freeze([...(spec.tools ?? [])]),
    approval,
    memory: Object.freeze(memory),
    budget: Object.freeze(budget),
    run: Object.freeze(run),
    hooks: Object.freeze({ ...spec.hooks }),
    capabilities: Object.freeze([...(spec.capabilities ?? [])]),
    ...(spec.temperature !== undefined ? { temperature: spec.temperature } : {}),
    ...(spec.maxOutputTokens !== undefined ? { maxOutputTokens: spec.maxOutputTokens } : {}),
    ...(spec.priority !== undefined ? { priority: spec.priority } : {}),
  };
  Object.defineProperty(def, MARK, { value: true });
  return Object.freeze(def);
}

/** True for what `defineAgent` returned (a module may export agents next to actor types). */
export function isAgentDefinition(value: unknown): value is AgentDefinition {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[MARK] === true;
}

function approvalPolicy(raw: AgentSpec["approval"], key: string): ApprovalPolicy {
  if (raw === undefined) return Object.freeze({ tools: Object.freeze([]), timeoutMs: DEFAULT_APPROVAL_TIMEOUT_MS });
  const spec = Array.isArray(raw) ? { tools: raw as readonly string[] } : (raw as { tools: readonly string[]; timeoutMs?: number });
  if (!Array.isArray(spec.tools)) throw new ConfigError(`${key}.tools`, 'must be a list of tool names or patterns, e.g. ["shell_exec", "db_*"]');
  spec.tools.forEach((t, i) => {
    if (typeof t !== "string" || !parseToolPattern(t))
      throw new ConfigError(`${key}.tools[${i}]`, `${JSON.stringify(t)} is not a tool name or pattern: ${TOOL_NAME_RULE}`);
  });
  const timeoutMs = spec.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_APPROVAL_TIMEOUT_MS) {
    throw new ConfigError(`${key}.timeout`, `must be a duration from 1 ms to 7 days, not ${JSON.stringify(timeoutMs)}`);
  }
  return Object.freeze({ tools: Object.freeze([...spec.tools]), timeoutMs });
}

function templatePolicy(spec: AgentSpec, key: string): AgentTemplatePolicy | undefined {
  if (spec.template === undefined || spec.template === false) return undefined;
  if (!isValidTemplateName(spec.id)) {
    throw new ConfigError(
      `${key}.id`,
      `${JSON.stringify(spec.id)} is not a template name: use 1-${TEMPLATE_NAME_MAX} characters from [A-Za-z0-9_-], not ending in "-" (instances are <name>${INSTANCE_SEPARATOR}<key>)`,
    );
  }
  const idleAfterMs = spec.template === true ? DEFAULT_IDLE_AFTER_MS : (spec.template.idleAfterMs ?? DEFAULT_IDLE_AFTER_MS);
  if (!Number.isInteger(idleAfterMs) || idleAfterMs < 0) {
    throw new ConfigError(`${key}.idle_after`, `must be a duration (0 = never passivate), not ${JSON.stringify(idleAfterMs)}`);
  }
  return Object.freeze({ idleAfterMs });
}

function positive(v: number, key: string, min: number): void {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min) throw new ConfigError(key, `must be an integer of at least ${min}, not ${JSON.stringify(v)}`);
}

function snake(k: string): string {
  return k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
