import type { Logger } from "../core/index.js";
import type { ActorTemplate, ActorTemplateRegistry, ActorTypeRegistry } from "../actors/index.js";
import type { AgentDefinition, ModelCallScheduler } from "../agents/index.js";
import type { Tool } from "../tools/index.js";
import type { NodeConfig } from "./config.js";
import type { ResolveNatsOptions } from "./nats/bootstrap.js";

/**
 * What `KovaNode.start` takes: the config and what an embedding application adds in code.
 * Apart from node.ts so that file reads as the start order; node.ts re-exports it.
 */
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
