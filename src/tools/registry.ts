import { ConfigError, type Logger, closeMatches, componentLogger } from "../core/index.js";
import { ToolDefinitionError, ToolNameConflictError } from "./errors.js";
import { idempotencyClass, type IdempotencyClass } from "./idempotency.js";
import { isValidToolName, parseToolPattern, TOOL_NAME_RULE, type ToolPattern } from "./names.js";
import { ToolSet } from "./tool-set.js";
import type { JsonSchema, Tool } from "./types.js";

/**
 * A source of tools whose list can change: an MCP server (tools named `<server>/<tool>`),
 * the agents offered as tools (`agent:<id>`). The registry asks `list()` whenever it
 * resolves, so a provider only has to keep its current list and say when it changed.
 */
export interface ToolProvider {
  /**
   * The part before `/` of its tools' names (the MCP server's name). A pattern such as
   * `everything/*` is then valid even while the server is starting and lists nothing yet.
   */
  readonly namespace?: string;
  list(): readonly Tool[];
  /** Subscribes to changes of `list()` (MCP `tools/list_changed`); returns the unsubscribe. */
  onChange?(listener: () => void): () => void;
}

/** One line of `kova tools ls`. */
export interface ToolDescription {
  name: string;
  description: string;
  parameters: JsonSchema;
  idempotency: IdempotencyClass;
  requiresApproval: boolean;
  /** `code` for tools registered directly, else the provider's name. */
  source: string;
}

/**
 * Every tool a node knows: defined in code, built-in, and from providers. Agents resolve
 * their `tools` lists against it; a tool registered directly wins over a provider's tool of
 * the same name (the clash is logged once).
 */
export class ToolRegistry {
  readonly #tools = new Map<string, Tool>();
  readonly #providers = new Map<string, { provider: ToolProvider; unsubscribe?: () => void }>();
  readonly #listeners = new Set<() => void>();
  readonly #warned = new Set<string>();
  readonly #logger: Logger | undefined;

  constructor(options: { logger?: Logger } = {}) {
    this.#logger = options.logger && componentLogger(options.logger, "tools");
  }

  /**
   * Adds tools defined in code or built in.
   * @throws ToolDefinitionError for an invalid name; ToolNameConflictError for a name already registered
   */
  register(...tools: Tool[]): this {
    for (const t of tools) {
      if (!isValidToolName(t.name)) throw new ToolDefinitionError(String(t.name), `invalid name: ${TOOL_NAME_RULE}`);
      if (this.#tools.has(t.name)) throw new ToolNameConflictError(t.name);
    }
    for (const t of tools) this.#tools.set(t.name, t);
    this.#changed();
    return this;
  }

  /**
   * Adds a provider under a name (shown as the tools' source).
   * @returns a function that removes it again
   * @throws ToolNameConflictError when a provider of that name is already added
   */
  addProvider(name: string, provider: ToolProvider): () => void {
    if (this.#providers.has(name)) throw new ToolNameConflictError(name);
    const entry: { provider: ToolProvider; unsubscribe?: () => void } = { provider };
    this.#providers.set(name, entry);
    if (provider.onChange) entry.unsubscribe = provider.onChange(() => this.#changed());
    this.#changed();
    return () => {
      if (this.#providers.get(name) !== entry) return;
      this.#providers.delete(name);
      entry.unsubscribe?.();
      this.#changed();
    };
  }

  /** Called (synchronously, after the change) whenever tools are added or a provider's list changes. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get(name: string): Tool | undefined {
    return this.#snapshot().get(name)?.tool;
  }

  /** Every tool known now, directly registered ones first. */
  list(): Tool[] {
    return [...this.#snapshot().values()].map((e) => e.tool);
  }

  /**
   * Resolves an agent's `tools` list: exact names, wildcards (`everything/*`, `agent:*`) and
   * the `mcp:` prefix as written in kova.toml. Duplicates collapse; order follows the list.
   * A pattern in a provider's namespace that matches nothing yet is not an error (the MCP
   * server may still be starting): resolve again when `onChange` fires.
   * @param key the config key of the list, for errors (`agents[0].tools`)
   * @throws ConfigError naming the entry (`agents[0].tools[1]`) with close matches
   */
  resolve(patterns: readonly string[], key = "tools"): ToolSet {
    const snapshot = this.#snapshot();
    const namespaces = this.#namespaces();
    const found = new Map<string, Tool>();
    patterns.forEach((written, i) => {
      const entryKey = `${key}[${i}]`;
      const pattern = parseToolPattern(written);
      if (!pattern) {
        throw new ConfigError(
          entryKey,
          `${JSON.stringify(written)} is not a tool name or pattern: ${TOOL_NAME_RULE}; "*" matches any part of a name, and "mcp:" may prefix <server>/<tool>`,
        );
      }
      const matched = [...snapshot.values()].filter((e) => pattern.matches(e.tool.name));
      if (matched.length === 0 && !(pattern.namespace !== undefined && namespaces.has(pattern.namespace))) {
        throw new ConfigError(entryKey, this.#unknownMessage(pattern, snapshot, namespaces));
      }
      for (const e of matched) if (!found.has(e.tool.name)) found.set(e.tool.name, e.tool);
    });
    return new ToolSet([...found.values()]);
  }

  /**
   * What `kova tools ls` prints: every tool, or those an agent's list resolves to.
   * @throws ConfigError as `resolve` does
   */
  describe(patterns?: readonly string[], key?: string): ToolDescription[] {
    const snapshot = this.#snapshot();
    const tools = patterns ? this.resolve(patterns, key).tools : [...snapshot.values()].map((e) => e.tool);
    return tools.map((t) => ({
      name: t.name,
      description: t.description,
      parameters: t.parameters,
      idempotency: idempotencyClass(t),
      requiresApproval: t.requiresApproval === true,
      source: snapshot.get(t.name)?.source ?? "code",
    }));
  }

  #unknownMessage(pattern: ToolPattern, snapshot: Map<string, { tool: Tool }>, namespaces: Set<string>): string {
    const written = JSON.stringify(pattern.written);
    if (pattern.wildcard) {
      const servers = [...namespaces].sort();
      return (
        `${written} matches no tool` +
        (pattern.namespace !== undefined ? ` and no MCP server is named ${JSON.stringify(pattern.namespace)}` : "") +
        `; known servers: ${servers.join(", ") || "(none)"}`
      );
    }
    const near = closeMatches(pattern.name, snapshot.keys());
    const hint =
      near.length > 0
        ? `did you mean ${near.map((n) => JSON.stringify(n)).join(", ")}?`
        : `known tools: ${[...snapshot.keys()].slice(0, 20).join(", ") || "(none)"}`;
    return `unknown tool ${written}: ${hint} (built-ins are enabled by their [tools.*] table; MCP tools are named <server>/<tool>)`;
  }

  #namespaces(): Set<string> {
    const out = new Set<string>();
    for (const { provider } of this.#providers.values()) if (provider.namespace) out.add(provider.namespace);
    return out;
  }

  #snapshot(): Map<string, { tool: Tool; source: string }> {
    const out = new Map<string, { tool: Tool; source: string }>();
    for (const t of this.#tools.values()) out.set(t.name, { tool: t, source: "code" });
    for (const [source, { provider }] of this.#providers) {
      for (const t of provider.list()) {
        if (!isValidToolName(t.name)) {
          this.#warnOnce(`invalid:${source}:${t.name}`, { tool: t.name, source }, "provider offers a tool with an invalid name; it is left out");
        } else if (out.has(t.name)) {
          this.#warnOnce(
            `clash:${source}:${t.name}`,
            { tool: t.name, source, kept: out.get(t.name)!.source },
            "tool name taken by another source; this one is left out",
          );
        } else {
          out.set(t.name, { tool: t, source });
        }
      }
    }
    return out;
  }

  #warnOnce(key: string, fields: Record<string, unknown>, msg: string): void {
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.#logger?.warn(fields, msg);
  }

  #changed(): void {
    for (const l of this.#listeners) l();
  }
}
