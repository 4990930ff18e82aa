import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { CallToolResult, Tool as McpToolDefinition } from "@modelcontextprotocol/sdk/types.js";
import { ConfigError, KovaError, componentLogger, silentLogger, type Logger, KOVA_VERSION } from "../../core/index.js";
import { ToolDefinitionError } from "../errors.js";
import type { JsonSchema, ToolContext } from "../types.js";
import { compileArgumentSchema } from "../validate.js";
import { Backoff, DEFAULT_RESTART_POLICY, type RestartPolicy } from "./backoff.js";
import type { McpServerConfig } from "./config.js";
import {
  McpCallAbortedError,
  McpCallTimeoutError,
  McpConnectionLostError,
  McpErrorCode,
  McpRequestFailedError,
  McpServerClosedError,
  McpServerUnavailableError,
} from "./errors.js";
import { loadMcpSdk, type McpSdk } from "./sdk.js";
import { createTransport } from "./transport.js";

export type { McpToolDefinition };

/**
 * - `idle`: a lazy server nobody has used yet;
 * - `starting`: spawning / connecting, initializing and listing tools;
 * - `ready`: calls go through;
 * - `restarting`: down (crashed, exited, unreachable), waiting for the next attempt; calls fail fast;
 * - `closed`: stopped for good.
 */
export type McpServerState = "idle" | "starting" | "ready" | "restarting" | "closed";

/** One server's state, for `kova tools ls` and node status. */
export interface McpServerStatus {
  name: string;
  transport: "stdio" | "http";
  start: "eager" | "lazy";
  state: McpServerState;
  /** Tools currently offered (the last list, also while restarting). */
  tools: number;
  /** Tools the server listed that Kova does not offer, with the reason. */
  skippedTools: { name: string; reason: string }[];
  /** Process id of a stdio server while it runs. */
  pid?: number;
  url?: string;
  serverInfo?: { name: string; version: string };
  /** Connection attempts after the first. */
  restarts: number;
  /** Failures since the last healthy period; sets the current backoff. */
  failures: number;
  lastError?: string;
  /** Last line the server wrote to stderr (secrets from `${VAR}` redacted). */
  lastStderr?: string;
  /** Epoch ms of the next attempt while `restarting`. */
  nextAttemptAt?: number;
  /** Epoch ms since which the current connection is up. */
  connectedSince?: number;
}

export interface McpConnectionOptions {
  /** Parent logger; the connection logs through `child({ component: "mcp", server })`. Silent when absent. */
  logger?: Logger;
  /** Where `${VAR}` and `headers_env` values are read at spawn (default process.env). */
  env?: NodeJS.ProcessEnv;
  restart?: Partial<RestartPolicy>;
  /** Bound of connect + initialize + the tool listing of one attempt (default 30 s). */
  connectTimeoutMs?: number;
  /** What the client calls itself in `initialize` (default `kova` and KOVA_VERSION). */
  clientInfo?: { name: string; version: string };
}

/** Stops a listing that never ends (a server handing back cursors forever). */
const MAX_LIST_PAGES = 1000;
/** What an MCP tool name may hold to become `<server>/<tool>` (the spec's SEP-986 alphabet). */
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;
/** Errors of fetch that mean the request never reached the server. */
const NOT_CONNECTED_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

/**
 * The client side of one MCP server: spawns it (stdio) or connects to it (streamable HTTP),
 * lists its tools across all pages, re-lists on `notifications/tools/list_changed`, restarts
 * it with exponential backoff when it crashes or becomes unreachable, and runs calls with a
 * time limit and the caller's AbortSignal. While the server is down calls fail at once with
 * the retryable `MCP_SERVER_UNAVAILABLE` instead of waiting.
 */
export class McpServerConnection {
  readonly name: string;
  readonly config: McpServerConfig;
  readonly #log: Logger;
  readonly #env: NodeJS.ProcessEnv;
  readonly #backoff: Backoff;
  readonly #connectTimeoutMs: number;
  readonly #clientInfo: { name: string; version: string };
  readonly #listeners = new Set<(tools: readonly McpToolDefinition[]) => void>();

  #state: McpServerState;
  /** Bumped on every attempt: events of an older client are ignored. */
  #generation = 0;
  #client: Client | undefined;
  /** Every client not yet closed, including one still connecting, so close() reaches them all. */
  readonly #open = new Set<Client>();
  #attempt: Promise<void> | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;
  #tools: readonly McpToolDefinition[] = [];
  #toolsSignature = "[]";
  #skipped: { name: string; reason: string }[] = [];
  #listing: Promise<void> | undefined;
  #listingClient: Client | undefined;
  #sdk: McpSdk | undefined;
  #listAgain = false;
  #isHttp: boolean;
  #pid: number | undefined;
  #serverInfo: { name: string; version: string } | undefined;
  #connectedAt: number | undefined;
  #restarts = 0;
  #lastError: string | undefined;
  #lastStderr: string | undefined;
  #nextAttemptAt: number | undefined;

  constructor(config: McpServerConfig, opts: McpConnectionOptions = {}) {
    this.name = config.name;
    this.config = config;
    this.#isHttp = config.transport === "http";
    this.#log = componentLogger(opts.logger ?? silentLogger(), "mcp", { server: config.name });
    this.#env = opts.env ?? process.env;
    this.#backoff = new Backoff({ ...DEFAULT_RESTART_POLICY, ...opts.restart });
    this.#connectTimeoutMs = opts.connectTimeoutMs ?? 30_000;
    this.#clientInfo = opts.clientInfo ?? { name: "kova", version: KOVA_VERSION };
    this.#state = "idle";
  }

  get state(): McpServerState {
    return this.#state;
  }

  /** The tools of the last successful listing (kept while the server restarts, so names stay stable). */
  get tools(): readonly McpToolDefinition[] {
    return this.#tools;
  }

  /** Called after every listing that changed the tools (names, schemas, descriptions or annotations). Returns the unsubscribe function. */
  onToolsChanged(listener: (tools: readonly McpToolDefinition[]) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Starts the server if it is idle and resolves when this first attempt has settled: the
   * server is ready, or it failed and is being retried in the background (see `status()`).
   * Never rejects; a no-op once started.
   */
  start(): Promise<void> {
    if (this.#state === "idle") this.#runAttempt();
    return this.#attempt ?? Promise.resolve();
  }

  status(): McpServerStatus {
    const s: McpServerStatus = {
      name: this.name,
      transport: this.config.transport,
      start: this.config.start,
      state: this.#state,
      tools: this.#tools.length,
      skippedTools: [...this.#skipped],
      restarts: this.#restarts,
      failures: this.#backoff.failures,
    };
    if (this.config.transport === "http") s.url = this.config.url;
    if (this.#pid !== undefined && this.#state === "ready") s.pid = this.#pid;
    if (this.#serverInfo) s.serverInfo = { ...this.#serverInfo };
    if (this.#lastError !== undefined) s.lastError = this.#lastError;
    if (this.#lastStderr !== undefined) s.lastStderr = this.#lastStderr;
    if (this.#state === "restarting" && this.#nextAttemptAt !== undefined) s.nextAttemptAt = this.#nextAttemptAt;
    if (this.#state === "ready" && this.#connectedAt !== undefined) s.connectedSince = this.#connectedAt;
    return s;
  }

  /**
   * Calls one of the server's tools. A lazy server is started first; a starting one is
   * waited for (within the call's time limit).
   * @param tool the tool's name as the server lists it
   * @param idempotent whether a call that lost its connection may be retried (sets `retryable`)
   * @throws McpServerUnavailableError (retryable) while the server is down; McpServerClosedError after close;
   *   McpCallTimeoutError past `timeout_ms` or the context's deadline; McpCallAbortedError when `ctx.signal` fires;
   *   McpConnectionLostError when the server went away mid-call; McpRequestFailedError for a protocol-level refusal
   */
  async callTool(tool: string, args: Record<string, unknown>, ctx: Pick<ToolContext, "signal" | "deadline">, idempotent: boolean): Promise<CallToolResult> {
    const full = `${this.name}/${tool}`;
    const key = `${this.config.key}.timeout_ms`;
    const timeoutMs = Math.min(this.config.timeoutMs, ctx.deadline === undefined ? Infinity : Math.floor(ctx.deadline - Date.now()));
    const byDeadline = timeoutMs < this.config.timeoutMs;
    const timeout = () => new McpCallTimeoutError(full, timeoutMs, key, byDeadline);
    if (ctx.signal.aborted) throw new McpCallAbortedError(full, ctx.signal.reason);
    if (timeoutMs <= 0) throw timeout();
    // One controller per call: the SDK adds an abort listener to the signal it is given and
    // never removes it, so it must not be the caller's signal, which may outlive the call.
    const call = new AbortController();
    const onAbort = () => call.abort(new McpCallAbortedError(full, ctx.signal.reason));
    ctx.signal.addEventListener("abort", onAbort, { once: true });
    let generation = this.#generation;
    let remaining = timeoutMs;
    try {
      let client = this.#state === "ready" ? this.#client : undefined;
      if (client === undefined) {
        // Waiting for a (lazy or restarting) server counts against the call's time limit.
        const started = Date.now();
        const timer = setTimeout(() => call.abort(timeout()), timeoutMs);
        try {
          client = await this.#readyClient(call.signal);
        } finally {
          clearTimeout(timer);
        }
        remaining = timeoutMs - (Date.now() - started);
        if (remaining <= 0) throw timeout();
      }
      generation = this.#generation;
      // The SDK's request timer is the call's time limit (one timer per call, not two); when
      // it fires the SDK also sends notifications/cancelled to the server.
      return (await client.callTool({ name: tool, arguments: args }, undefined, { signal: call.signal, timeout: remaining })) as CallToolResult;
    } catch (err) {
      if (call.signal.aborted) throw call.signal.reason;
      if (this.#isRequestTimeout(err, remaining)) throw timeout();
      throw this.#callFailure(full, err, idempotent, generation);
    } finally {
      ctx.signal.removeEventListener("abort", onAbort);
    }
  }

  /** The SDK's own timeout for a request armed with `timeoutMs` (it says so in the error's data). */
  #isRequestTimeout(err: unknown, timeoutMs: number): boolean {
    const types = this.#sdk?.types;
    return (
      types !== undefined &&
      err instanceof types.McpError &&
      err.code === types.ErrorCode.RequestTimeout &&
      (err.data as { timeout?: unknown } | undefined)?.timeout === timeoutMs
    );
  }

  /**
   * Stops the server for good: a stdio server's stdin is closed, then SIGTERM and SIGKILL
   * follow if it lingers (2 s each, the SDK's sequence); an HTTP session is terminated.
   * Calls in flight fail; later calls fail with McpServerClosedError.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#state = "closed";
      clearTimeout(this.#retryTimer);
      this.#client = undefined;
      await Promise.all([...this.#open].map((c) => this.#shutdown(c)));
      this.#log.debug("closed");
    })();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #runAttempt(): void {
    const generation = ++this.#generation;
    this.#state = "starting";
    this.#attempt = this.#connect(generation).finally(() => {
      if (this.#generation === generation) this.#attempt = undefined;
    });
  }

  async #connect(generation: number): Promise<void> {
    let client: Client | undefined;
    try {
      const sdk = await loadMcpSdk();
      this.#sdk = sdk;
      if (this.#closing) return;
      client = new sdk.Client(this.#clientInfo, { capabilities: {} });
      const c = client;
      this.#open.add(c);
      // Set before connecting: a server may announce a change right after initialization.
      c.setNotificationHandler(sdk.types.ToolListChangedNotificationSchema, () => {
        if (this.#generation === generation && !this.#closing)
          this.#refreshTools(c).catch((err: unknown) => this.#log.warn({ err: message(err) }, "re-listing tools after list_changed failed"));
      });
      c.onclose = () => this.#onClosed(c, generation);
      c.onerror = (err) => this.#log.debug({ err: message(err) }, "transport error");
      const transport = createTransport(sdk, this.config, this.#env, this.#log, (line) => {
        this.#lastStderr = line;
        this.#log.info({ stream: "stderr" }, line);
      });
      await c.connect(transport, { timeout: this.#connectTimeoutMs });
      this.#pid = transport instanceof sdk.StdioClientTransport ? (transport.pid ?? undefined) : undefined;
      if (this.#closing) return;
      const info = c.getServerVersion();
      this.#serverInfo = info ? { name: info.name, version: info.version } : undefined;
      if (c.getServerCapabilities()?.tools !== undefined) await this.#refreshTools(c);
      else this.#setTools([], []);
      if (this.#closing || this.#generation !== generation) return;
      this.#client = c;
      this.#state = "ready";
      this.#connectedAt = Date.now();
      this.#lastError = undefined;
      this.#log.info({ tools: this.#tools.length, pid: this.#pid, serverInfo: this.#serverInfo, attempt: this.#restarts + 1 }, "MCP server ready");
    } catch (err) {
      if (client) await this.#shutdown(client);
      if (this.#closing || this.#generation !== generation) return;
      this.#scheduleRetry(err instanceof ConfigError ? err.message : `start failed: ${this.#describe(err)}`, 0);
    }
  }

  #onClosed(client: Client, generation: number): void {
    this.#open.delete(client);
    // Failures before `ready` surface as a rejected connect or listing in #connect.
    if (this.#closing || this.#generation !== generation || this.#state !== "ready") return;
    this.#dropConnection(this.#isHttp ? "the HTTP connection closed" : "the server process exited");
  }

  #dropConnection(reason: string): void {
    const client = this.#client;
    const upFor = this.#connectedAt === undefined ? 0 : Date.now() - this.#connectedAt;
    this.#client = undefined;
    this.#generation++;
    if (client) void this.#shutdown(client);
    this.#scheduleRetry(reason, upFor);
  }

  #scheduleRetry(reason: string, upForMs: number): void {
    const delay = this.#backoff.next(upForMs);
    this.#lastError = reason;
    this.#state = "restarting";
    this.#pid = undefined;
    this.#nextAttemptAt = Date.now() + delay;
    this.#log.warn(
      { reason, retryInMs: delay, failures: this.#backoff.failures, lastStderr: this.#lastStderr },
      "MCP server down; restarting it after the delay",
    );
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#closing) return;
      this.#restarts++;
      this.#runAttempt();
    }, delay);
    // A pending restart alone must not keep a process alive that has nothing else to do.
    this.#retryTimer.unref();
  }

  async #readyClient(signal: AbortSignal): Promise<Client> {
    if (this.#state === "idle") this.#runAttempt();
    if (this.#state === "starting" && this.#attempt) await untilAborted(this.#attempt, signal);
    if (this.#client && this.#state === "ready") return this.#client;
    if (this.#closing) throw new McpServerClosedError(this.name);
    const wait = this.#nextAttemptAt === undefined ? "" : `; next attempt in ${Math.max(0, Math.ceil((this.#nextAttemptAt - Date.now()) / 100) / 10)} s`;
    throw new McpServerUnavailableError(this.name, `${this.#lastError ?? "not connected"}${wait}`, {
      data: { state: this.#state, nextAttemptAt: this.#nextAttemptAt },
    });
  }

  /** Maps a failed call; a failed HTTP request also takes the connection down so that it is rebuilt. */
  #callFailure(tool: string, err: unknown, idempotent: boolean, generation: number): Error {
    if (err instanceof McpServerUnavailableError || err instanceof McpServerClosedError) return err;
    const sdk = this.#sdk!;
    if (err instanceof sdk.types.McpError) {
      // ConnectionClosed: the connection ended with the request in flight (a stdio server died).
      if (err.code === sdk.types.ErrorCode.ConnectionClosed) return new McpConnectionLostError(tool, idempotent, { cause: err });
      return new McpRequestFailedError(tool, err.code, err.message, { cause: err });
    }
    if (this.#closing) return new McpServerClosedError(this.name);
    const httpStatus = err instanceof sdk.StreamableHTTPError;
    if (this.#isHttp && (httpStatus || err instanceof TypeError)) {
      const reason = `HTTP request failed: ${this.#describe(err)}`;
      if (this.#generation === generation && this.#state === "ready") this.#dropConnection(reason);
      // An HTTP error status means the server answered without running the call; a refused
      // connection means it never saw it. Anything else may have cut a running call short.
      const notSent = httpStatus || NOT_CONNECTED_CODES.has(String((err.cause as { code?: unknown } | undefined)?.code));
      return notSent ? new McpServerUnavailableError(this.name, reason, { cause: err }) : new McpConnectionLostError(tool, idempotent, { cause: err });
    }
    // The answer arrived but does not fit the protocol (the SDK's result schema refused it).
    return new McpRequestFailedError(tool, undefined, message(err), { cause: err });
  }

  /** The error's message, with the HTTP status when the SDK keeps it apart from the message. */
  #describe(err: unknown): string {
    const sdk = this.#sdk;
    return sdk && err instanceof sdk.StreamableHTTPError && err.code !== undefined && err.code > 0 ? `HTTP status ${err.code}: ${err.message}` : message(err);
  }

  /** Lists all pages; a list_changed during a listing makes it list again once it is done. */
  #refreshTools(client: Client): Promise<void> {
    if (this.#listing && this.#listingClient === client) {
      this.#listAgain = true;
      return this.#listing;
    }
    const previous = this.#listing;
    this.#listingClient = client;
    this.#listing = (async () => {
      // A listing of an older client ends once that client is closed; never run two at once.
      await previous?.catch(() => undefined);
      try {
        do {
          this.#listAgain = false;
          await this.#listAll(client);
        } while (this.#listAgain && !this.#closing);
      } finally {
        if (this.#listingClient === client) {
          this.#listing = undefined;
          this.#listingClient = undefined;
        }
      }
    })();
    return this.#listing;
  }

  async #listAll(client: Client): Promise<void> {
    const all: McpToolDefinition[] = [];
    const cursors = new Set<string>();
    let cursor: string | undefined;
    for (let page = 0; ; page++) {
      if (page >= MAX_LIST_PAGES) throw new KovaError(McpErrorCode.MCP_SERVER_UNAVAILABLE, `tools/list returned more than ${MAX_LIST_PAGES} pages`);
      const result = await client.listTools(cursor === undefined ? undefined : { cursor }, { timeout: this.#connectTimeoutMs });
      all.push(...result.tools);
      cursor = result.nextCursor;
      if (cursor === undefined) break;
      if (cursors.has(cursor)) throw new KovaError(McpErrorCode.MCP_SERVER_UNAVAILABLE, `tools/list returned cursor ${JSON.stringify(cursor)} twice`);
      cursors.add(cursor);
    }
    const kept: McpToolDefinition[] = [];
    const skipped: { name: string; reason: string }[] = [];
    const seen = new Set<string>();
    for (const t of all) {
      const reason = !TOOL_NAME.test(t.name)
        ? "name outside [A-Za-z0-9_.-]{1,128}"
        : seen.has(t.name)
          ? "listed twice"
          : t.execution?.taskSupport === "required"
            ? "needs task-based execution, which Kova does not use"
            : this.#schemaProblem(t);
      seen.add(t.name);
      if (reason === undefined) kept.push(t);
      else skipped.push({ name: t.name, reason });
    }
    const warned = new Set(this.#skipped.map((s) => s.name));
    for (const s of skipped) if (!warned.has(s.name)) this.#log.warn({ tool: s.name, reason: s.reason }, "tool not offered");
    const unknown = this.config.idempotentTools.filter((n) => !seen.has(n));
    if (unknown.length > 0)
      this.#log.warn({ tools: unknown, key: `${this.config.key}.idempotent_tools` }, "idempotent_tools names tools the server does not list");
    this.#setTools(kept, skipped);
  }

  /**
   * Why a tool's input schema cannot validate arguments, or undefined. Offered anyway, its
   * first call would fail the calling run (a broken tool, not a model error, so no repair
   * turn): a server must not be able to do that, so such a tool is not offered. The schema
   * is compiled here once; its tool's calls reuse the compiled validator (same object).
   */
  #schemaProblem(t: McpToolDefinition): string | undefined {
    try {
      compileArgumentSchema(`${this.name}/${t.name}`, t.inputSchema as JsonSchema);
      return undefined;
    } catch (err) {
      const cause = err instanceof ToolDefinitionError ? (err.cause as Error | undefined) : undefined;
      return `inputSchema is not a valid JSON Schema: ${message(cause ?? err)}`;
    }
  }

  #setTools(tools: McpToolDefinition[], skipped: { name: string; reason: string }[]): void {
    this.#skipped = skipped;
    const signature = JSON.stringify(tools);
    if (signature === this.#toolsSignature) return;
    this.#tools = Object.freeze(tools);
    this.#toolsSignature = signature;
    this.#log.debug({ tools: tools.map((t) => t.name) }, "tool list changed");
    for (const listener of this.#listeners) {
      try {
        listener(this.#tools);
      } catch (err) {
        this.#log.error({ err: message(err) }, "a tools listener threw");
      }
    }
  }

  async #shutdown(client: Client): Promise<void> {
    this.#open.delete(client);
    try {
      if (this.#isHttp) {
        const transport = client.transport as { terminateSession?: () => Promise<void>; sessionId?: string } | undefined;
        if (transport?.sessionId !== undefined && transport.terminateSession) await withTimeout(transport.terminateSession(), 2000);
      }
      await client.close();
    } catch (err) {
      this.#log.debug({ err: message(err) }, "error while closing the client");
    }
  }
}

function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

async function withTimeout(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]).finally(() => clearTimeout(timer));
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
