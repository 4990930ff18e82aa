import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express, { type NextFunction, type Request, type Response, type Router } from "express";
import { A2A_VERSION_HEADER, AgentCard } from "@a2a-js/sdk";
import { agentCardHandler, jsonRpcHandler, type UserBuilder } from "@a2a-js/sdk/server/express";
import { isValidId, componentLogger, silentLogger, type Logger, ConfigError } from "../core/index.js";
import { Bus, type NatsSecurity } from "../bus/index.js";
import { AgentRegistry, type AgentRecord } from "../cluster/index.js";
import { KovaA2AHandler, KeyUser, type A2AHandlerDeps } from "./a2a-handler.js";
import { ANONYMOUS, authenticate, mayUse, RateLimiter, resolveAgent } from "./auth.js";
import { limitBodyDepth } from "./body-depth.js";
import { agentCard, directoryCard, type CardOptions } from "./cards.js";
import { requireLoopbackWithoutAuth, type GatewayConfig } from "./config.js";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";
import { KeyRing } from "./keys.js";
import { chatCompletions, listModels } from "./openai.js";
import { RunClient } from "./runs.js";
import { NatsTaskStore } from "./task-store.js";
import { TaskTracker } from "./task-tracker.js";
import { mountWebView, WEB_VIEW_STATIC, webViewHeaders } from "./web.js";
import { mountExperimentsView } from "./web-experiments.js";
import { PrincipalQuotas, type RunTicket } from "./quotas.js";

/** Per-agent routers kept (each is a JSON-RPC handler; rebuilding one is cheap). */
const MAX_AGENT_ROUTERS = 1024;
/** JSON-RPC methods that start a run (A2A v1.0 and v0.3 names): admitted under the key's quotas. */
const SEND_METHODS = new Set(["SendMessage", "SendStreamingMessage", "message/send", "message/stream"]);
/** The run an A2A send was admitted for, until its handler takes it (KeyUser). */
const admittedRuns = new WeakMap<Request, { ticket?: RunTicket | undefined }>();
import type { RunTraceExporter } from "./otel.js";

export interface GatewayOptions {
  config: GatewayConfig;
  /** The cluster's NATS: URLs and the credentials of the gateway's account. */
  servers?: string | string[];
  /** A connection to share (a node serving `[gateway]` passes its own); the gateway does not close it. */
  bus?: Bus;
  cluster: string;
  security?: NatsSecurity;
  /** Replicas of the gateway's buckets (tasks, keys); default 1. */
  replicas?: number;
  logger?: Logger;
}

/**
 * Serves an Agent Card. A v1.0 client (`A2A-Version: 1.0`) gets the card in A2A's JSON
 * form (`AgentCard.toJSON`): the SDK's agentCardHandler writes `JSON.stringify` of its
 * in-memory form, whose oneof fields (`securitySchemes`) come out as `{ $case, value }`
 * and are lost by every client (SDK 1.3.0). v0.3 clients (no header) go through the SDK's
 * handler, which translates the card for them.
 */
function cardRoute(provider: () => Promise<AgentCard>) {
  const legacy = agentCardHandler({ agentCardProvider: provider, legacyCompat: { enabled: true }, cache: { maxAge: 60 } });
  return (req: Request, res: Response, next: NextFunction) => {
    const version = req.header(A2A_VERSION_HEADER);
    if (!version || version.startsWith("0.")) {
      legacy(req, res, next);
      return;
    }
    provider()
      .then((card) => {
        res.setHeader("Cache-Control", "public, max-age=60");
        res.setHeader("Vary", A2A_VERSION_HEADER);
        res.json(AgentCard.toJSON(card));
      })
      .catch(next);
  };
}

/**
 * Kova's HTTP gateway: A2A v1.0 (JSON-RPC through @a2a-js/sdk, v0.3 method names too),
 * an OpenAI-compatible `/v1/chat/completions`, and the web view. It keeps no state of
 * its own: agents come from the registry, tasks and keys live in KV buckets and runs in
 * the EVENTS stream, so any number of replicas serve the same cluster and a restarted one
 * answers for every task. Every endpoint needs an API key unless `auth = "none"` (loopback only).
 */
export class Gateway {
  private closing: Promise<void> | undefined;
  /** Per-agent routers (card + JSON-RPC endpoint), built on first use, oldest dropped past MAX_AGENT_ROUTERS. */
  private readonly agentRouters = new Map<string, Router>();
  private traces: RunTraceExporter | undefined;
  private webView: { stop(): void } | undefined;

  private constructor(
    readonly config: GatewayConfig,
    private readonly bus: Bus,
    private readonly ownBus: boolean,
    private readonly registry: AgentRegistry,
    private readonly keys: KeyRing,
    readonly store: NatsTaskStore,
    private readonly tracker: TaskTracker,
    private readonly runs: RunClient,
    private readonly server: Server,
    private readonly log: Logger,
  ) {
    this.quotas = new PrincipalQuotas(config.quotas, registry);
  }

  private readonly quotas: PrincipalQuotas;

  /**
   * Connects to NATS, opens the registry mirror and the gateway's buckets, and listens.
   * @throws ConfigError for `auth = "none"` on a non-loopback address (before connecting);
   *   NatsUnreachableError; the listen error (EADDRINUSE) naming the address
   */
  static async start(opts: GatewayOptions): Promise<Gateway> {
    requireLoopbackWithoutAuth(opts.config);
    // The bus and the registry bind their own component: they get the caller's logger.
    const scope = opts.logger ?? silentLogger();
    const log = componentLogger(scope, "gateway");
    const ownBus = opts.bus === undefined;
    const bus =
      opts.bus ??
      (await Bus.connect({
        servers: opts.servers ?? "nats://127.0.0.1:4222",
        cluster: opts.cluster,
        name: "kova-gateway",
        logger: scope,
        ...(opts.security ? { security: opts.security } : {}),
      }));
    const opened: Array<{ stop(): void }> = [];
    try {
      const registry = await AgentRegistry.open({ nc: bus.nc, cluster: opts.cluster, logger: scope, ...(opts.replicas ? { replicas: opts.replicas } : {}) });
      opened.push(registry);
      const keys = await KeyRing.open({
        configured: opts.config.keys,
        cluster: opts.cluster,
        logger: log,
        ...(opts.config.auth === "keys" && opts.config.keysBucket ? { nc: bus.nc } : {}),
        ...(opts.replicas ? { replicas: opts.replicas } : {}),
      });
      opened.push(keys);
      const store = await NatsTaskStore.open(bus.nc, opts.cluster, { bus, ...(opts.replicas ? { replicas: opts.replicas } : {}) });
      const runs = new RunClient(bus, registry, log);
      // Watching outlives the run's own timeout a little: its reply or last events still land.
      const tracker = new TaskTracker(runs, store, log, opts.config.taskTimeoutMs + 60_000);
      const server = createServer();
      const gw = new Gateway(opts.config, bus, ownBus, registry, keys, store, tracker, runs, server, log);
      if (opts.config.otel) {
        const { startRunTraceExporter } = await import("./otel.js");
        gw.traces = await startRunTraceExporter(bus, opts.config.otel, log);
      }
      server.on("request", gw.app());
      await new Promise<void>((resolve, reject) => {
        server.once("error", (err) => reject(listenError(err, opts.config.host, opts.config.port)));
        server.listen(opts.config.port, opts.config.host, () => {
          server.removeAllListeners("error");
          resolve();
        });
      });
      log.info({ url: gw.url, auth: opts.config.auth, keys: keys.size }, "gateway listening");
      return gw;
    } catch (err) {
      for (const o of opened) o.stop();
      if (ownBus) await bus.close().catch(() => undefined);
      throw err;
    }
  }

  /** Where the gateway listens (`http://host:port`, the port resolved when 0 was asked). */
  get url(): string {
    const a = this.server.address() as AddressInfo;
    const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
    return `http://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${a.port}`;
  }

  /** The base URL written into Agent Cards. */
  get publicUrl(): string {
    return this.config.publicUrl ?? this.url;
  }

  private cardOptions(): CardOptions {
    return { baseUrl: this.publicUrl, auth: this.config.auth };
  }

  private handlerDeps(card: A2AHandlerDeps["card"]): A2AHandlerDeps {
    return { runs: this.runs, store: this.store, tracker: this.tracker, taskTimeoutMs: this.config.taskTimeoutMs, log: this.log, card };
  }

  private userBuilder: UserBuilder = async (req) => new KeyUser(req.principal ?? ANONYMOUS, this.config.auth === "keys", admittedRuns.get(req));

  private liveAgents() {
    return this.registry.list().filter((r) => r.desired !== "killed");
  }

  private agentRouter(agentId: string): Router {
    let r = this.agentRouters.get(agentId);
    if (r) return r;
    // The SDK asks for the card on every request (to check the protocol version): built
    // again only when the agent's registry record changes.
    let built: { record: AgentRecord; card: AgentCard } | undefined;
    const card = async () => {
      const record = await this.runs.ready(agentId);
      if (built?.record !== record) built = { record, card: agentCard(record, this.cardOptions()) };
      return built.card;
    };
    r = express.Router();
    r.use("/.well-known/agent-card.json", cardRoute(card));
    r.use(
      "/a2a/jsonrpc",
      jsonRpcHandler({ requestHandler: new KovaA2AHandler(this.handlerDeps(card), agentId), userBuilder: this.userBuilder, legacyCompat: { enabled: true } }),
    );
    this.agentRouters.set(agentId, r);
    // Template instances are unbounded in number: keep the most recently built routers only.
    if (this.agentRouters.size > MAX_AGENT_ROUTERS) this.agentRouters.delete(this.agentRouters.keys().next().value!);
    return r;
  }

  private app(): express.Express {
    const app = express();
    app.disable("x-powered-by");
    app.set("etag", false);
    const limiter = new RateLimiter(this.config.ratePerMinute);
    if (this.config.ui) app.use("/ui", webViewHeaders);
    app.use(authenticate({ mode: this.config.auth, keys: this.keys, limiter, ...(this.config.ui ? { staticPaths: WEB_VIEW_STATIC } : {}) }));
    // One parser for every route, with the configured limit: the SDK's own (100 kB) then
    // sees a parsed body and skips.
    app.use(express.json({ limit: this.config.maxBodyBytes, type: ["application/json", "application/*+json"] }));
    app.use(limitBodyDepth());

    app.get("/v1/models", (req, res) => listModels({ registry: this.registry }, req, res));
    app.post("/v1/chat/completions", (req, res, next) => {
      chatCompletions(
        { runs: this.runs, registry: this.registry, tracker: this.tracker, quotas: this.quotas, taskTimeoutMs: this.config.taskTimeoutMs },
        req,
        res,
      ).catch(next);
    });

    app.get("/agents", (req, res) => {
      const base = this.publicUrl;
      const agents = this.liveAgents()
        .filter((r) => mayUse(req.principal, r.id))
        .map((r) => ({
          id: r.id,
          type: r.type,
          capabilities: r.capabilities,
          state: r.state,
          node: r.node,
          card: `${base}/agents/${r.id}/.well-known/agent-card.json`,
        }));
      res.json({ agents });
    });
    app.use("/.well-known/agent-card.json", (req, res, next) => {
      const records = this.liveAgents().filter((r) => req.principal === undefined || mayUse(req.principal, r.id));
      cardRoute(async () => directoryCard(records, this.cardOptions()))(req, res, next);
    });
    const directory = async () => directoryCard(this.liveAgents(), this.cardOptions());
    app.use(
      "/a2a/jsonrpc",
      (req, res, next) => this.admitSend(req, res, next, undefined),
      jsonRpcHandler({ requestHandler: new KovaA2AHandler(this.handlerDeps(directory)), userBuilder: this.userBuilder, legacyCompat: { enabled: true } }),
    );
    app.use("/agents/:agentId", (req, res, next) => {
      try {
        const named = req.params.agentId as string;
        if (!isValidId(named)) throw new GatewayHttpError(404, GatewayErrorCode.BAD_REQUEST, `${JSON.stringify(named)} is not an agent id`);
        // The caller's own instance (`support--user-42` is its `support--<scope>user-42`); another's is 404.
        const agentId = resolveAgent(req.principal, named, this.bus.cluster);
        this.quotas.admitInstance(req.principal, agentId);
        // A template instance is activated here (its card and its endpoint then work).
        this.runs
          .ready(agentId)
          .then(() => this.admitSend(req, res, (err?: unknown) => (err ? next(err) : this.agentRouter(agentId)(req, res, next)), agentId), next);
      } catch (err) {
        next(err);
      }
    });
    if (this.config.ui) {
      this.webView = mountWebView(app, { bus: this.bus, registry: this.registry, log: this.log });
      mountExperimentsView(app, { bus: this.bus, log: this.log });
    }
    app.use((req, _res, next) => next(new GatewayHttpError(404, "NOT_FOUND", `no route ${req.method} ${req.path}: see docs/gateway.md`)));
    app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => this.sendError(err, req, res));
    return app;
  }

  /**
   * Admits an A2A send under the caller's quotas before the JSON-RPC layer, which could
   * only answer 200 with an error: a key past a quota gets HTTP 429 naming it. The
   * admitted run's ticket goes to the handler with the request's user (KeyUser); one the
   * handler never took (the request failed first) is ended when the response closes. On
   * the shared endpoint the agent is the message's `metadata.agent` (a new instance there
   * counts against `max_instances`).
   */
  private admitSend(req: Request, res: Response, next: (err?: unknown) => void, agentId: string | undefined): void {
    const body = req.body as { method?: unknown; params?: { message?: { metadata?: { agent?: unknown } }; metadata?: { agent?: unknown } } } | undefined;
    if (req.method !== "POST" || !SEND_METHODS.has(body?.method as string)) {
      next();
      return;
    }
    try {
      if (agentId === undefined) {
        const named = body?.params?.message?.metadata?.agent ?? body?.params?.metadata?.agent;
        if (isValidId(named)) {
          const resolved = (() => {
            try {
              return resolveAgent(req.principal, named, this.bus.cluster);
            } catch {
              return undefined; // the handler answers it as an unknown agent
            }
          })();
          if (resolved) this.quotas.admitInstance(req.principal, resolved);
        }
      }
      const admitted = { ticket: this.quotas.startRun(req.principal) as RunTicket | undefined };
      admittedRuns.set(req, admitted);
      res.on("close", () => admitted.ticket?.end());
      next();
    } catch (err) {
      next(err);
    }
  }

  private sendError(err: unknown, req: Request, res: Response): void {
    if (res.headersSent) {
      res.end();
      return;
    }
    let status = 500;
    let code: string = "INTERNAL";
    let message = "internal error: the gateway's log has the details";
    let data: unknown;
    const bodyError = err as { type?: string; status?: number; limit?: number };
    if (err instanceof GatewayHttpError) {
      status = err.status;
      code = err.code;
      message = err.message;
      data = err.data;
    } else if (bodyError?.type === "entity.too.large") {
      status = 413;
      code = GatewayErrorCode.BODY_TOO_LARGE;
      message = `the request body is larger than ${this.config.maxBodyBytes} bytes ([gateway] max_body_bytes)`;
    } else if (bodyError?.type === "entity.parse.failed") {
      status = 400;
      code = GatewayErrorCode.BAD_REQUEST;
      message = "the request body is not valid JSON";
    } else if (typeof bodyError?.status === "number" && bodyError.status >= 400 && bodyError.status < 500) {
      status = bodyError.status;
      code = GatewayErrorCode.BAD_REQUEST;
      message = err instanceof Error ? err.message : String(err);
    } else {
      this.log.error({ err, path: req.path }, "request failed");
    }
    if (status === 401) res.setHeader("WWW-Authenticate", 'Bearer realm="kova"');
    if (status === 429) res.setHeader("Retry-After", String((data as { retryAfterS?: number })?.retryAfterS ?? 1));
    // A JSON-RPC caller gets a JSON-RPC error envelope for what it can fix in its request.
    if (req.path.endsWith("/a2a/jsonrpc") && (status === 400 || status === 413)) {
      // A body that parsed but is refused (too deep) is an invalid request, not a parse error.
      const rpcCode = status === 413 || code === GatewayErrorCode.BODY_TOO_DEEP ? -32600 : -32700;
      res.status(status === 400 ? 200 : 413).json({ jsonrpc: "2.0", id: null, error: { code: rpcCode, message } });
      return;
    }
    res.status(status).json({
      error: {
        code,
        message,
        type: status === 401 || status === 403 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error",
        ...(data !== undefined ? { data } : {}),
      },
    });
  }

  /** Stops listening, closes streams in progress, stops watching tasks (they stay saved), disconnects. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const closed = new Promise<void>((r) => this.server.close(() => r()));
      this.server.closeAllConnections();
      await closed;
      await this.tracker.stop();
      await this.traces?.stop();
      this.webView?.stop();
      this.keys.stop();
      this.registry.stop();
      if (this.ownBus) await this.bus.close().catch(() => undefined);
    })();
    return this.closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** The listen failure as a config error naming `[gateway] listen` and what to do. */
function listenError(err: NodeJS.ErrnoException, host: string, port: number): ConfigError {
  const at = `${host}:${port}`;
  const why =
    err.code === "EADDRINUSE"
      ? `${at} is already in use by another process: stop it, or give the gateway another address (or --listen)`
      : err.code === "EACCES"
        ? `${at} may not be bound by this user (ports below 1024 need privileges): pick a port above 1024`
        : err.code === "EADDRNOTAVAIL"
          ? `${host} is not an address of this machine: use 127.0.0.1, 0.0.0.0 or one of its interfaces`
          : `cannot listen on ${at}: ${err.message}`;
  return new ConfigError("gateway.listen", why, { cause: err });
}
