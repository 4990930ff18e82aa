import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { KovaError, sleep, componentLogger, silentLogger, type Logger } from "../../core/index.js";
import { findNatsServerBinary, launchNatsServer, type NatsServerProcess } from "./launcher.js";
import { BusErrorCode, probeNats, redactUrls, type NatsConnection } from "../../bus/index.js";

/**
 * How a node finds NATS, in order:
 * 1. `NATS_URL` (comma-separated list allowed) — the operator said so;
 * 2. the URLs of `[nats] urls` in kova.toml;
 * 3. a JetStream-enabled server already answering on 127.0.0.1:4222 (a dev machine
 *    with `nats-server -js` running, or the apt package's service);
 * 4. a nats-server from PATH, started on a free loopback port with its JetStream store
 *    under `<dataDir>/nats`, so that the same data dir finds the same store after a
 *    restart of the node.
 * The choice is logged, because "which server am I on" is the first question when
 * messages seem to vanish.
 */
export type NatsSource = "env" | "config" | "local-4222" | "started";

export interface ResolveNatsOptions {
  /** `[nats] urls` from the node config. */
  configuredUrls?: string[];
  /** The node's data directory; a server we start keeps its store in `<dataDir>/nats`. */
  dataDir: string;
  /** Where its lines go; none: it writes nothing (a library stays quiet inside someone else's service). */
  logger?: Logger;
  /** Probe `defaultUrl` before starting a server (default true). */
  probeDefault?: boolean;
  /** The well-known local server to probe (default `nats://127.0.0.1:4222`); tests point it elsewhere. */
  defaultUrl?: string;
  /** How long the probe may take (default 500 ms). */
  probeTimeoutMs?: number;
}

export interface ResolvedNats {
  urls: string[];
  source: NatsSource;
  /** Stops the server if this node started it (no-op otherwise). Idempotent. */
  stop(): Promise<void>;
}

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

const INSTALL_HELP =
  "Install nats-server: `sudo apt-get install nats-server` (Debian/Ubuntu), `brew install nats-server` (macOS), " +
  "or run it with Docker: `docker run -d -p 4222:4222 nats:2.12 -js`. " +
  "Or point Kova at a running server: set NATS_URL=nats://host:4222 or `[nats] urls` in kova.toml.";

/** No NATS server was given, found or startable. */
export class NatsBootstrapError extends KovaError {
  constructor(message: string, cause?: unknown) {
    super(BusErrorCode.NATS_UNREACHABLE, message, { cause });
  }
}

/** What we record about a server we started, to find it again after a crash of the node. */
interface StartedRecord {
  url: string;
  pid: number;
}

/**
 * Finds or starts the NATS server this node should use.
 * @throws NatsBootstrapError when nothing is configured, nothing answers on the default
 *   URL and nats-server cannot be found or started (the message says how to install it).
 */
export async function resolveNats(options: ResolveNatsOptions): Promise<ResolvedNats> {
  const log = componentLogger(options.logger ?? silentLogger(), "nats-bootstrap");
  const noop = async () => {};

  const fromEnv = splitUrls(process.env.NATS_URL);
  if (fromEnv.length > 0) {
    log.info({ source: "env", urls: redactUrls(fromEnv) }, "using NATS from NATS_URL");
    return { urls: fromEnv, source: "env", stop: noop };
  }
  const configured = (options.configuredUrls ?? []).map((u) => u.trim()).filter((u) => u !== "");
  if (configured.length > 0) {
    log.info({ source: "config", urls: redactUrls(configured) }, "using NATS from the config's [nats] urls");
    return { urls: configured, source: "config", stop: noop };
  }
  const defaultUrl = options.defaultUrl ?? DEFAULT_NATS_URL;
  const probeMs = options.probeTimeoutMs ?? 500;
  if (options.probeDefault !== false) {
    const probe = await probeNats(defaultUrl, probeMs);
    if (probe === "jetstream") {
      log.info({ source: "local-4222", urls: [defaultUrl] }, `using the NATS server already running at ${defaultUrl}`);
      return { urls: [defaultUrl], source: "local-4222", stop: noop };
    }
    if (probe === "no-jetstream") {
      log.warn({ url: defaultUrl }, `a NATS server answers at ${defaultUrl} but without JetStream; starting our own`);
    }
  }
  return startLocal(options.dataDir, probeMs, log);
}

async function startLocal(dataDir: string, probeMs: number, log: Logger): Promise<ResolvedNats> {
  const baseDir = join(dataDir, "nats");
  const recordPath = join(baseDir, "kova-nats.json");
  const pidPath = join(baseDir, "nats-server.pid");

  // A node killed with SIGKILL leaves its nats-server running on the store. Starting a
  // second server on the same store would corrupt it, so adopt the survivor instead.
  const previous = await readRecord(recordPath);
  if (previous && isAlive(previous.pid) && (await probeNats(previous.url, probeMs)) === "jetstream") {
    log.info(
      { source: "started", urls: [previous.url], pid: previous.pid },
      `reusing nats-server pid ${previous.pid} left running on ${baseDir} by a previous run`,
    );
    return {
      urls: [previous.url],
      source: "started",
      stop: once(async () => {
        await terminate(previous.pid);
        await rm(recordPath, { force: true });
      }),
    };
  }

  const bin = findNatsServerBinary();
  if (!bin) {
    throw new NatsBootstrapError(
      "no NATS server: NATS_URL is not set, the config has no [nats] urls, nothing with JetStream answers on " +
        `${DEFAULT_NATS_URL}, and nats-server is not on PATH. ${INSTALL_HELP}`,
    );
  }
  await removeStalePortsDirs(baseDir);
  let server: NatsServerProcess;
  try {
    server = await launchNatsServer(bin, {
      jetstream: true,
      baseDir,
      // A stable name: JetStream records the server name with its state.
      serverName: "kova-local",
      extraConfig: `pid_file: ${JSON.stringify(pidPath)}`,
    });
  } catch (err) {
    throw new NatsBootstrapError(
      `could not start nats-server with its store in ${baseDir}: ${err instanceof Error ? err.message : String(err)}. ${INSTALL_HELP}`,
      err,
    );
  }
  const pid = Number((await readFile(pidPath, "utf8").catch(() => "")).trim());
  if (pid > 0) await writeFile(recordPath, JSON.stringify({ url: server.url, pid } satisfies StartedRecord));
  log.info(
    { source: "started", urls: [server.url], storeDir: server.storeDir, pid },
    `started nats-server on ${server.url} with its JetStream store in ${server.storeDir}`,
  );
  const started = server;
  return {
    urls: [server.url],
    source: "started",
    stop: once(async () => {
      await started.stop();
      await rm(recordPath, { force: true });
    }),
  };
}

/**
 * The replica count for Kova's streams and KV buckets on the NATS system `nc` is
 * connected to: 3 when the server belongs to a cluster (`cluster` in its INFO), else 1.
 * Three because a JetStream quorum that survives one lost server needs three replicas
 * (two would stop on any loss); a cluster still forming, or with one server down, must
 * not make a node create single-replica streams that stay so forever. A cluster of
 * fewer than three JetStream servers rejects R3 with "insufficient resources": give
 * such setups an explicit count instead.
 */
export function jetStreamReplicas(nc: NatsConnection): 1 | 3 {
  return nc.info?.cluster ? 3 : 1;
}

function splitUrls(value: string | undefined): string[] {
  return (value ?? "")
    .split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "");
}

async function readRecord(path: string): Promise<StartedRecord | undefined> {
  try {
    const v = JSON.parse(await readFile(path, "utf8")) as Partial<StartedRecord>;
    return typeof v.url === "string" && typeof v.pid === "number" ? { url: v.url, pid: v.pid } : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    // ESRCH: gone. EPERM: alive but not ours to signal, so not a server we started.
    return false;
  }
}

/** SIGTERM an adopted server (not our child, so no exit event), SIGKILL after 5 s. */
async function terminate(pid: number): Promise<void> {
  if (!isAlive(pid)) return;
  process.kill(pid, "SIGTERM");
  const deadline = Date.now() + 5_000;
  while (isAlive(pid)) {
    if (Date.now() > deadline) {
      process.kill(pid, "SIGKILL");
      break;
    }
    await sleep(50);
  }
}

/** The harness writes a fresh ports directory per launch; old ones only confuse a reader. */
async function removeStalePortsDirs(baseDir: string): Promise<void> {
  const entries = await readdir(baseDir).catch(() => [] as string[]);
  await Promise.all(entries.filter((e) => e.startsWith("ports-")).map((e) => rm(join(baseDir, e), { recursive: true, force: true })));
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let p: Promise<void> | undefined;
  return () => (p ??= fn());
}
