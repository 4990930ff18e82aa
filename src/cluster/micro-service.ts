import { headers as natsHeaders, nuid, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { ConfigError, errorKindOf, isKovaError, toWire, type ErrorKind, componentLogger, silentLogger, type Logger } from "../core/index.js";

/**
 * A NATS micro service (ADR-32, `$SRV` protocol v1) written directly on a
 * NatsConnection: `@nats-io/services` only has pre-releases, and the protocol is three
 * JSON documents on nine subjects. The shapes below are the ones the `nats micro`
 * commands validate against (jsm.go `schemas/micro/v1/*_response.json`), so a node shows
 * up in `nats micro ls/info/stats` like a service written with an official library.
 */

/** Response type names of the micro protocol v1 (the `type` field of every reply). */
export const MicroResponseType = {
  PING: "io.nats.micro.v1.ping_response",
  INFO: "io.nats.micro.v1.info_response",
  STATS: "io.nats.micro.v1.stats_response",
} as const;

/** Header names a failing endpoint sets on its reply (same as every NATS micro library). */
export const SERVICE_ERROR_HEADER = "Nats-Service-Error";
export const SERVICE_ERROR_CODE_HEADER = "Nats-Service-Error-Code";

/** Queue group of endpoints unless configured: the default of the official libraries. */
export const DEFAULT_QUEUE_GROUP = "q";

export interface MicroEndpoint {
  /** Endpoint name, `[A-Za-z0-9_-]+`. */
  name: string;
  /** Subject the endpoint listens on (may contain wildcards). */
  subject: string;
  metadata?: Record<string, string>;
  /** Overrides the service's queue group for this endpoint. */
  queueGroup?: string;
  /**
   * Handles one request. The resolved value is the reply: a Uint8Array is sent as is,
   * anything else JSON-encoded (`undefined` becomes `null`). A rejection replies with the
   * `Nats-Service-Error*` headers and a JSON body `{ code, message, retryable, data }`.
   */
  handler: (data: Uint8Array, headers?: MsgHdrs) => Promise<unknown>;
  /** Custom statistics, the endpoint's `data` in `$SRV.STATS` (what the official libraries' stats handler gives). */
  stats?: () => unknown;
}

export interface MicroServiceOptions {
  /** Service name shared by all instances, `[A-Za-z0-9_-]+` (e.g. `kova-node`). */
  name: string;
  /** Semantic version, e.g. `1.2.3` (a node gives KOVA_VERSION). */
  version: string;
  description?: string;
  metadata?: Record<string, string>;
  /** Queue group for the endpoints (default `q`); `$SRV` subjects never use one. */
  queueGroup?: string;
  endpoints: MicroEndpoint[];
  /** Where its lines go; none: it writes nothing (a library stays quiet inside someone else's service). */
  logger?: Logger;
  /**
   * Whether a request's reply subject may be answered; a request refused here is dropped
   * before its handler runs (a Kova node passes its bus's ReplyGuard). Default: any.
   */
  acceptsReply?: (reply: string, subject: string) => boolean;
}

export interface MicroService {
  /** This instance's id (a NUID), the last token of `$SRV.<VERB>.<name>.<id>`. */
  readonly id: string;
  /** Unsubscribes everything and waits for requests being handled. Idempotent. */
  stop(): Promise<void>;
}

interface EndpointInfo {
  name: string;
  subject: string;
  queue_group: string;
  metadata: Record<string, string>;
}

interface EndpointStats {
  name: string;
  subject: string;
  queue_group: string;
  num_requests: number;
  num_errors: number;
  last_error: string;
  /** Total handler time, nanoseconds. */
  processing_time: number;
  /** processing_time / num_requests, nanoseconds (integer). */
  average_processing_time: number;
  data?: unknown;
}

interface EndpointState {
  info: EndpointInfo;
  numRequests: number;
  numErrors: number;
  lastError: string;
  processingNs: bigint;
  stats?: () => unknown;
}

const NAME_PATTERN = /^[A-Za-z0-9_-]+$/;
// The semver pattern of the micro schemas: `nats micro` rejects a service whose version does not match it.
const SEMVER_PATTERN =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;

const encoder = new TextEncoder();

/**
 * Starts a micro service: subscribes `$SRV.PING|INFO|STATS` at the three levels (all,
 * by name, by name and id) without a queue group, so that every instance answers a
 * discovery request, and each endpoint with its queue group.
 *
 * @throws ConfigError when the name, version, an endpoint name, subject or queue group is invalid
 *   (checked before anything is subscribed).
 */
export async function startMicroService(nc: NatsConnection, options: MicroServiceOptions): Promise<MicroService> {
  validate(options);
  const log = componentLogger(options.logger ?? silentLogger(), "micro-service", { service: options.name });
  const id = nuid.next();
  const started = new Date().toISOString();
  const metadata = { ...(options.metadata ?? {}) };
  const serviceQueue = options.queueGroup ?? DEFAULT_QUEUE_GROUP;
  const endpoints: EndpointState[] = options.endpoints.map((e) => ({
    info: { name: e.name, subject: e.subject, queue_group: e.queueGroup ?? serviceQueue, metadata: { ...(e.metadata ?? {}) } },
    numRequests: 0,
    numErrors: 0,
    lastError: "",
    processingNs: 0n,
    ...(e.stats ? { stats: e.stats } : {}),
  }));

  const identity = () => ({ name: options.name, id, version: options.version, metadata });
  const ping = JSON.stringify({ type: MicroResponseType.PING, ...identity() });
  const info = () =>
    JSON.stringify({
      type: MicroResponseType.INFO,
      ...identity(),
      description: options.description ?? "",
      endpoints: endpoints.map((e) => e.info),
    });
  const stats = () =>
    JSON.stringify({
      type: MicroResponseType.STATS,
      ...identity(),
      started,
      endpoints: endpoints.map(endpointStats),
    });

  const acceptsReply = options.acceptsReply ?? (() => true);
  const subs: Subscription[] = [];
  const inFlight = new Set<Promise<void>>();
  const control: Array<[string, () => string]> = [
    ["PING", () => ping],
    ["INFO", info],
    ["STATS", stats],
  ];
  for (const [verb, body] of control) {
    for (const subject of [`$SRV.${verb}`, `$SRV.${verb}.${options.name}`, `$SRV.${verb}.${options.name}.${id}`]) {
      subs.push(
        nc.subscribe(subject, {
          callback: (err, msg) => {
            if (!err && msg.reply && acceptsReply(msg.reply, msg.subject)) respond(msg, body(), log);
          },
        }),
      );
    }
  }
  options.endpoints.forEach((endpoint, i) => {
    const state = endpoints[i]!;
    subs.push(
      nc.subscribe(endpoint.subject, {
        queue: state.info.queue_group,
        callback: (err, msg) => {
          if (err) {
            log.warn({ err, subject: endpoint.subject }, "endpoint subscription error");
            return;
          }
          if (msg.reply && !acceptsReply(msg.reply, msg.subject)) return;
          // A reply that cannot be sent (connection closing) must not become an unhandled rejection.
          const p = handle(endpoint, state, msg, log)
            .catch((e: unknown) => log.warn({ err: e, endpoint: endpoint.name }, "could not reply"))
            .finally(() => inFlight.delete(p));
          inFlight.add(p);
        },
      }),
    );
  });
  // The subscriptions are registered with the server on the next flush; a caller that
  // announces the service right after this resolves must already be reachable.
  await nc.flush();
  log.info({ id, endpoints: endpoints.map((e) => e.info.subject) }, "micro service started");

  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      if (!nc.isClosed()) {
        await Promise.allSettled(subs.map((s) => s.drain()));
      } else {
        for (const s of subs) s.unsubscribe();
      }
      await Promise.allSettled([...inFlight]);
      log.info({ id }, "micro service stopped");
    })();
    return stopped;
  };
  return { id, stop };
}

function respond(msg: Msg, body: string, log: Logger): void {
  try {
    msg.respond(body);
  } catch (err) {
    log.warn({ err, subject: msg.subject }, "could not answer a $SRV request");
  }
}

async function handle(endpoint: MicroEndpoint, state: EndpointState, msg: Msg, log: Logger): Promise<void> {
  const start = process.hrtime.bigint();
  state.numRequests++;
  let reply: Uint8Array;
  try {
    const result = await endpoint.handler(msg.data, msg.headers);
    // Encoding is part of the request: a result that cannot be JSON (BigInt, cycles) is an error reply.
    reply = result instanceof Uint8Array ? result : encoder.encode(JSON.stringify(result ?? null));
  } catch (err) {
    state.processingNs += process.hrtime.bigint() - start;
    replyError(err, endpoint, state, msg, log);
    return;
  }
  state.processingNs += process.hrtime.bigint() - start;
  if (msg.reply) msg.respond(reply);
}

function replyError(err: unknown, endpoint: MicroEndpoint, state: EndpointState, msg: Msg, log: Logger): void {
  const wire = toWire(err);
  const status = statusFor(err);
  state.numErrors++;
  // Same form as the Go micro library's `code:description`, which `nats micro stats` prints.
  state.lastError = `${status}:${wire.message}`;
  log.debug({ err, endpoint: endpoint.name }, "endpoint handler failed");
  if (!msg.reply) return;
  const h = natsHeaders();
  // Header values cannot carry line breaks; the body keeps the full message.
  h.set(SERVICE_ERROR_HEADER, wire.message.replace(/[\r\n]+/g, " "));
  h.set(SERVICE_ERROR_CODE_HEADER, String(status));
  let body: string;
  try {
    body = JSON.stringify(wire);
  } catch {
    body = JSON.stringify({ code: wire.code, message: wire.message, retryable: wire.retryable }); // data not JSON-able
  }
  msg.respond(encoder.encode(body), { headers: h });
}

/**
 * An HTTP-like status for `Nats-Service-Error-Code`, from the kind the code's layer gave it
 * (core's classifyErrorCodes): 400 bad input, 404 not found, 503 unavailable, 504 timeout, else 500.
 */
const STATUS_OF_KIND: Record<ErrorKind, number> = { bad_input: 400, not_found: 404, unavailable: 503, timeout: 504 };

function statusFor(err: unknown): number {
  const kind = isKovaError(err) ? errorKindOf(err.code) : undefined;
  return kind === undefined ? 500 : STATUS_OF_KIND[kind];
}

function endpointStats(e: EndpointState): EndpointStats {
  const total = Number(e.processingNs);
  return {
    name: e.info.name,
    subject: e.info.subject,
    queue_group: e.info.queue_group,
    num_requests: e.numRequests,
    num_errors: e.numErrors,
    last_error: e.lastError,
    processing_time: total,
    average_processing_time: e.numRequests === 0 ? 0 : Math.round(total / e.numRequests),
    ...(e.stats ? { data: e.stats() } : {}),
  };
}

function validate(o: MicroServiceOptions): void {
  if (!NAME_PATTERN.test(o.name ?? "")) {
    throw new ConfigError("service.name", `${JSON.stringify(o.name)} must be 1+ characters from [A-Za-z0-9_-]`);
  }
  if (!SEMVER_PATTERN.test(o.version ?? "")) {
    throw new ConfigError("service.version", `${JSON.stringify(o.version)} is not a semantic version such as 1.0.0`);
  }
  if (o.queueGroup !== undefined && !NAME_PATTERN.test(o.queueGroup)) {
    throw new ConfigError("service.queueGroup", `${JSON.stringify(o.queueGroup)} must be 1+ characters from [A-Za-z0-9_-]`);
  }
  const seen = new Set<string>();
  o.endpoints.forEach((e, i) => {
    const key = `service.endpoints[${i}]`;
    if (!NAME_PATTERN.test(e.name ?? "")) {
      throw new ConfigError(`${key}.name`, `${JSON.stringify(e.name)} must be 1+ characters from [A-Za-z0-9_-]`);
    }
    if (seen.has(e.name)) throw new ConfigError(`${key}.name`, `duplicate endpoint name ${JSON.stringify(e.name)}`);
    seen.add(e.name);
    if (!validSubject(e.subject)) {
      throw new ConfigError(`${key}.subject`, `${JSON.stringify(e.subject)} is not a valid subject (non-empty tokens, no spaces, '>' only last)`);
    }
    if (e.queueGroup !== undefined && !NAME_PATTERN.test(e.queueGroup)) {
      throw new ConfigError(`${key}.queueGroup`, `${JSON.stringify(e.queueGroup)} must be 1+ characters from [A-Za-z0-9_-]`);
    }
  });
}

function validSubject(subject: unknown): boolean {
  if (typeof subject !== "string" || subject === "" || /\s/.test(subject)) return false;
  const tokens = subject.split(".");
  return tokens.every((t, i) => t !== "" && (t !== ">" || i === tokens.length - 1));
}
