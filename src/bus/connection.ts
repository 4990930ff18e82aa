import { AuthorizationError, connect, UserAuthenticationExpiredError, type NatsConnection } from "@nats-io/transport-node";
import { KovaError, type Logger } from "../core/index.js";
import { NatsUnreachableError, BusErrorCode } from "./errors.js";
import { credentialsFromUrls, redactUrl, redactUrls, securityOptions, type NatsSecurity } from "./nats-security.js";

export interface ConnectionOptions {
  servers: string | string[];
  /** Client name shown in the server's `/connz`. */
  name?: string;
  logger: Logger;
  /** How long the first connection attempt may take (default 5 s). */
  connectTimeoutMs?: number;
  /** Credentials, TLS and the inbox prefix. */
  security?: NatsSecurity;
}

/**
 * nats.js PINGs every `intervalMs` and drops the connection at the tick that finds `maxOut`
 * PINGs unanswered: `maxOut x intervalMs` to `(maxOut + 1) x intervalMs` after the server's
 * last PONG (the nats.js default, 2 minutes x 2, takes 4-6 minutes to notice).
 */
export const CLIENT_PING = { intervalMs: 5_000, maxOut: 2 } as const;

/**
 * Connects once and then reconnects forever: a node must outlive a NATS restart, and
 * nats.js gives up after 10 attempts by default. Every status change is logged, so a
 * flapping link is visible in the node's logs.
 * @throws NatsUnreachableError when the first connection fails (names the URL)
 */
export async function connectNats(opts: ConnectionOptions): Promise<NatsConnection> {
  const given = Array.isArray(opts.servers) ? opts.servers : opts.servers.split(",").map((s) => s.trim());
  const shown = redactUrls(given).join(",");
  const { servers, security } = credentialsFromUrls(given, opts.security);
  let nc: NatsConnection;
  try {
    nc = await connect({
      ...securityOptions(security),
      servers,
      name: opts.name ?? "kova",
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      reconnectJitter: 100,
      timeout: opts.connectTimeoutMs ?? 5_000,
      // A server that stopped answering (hung, frozen, or cut off without a reset) is found
      // by pings: 10-15 s after its last PONG the connection is dropped and the client
      // reconnects, to another server of a cluster if there is one.
      pingInterval: CLIENT_PING.intervalMs,
      maxPingOut: CLIENT_PING.maxOut,
      // nats.js otherwise builds an Error (with a stack) per request in case it fails:
      // ~15 % of a busy bus's CPU. Our errors name the subject instead.
      noAsyncTraces: true,
    });
  } catch (err) {
    throw connectError(err, shown);
  }
  logStatus(nc, opts.logger);
  return nc;
}

/** Connects briefly: "jetstream" when a NATS server with JetStream answers, "no-jetstream", or "none". */
export async function probeNats(url: string, timeoutMs: number): Promise<"jetstream" | "no-jetstream" | "none"> {
  try {
    const nc = await connect({ servers: url, timeout: timeoutMs, reconnect: false, name: "kova-probe" });
    const js = nc.info?.jetstream === true;
    await nc.close();
    return js ? "jetstream" : "no-jetstream";
  } catch {
    return "none";
  }
}

/**
 * The error for a first connection that failed: NATS_AUTH_FAILED when the server refused
 * the credentials, else NatsUnreachableError. `shown` is the redacted server list.
 */
export function connectError(err: unknown, shown: string): KovaError {
  if (err instanceof AuthorizationError || err instanceof UserAuthenticationExpiredError) {
    return new KovaError(
      BusErrorCode.NATS_AUTH_FAILED,
      `NATS at ${shown} refused the credentials (${err.message}): check [nats] user/password_env/token_env/nkey_seed_file/creds_file in kova.toml, or the CLI's --creds/--user flags`,
      { cause: err, data: { servers: shown } },
    );
  }
  return new NatsUnreachableError(shown, { cause: err });
}

function logStatus(nc: NatsConnection, log: Logger): void {
  log.info({ server: redactUrl(nc.getServer()) }, "connected to NATS");
  void (async () => {
    for await (const s of nc.status()) {
      switch (s.type) {
        case "disconnect":
          log.warn({ server: redactUrl(s.server) }, "NATS disconnected; reconnecting");
          break;
        case "reconnect":
          log.info({ server: redactUrl(s.server) }, "NATS reconnected");
          break;
        case "reconnecting":
          log.debug("NATS reconnecting");
          break;
        case "error":
          log.error({ err: s.error }, "NATS connection error");
          break;
        case "ldm":
          log.warn({ server: redactUrl(s.server) }, "NATS server entering lame duck mode");
          break;
        case "staleConnection":
          log.warn("NATS connection stale");
          break;
        case "slowConsumer":
          log.warn({ sub: s.sub.getSubject() }, "NATS slow consumer: messages dropped on a core subscription");
          break;
        case "close":
          log.info("NATS connection closed");
          break;
        default:
          log.trace({ status: s.type }, "NATS status");
      }
    }
  })().catch((err: unknown) => log.debug({ err }, "NATS status loop ended"));
}
