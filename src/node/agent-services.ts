import { ConfigError, KovaError, type Logger, componentLogger, isValidId, parseInstanceId } from "../core/index.js";
import { BusErrorCode, type Bus } from "../bus/index.js";
import { idempotencyClass, builtinTools, parseToolPattern, ToolRegistry, McpManager, type Tool } from "../tools/index.js";
import { needsApproval, agentActor, AGENT_TOOL_PREFIX, agentTool, type AgentDefinition, AgentRuntime, type ModelCallScheduler } from "../agents/index.js";
import { type SkippedToolView, type ToolView, mirrorTiming, MirroredSettingsStore } from "../cluster/index.js";
import type { ActorTypeRegistry } from "../actors/index.js";
import type { NodeConfig } from "./config.js";

/** The agent level of a node: its runtime, tool registry and MCP servers. */
export interface AgentServices {
  readonly runtime: AgentRuntime;
  readonly tools: ToolRegistry;
  readonly agents: readonly AgentDefinition[];
  /**
   * What `kova tools ls [agent]` shows: the tools an agent can call now (its list resolved,
   * itself left out, approval from the tool or the agent's `approval` list), or every tool
   * of the node's registry.
   * @throws KovaError UNKNOWN_AGENT when this node defines no such agent; ConfigError as resolve does
   */
  describeTools(agentId?: string): Promise<ToolView[]>;
  /**
   * The MCP tools servers list that are not offered, with the reason: those the agent's
   * `tools` list would name, or every one. Current as of the last listing, so after
   * `describeTools` (which starts lazy servers).
   */
  skippedTools(agentId?: string): SkippedToolView[];
  close(): Promise<void>;
}

/**
 * Builds the agent level when the node has agents (from `[[agents]]`, modules or code):
 * the tool registry (built-ins from `[tools]`, tools defined in code, MCP servers from `[[mcp.servers]]`, whose
 * SDK loads only when one starts: src/tools/mcp/sdk.ts), the AgentRuntime over the node's bus, and one
 * actor type per agent, registered in `types`. Every agent's tool list is resolved here,
 * so a typo fails the start, not the first run.
 * @returns undefined when there are no agents (a node of plain actors builds none of this)
 * @throws ConfigError for an agent id clashing with an actor type, or an unknown tool
 */
export async function startAgentServices(
  config: NodeConfig,
  agents: readonly AgentDefinition[],
  deps: { bus: Bus; types: ActorTypeRegistry; logger: Logger; replicas: number; scheduler: ModelCallScheduler; tools?: readonly Tool[] },
): Promise<AgentServices | undefined> {
  if (agents.length === 0) return undefined;
  const seen = new Set<string>();
  for (const a of agents) {
    if (seen.has(a.id)) throw new ConfigError(`agents.${a.id}`, `agent ${a.id} is defined twice (in [[agents]] and a module, or twice in code): keep one`);
    seen.add(a.id);
    if (deps.types.has(a.id)) throw new ConfigError(`agents.${a.id}`, `"${a.id}" is also an actor type: an agent's id is its actor type; rename one of them`);
  }
  const tools = new ToolRegistry({ logger: deps.logger }).register(...builtinTools(config.tools, deps.logger), ...(deps.tools ?? []));
  const agentTools = agentsAsTools(agents, deps.bus);
  tools.addProvider("agents", { list: () => agentTools });
  let mcp: McpManager | undefined;
  if (config.mcp.servers.length > 0) {
    const manager = new McpManager(config.mcp, { logger: deps.logger, maxResultBytes: config.tools.maxResultBytes });
    mcp = manager;
    for (const name of manager.servers) {
      tools.addProvider(`mcp:${name}`, {
        namespace: name,
        list: () => manager.list().filter((t) => t.name.startsWith(`${name}/`)),
        onChange: (listener) => manager.onChange(() => listener()),
      });
    }
    await manager.start();
  }
  const runtime = new AgentRuntime({
    bus: deps.bus,
    models: config.models,
    tools,
    budgetGroups: config.budgetGroups,
    replicas: deps.replicas,
    logger: deps.logger,
    scheduler: deps.scheduler,
    maxArgumentRepairs: config.tools.maxArgumentRepairs,
    maxResultBytes: config.tools.maxResultBytes,
    ...(mcp ? { prepareTools: (patterns: readonly string[]) => mcp.prepare(patterns) } : {}),
    openSettings: () =>
      MirroredSettingsStore.open({
        js: deps.bus.js,
        nc: deps.bus.nc,
        cluster: deps.bus.cluster,
        replicas: deps.replicas,
        logger: deps.logger,
        timing: mirrorTiming(config.heartbeatMs),
      }),
  });
  agents.forEach((a, i) => {
    for (const m of [a.model]) runtime.modelConfig(m, `agent ${a.id}`);
    const self = a.tools.indexOf(`agent:${a.id}`);
    if (self >= 0)
      throw new ConfigError(
        `agents[${i}].tools[${self}]`,
        `agent ${a.id} cannot call itself: an agent runs one turn at a time, so the call would wait for its own turn; offer another agent`,
      );
    tools.resolve(a.tools, `agents[${i}].tools`);
    deps.types.register(agentActor(a, runtime));
  });
  componentLogger(deps.logger, "agents").info(
    {
      agents: agents.filter((a) => !a.template).map((a) => a.id),
      templates: agents.filter((a) => a.template).map((a) => a.id),
      models: runtime.modelNames(),
      mcp: mcp?.servers ?? [],
    },
    "agent level loaded",
  );
  return {
    runtime,
    tools,
    agents,
    describeTools: async (agentId) => {
      if (agentId === undefined) {
        // Lazy MCP servers list their tools once started: start every one for the whole view.
        if (mcp) await mcp.prepare(mcp.servers.map((n) => `${n}/*`));
        return tools.describe();
      }
      const def = agentDefinitionOf(agents, agentId);
      if (!def)
        throw new KovaError(BusErrorCode.UNKNOWN_AGENT, `no agent ${agentId} on this node: its agents are ${agents.map((a) => a.id).join(", ")}`, {
          data: { agentId },
        });
      const set = await runtime.toolsFor(def, agentId);
      const sources = new Map(tools.describe().map((d) => [d.name, d.source]));
      return set.tools.map((t) => ({
        name: t.name,
        description: t.description,
        parameters: t.parameters,
        idempotency: idempotencyClass(t),
        requiresApproval: needsApproval(def, t),
        source: sources.get(t.name) ?? "code",
      }));
    },
    skippedTools: (agentId) => {
      const patterns = agentId === undefined ? undefined : (agentDefinitionOf(agents, agentId)?.tools ?? []).map((t) => parseToolPattern(t));
      const wanted = (name: string) => patterns === undefined || patterns.some((p) => p?.matches(name));
      return (mcp?.status() ?? []).flatMap((server) =>
        server.skippedTools.map((t) => ({ name: `${server.name}/${t.name}`, source: `mcp:${server.name}`, reason: t.reason })).filter((t) => wanted(t.name)),
      );
    },
    close: async () => {
      runtime.close();
      await mcp?.close();
    },
  };
}

/** The definition an agent id runs: a declared agent's own, or its template's for an instance `<template>--<key>`. */
export function agentDefinitionOf(agents: readonly AgentDefinition[], agentId: string): AgentDefinition | undefined {
  const inst = parseInstanceId(agentId);
  return agents.find((a) => (a.template ? a.id === inst?.template : a.id === agentId));
}

/**
 * The `agent:<id>` tools (docs/swarm.md, "Agents as tools"): one per agent this node
 * defines (so `agent:*` offers them all), and one per `agent:<id>` an agent's list names
 * explicitly (that agent may be defined on other nodes only). They share one argument
 * schema, compiled once, so a node of a thousand agents pays for one. A call is a child run of the
 * calling run, drawing from the caller's budget group; an agent never gets itself (a
 * pattern skips it, see AgentRuntime.toolsFor). An instance of a template is offered only
 * when named (`agent:support--triage`).
 */
function agentsAsTools(agents: readonly AgentDefinition[], bus: Bus): Tool[] {
  // A template is no agent of its own (its instances are): `agent:*` leaves it out.
  const ids = new Set(agents.filter((a) => !a.template).map((a) => a.id));
  for (const a of agents) {
    for (const t of a.tools) if (t.startsWith(AGENT_TOOL_PREFIX) && !t.includes("*")) ids.add(t.slice(AGENT_TOOL_PREFIX.length));
  }
  return [...ids].filter((id) => isValidId(id)).map((id) => agentTool(bus, id));
}
