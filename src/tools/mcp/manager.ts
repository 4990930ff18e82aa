import { componentLogger, silentLogger, type Logger } from "../../core/index.js";
import type { Tool } from "../types.js";
import type { McpConfig } from "./config.js";
import { McpUnknownServerError } from "./errors.js";
import { mcpTool } from "./mcp-tool.js";
import { McpServerConnection, type McpConnectionOptions, type McpServerStatus } from "./server-connection.js";

/**
 * What the tool registry needs from a source of tools that can change at run time. The
 * registry keeps `list()` current by re-reading it when a listener fires.
 */
export interface McpToolProvider {
  /** Every tool offered now, named `<server>/<tool>`. */
  list(): Tool[];
  /** Called with the new list whenever a server's tools change (start, list_changed, restart). Returns the unsubscribe function. */
  onChange(listener: (tools: Tool[]) => void): () => void;
  start(): Promise<void>;
  close(): Promise<void>;
}

export interface McpManagerOptions extends McpConnectionOptions {
  /** The cap of one tool result (`[tools] max_result_bytes`): MCP results are cut to it before they leave the tool. */
  maxResultBytes?: number;
}

/**
 * All `[[mcp.servers]]` of a node. `start()` spawns the eager servers; a lazy one starts at
 * first use: `prepare()` with an agent's tool patterns (e.g. `everything/*`), `ensure()` by
 * name, or a call through one of its tools. `close()` stops every server and waits for the
 * stdio processes to exit.
 */
export class McpManager implements McpToolProvider, AsyncDisposable {
  readonly #connections = new Map<string, McpServerConnection>();
  readonly #listeners = new Set<(tools: Tool[]) => void>();
  readonly #log: Logger;
  #tools: Tool[] = [];
  #closing: Promise<void> | undefined;
  readonly #maxResultBytes: number | undefined;

  constructor(config: McpConfig, opts: McpManagerOptions = {}) {
    this.#log = componentLogger(opts.logger ?? silentLogger(), "mcp");
    this.#maxResultBytes = opts.maxResultBytes;
    for (const server of config.servers) {
      const connection = new McpServerConnection(server, opts);
      connection.onToolsChanged(() => this.#rebuild());
      this.#connections.set(server.name, connection);
    }
  }

  /** Names of the configured servers, in config order. */
  get servers(): string[] {
    return [...this.#connections.keys()];
  }

  /**
   * Starts the eager servers and resolves once each is ready or has failed its first attempt
   * (a failed one keeps being retried in the background; `status()` tells). Never rejects.
   */
  async start(): Promise<void> {
    const eager = [...this.#connections.values()].filter((c) => c.config.start === "eager");
    await Promise.all(eager.map((c) => c.start()));
    const down = eager.filter((c) => c.state !== "ready").map((c) => c.name);
    this.#log.info({ ready: eager.length - down.length, down, lazy: this.#connections.size - eager.length }, "MCP servers started");
  }

  /**
   * Starts the named servers if they are idle and waits for their first attempt.
   * @throws McpUnknownServerError for a name no `[[mcp.servers]]` entry defines
   */
  async ensure(names: Iterable<string>): Promise<void> {
    const picked = [...names].map((n) => this.#connections.get(n) ?? this.#unknown(n));
    await Promise.all(picked.map((c) => c.start()));
  }

  /**
   * Starts the servers that an agent's tool patterns name (`everything/*`, `mcp:everything/echo`,
   * `*` in the server part matches any server); names without a `/` are not MCP tools and are
   * skipped. Call before resolving the patterns, so that a lazy server's tools are listed.
   * @throws McpUnknownServerError when a pattern names a server that does not exist
   */
  async prepare(patterns: Iterable<string>): Promise<void> {
    const names = new Set<string>();
    for (const raw of patterns) {
      const pattern = raw.startsWith("mcp:") ? raw.slice(4) : raw;
      const slash = pattern.indexOf("/");
      if (slash <= 0) continue;
      const server = pattern.slice(0, slash);
      if (!server.includes("*")) {
        names.add(server);
        continue;
      }
      const match = new RegExp(`^${server.split("*").map(escapeRegExp).join(".*")}$`);
      for (const n of this.#connections.keys()) if (match.test(n)) names.add(n);
    }
    await this.ensure(names);
  }

  list(): Tool[] {
    return this.#tools;
  }

  onChange(listener: (tools: Tool[]) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** One entry per configured server, in config order. */
  status(): McpServerStatus[] {
    return [...this.#connections.values()].map((c) => c.status());
  }

  /** The connection of one server (for its status or tools), or undefined. */
  server(name: string): McpServerConnection | undefined {
    return this.#connections.get(name);
  }

  /** Stops every server; stdio processes have exited (or been killed) when it resolves. */
  close(): Promise<void> {
    this.#closing ??= Promise.all([...this.#connections.values()].map((c) => c.close())).then(() => undefined);
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #rebuild(): void {
    const tools: Tool[] = [];
    for (const c of this.#connections.values()) {
      const overrides = new Set(c.config.idempotentTools);
      for (const def of c.tools) tools.push(mcpTool(c, def, overrides, this.#maxResultBytes));
    }
    this.#tools = tools;
    for (const listener of this.#listeners) {
      try {
        listener(tools);
      } catch (err) {
        this.#log.error({ err: err instanceof Error ? err.message : String(err) }, "a tool list listener threw");
      }
    }
  }

  #unknown(name: string): never {
    throw new McpUnknownServerError(name, this.servers);
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
