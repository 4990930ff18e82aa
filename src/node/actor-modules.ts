import { pathToFileURL } from "node:url";
import { ConfigError } from "../core/index.js";
import type { ActorTypeRegistry, ActorDefinition } from "../actors/index.js";
import type { NodeConfig } from "./config.js";
import { isAgentDefinition, type AgentDefinition } from "../agents/index.js";
import { isToolDefinition, type Tool } from "../tools/index.js";

/**
 * User actor types come from modules named in kova.toml. A module exports actor
 * definitions (made with `defineActor` from the `kova` package), agent definitions (made
 * with `defineAgent`) and tools (made with `defineTool`) as named exports, as a default
 * export, or as an array of them; every actor definition is registered, every agent
 * definition and tool returned.
 */
function isDefinition(value: unknown): value is ActorDefinition<unknown> {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.type === "string" && typeof v.initialState === "function" && typeof v.handlers === "object";
}

/**
 * Imports each module of the config and registers its actor definitions, then checks that
 * every `[[actors]]` and `[[actor_templates]]` type is known.
 * @returns the agent definitions the modules export (the node hosts them as agents) and
 *   their tools (offered to agents whose `tools` lists name them)
 * @throws ConfigError naming the module or the `actors[i].type` / `actor_templates[i].type` key
 */
export async function loadActorModules(config: NodeConfig, types: ActorTypeRegistry): Promise<{ agents: AgentDefinition[]; tools: Tool[] }> {
  const agents: AgentDefinition[] = [];
  const tools: Tool[] = [];
  for (const path of config.modules) {
    let mod: Record<string, unknown>;
    try {
      mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
    } catch (err) {
      throw new ConfigError("actors.module", `cannot import ${path}: ${(err as Error).message}; check the path and that it is built JavaScript`, {
        cause: err,
      });
    }
    let found = 0;
    for (const value of Object.values(mod)) {
      for (const candidate of Array.isArray(value) ? value : [value]) {
        if (isAgentDefinition(candidate)) {
          agents.push(candidate);
          found++;
        } else if (isToolDefinition(candidate)) {
          tools.push(candidate);
          found++;
        } else if (isDefinition(candidate)) {
          types.register(candidate);
          found++;
        }
      }
    }
    if (found === 0) {
      throw new ConfigError(
        "actors.module",
        `${path} exports no actor, agent or tool definition: export one made with defineActor({ type, initialState, handlers }), defineAgent({ id, model }) or defineTool({ name, ... })`,
      );
    }
  }
  config.actors.forEach((a, i) => {
    if (!types.has(a.type)) {
      throw new ConfigError(
        `actors[${i}].type`,
        `unknown actor type "${a.type}": known types are ${types.types().join(", ")}; name the module that defines it with module = "./file.js"`,
      );
    }
  });
  config.templates.forEach((t, i) => {
    if (!types.has(t.type)) {
      throw new ConfigError(
        `actor_templates[${i}].type`,
        `unknown actor type "${t.type}": known types are ${types.types().join(", ")}; name the module that defines it with module = "./file.js"`,
      );
    }
  });
  return { agents, tools };
}
