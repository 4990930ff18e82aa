import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { KovaError, sleep } from "../../core/index.js";
import { NodeErrorCode } from "../errors.js";

/**
 * Starts and stops a local nats-server process: what `kova node start` does when no
 * server is configured or running (see nats-bootstrap.ts), and what the test harness
 * (`kova/testing`) builds on. `listen: 127.0.0.1:-1` lets the server pick its port and
 * `ports_file_dir` tells us which, so nothing races for a fixed port.
 */
export interface NatsServerHandle {
  /** Client URL, e.g. `nats://127.0.0.1:41234`. */
  readonly url: string;
  /** Monitoring base URL (`/varz`, `/jsz`, `/connz`), undefined for external servers. */
  readonly monitorUrl: string | undefined;
  /** The JetStream store directory, undefined for external servers. */
  readonly storeDir: string | undefined;
  readonly serverName: string;
  /** True when this handle points at a server it did not start (NATS_URL). */
  readonly external: boolean;
  /** The server's process id while this handle runs it (benchmarks read its CPU time in /proc); undefined for external servers and containers. */
  readonly pid?: number | undefined;
  /** Stops the server (SIGTERM, then SIGKILL) and removes its temporary files. */
  stop(): Promise<void>;
  /** SIGKILLs the server, keeping its store so that `restart()` can bring it back. */
  kill(): Promise<void>;
  /**
   * Starts the server again on the same ports and store directory, and waits until it is
   * healthy (`startTimeoutMs`, or `healthTimeoutMs` when given: a member of a JetStream
   * cluster is healthy once its streams and consumers caught up with the others), or with
   * `jetStreamOnly` until its JetStream runs, caught up or not.
   */
  restart(opts?: RestartOptions): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface RestartOptions {
  healthTimeoutMs?: number;
  /** Wait for `/healthz?js-enabled-only=true` (JetStream runs) rather than every stream and consumer current. */
  jetStreamOnly?: boolean;
}

export interface StartNatsServerOptions {
  /** Enable JetStream (default true). */
  jetstream?: boolean;
  /** Use `NATS_URL` when it is set (default true). Tests that kill the server pass false. Read by the test harness only. */
  allowExternal?: boolean;
  /** Extra lines appended to the generated server config. */
  extraConfig?: string;
  /** Where to keep config, ports file and store (default: a new temporary directory). */
  baseDir?: string;
  /** Server name (default: `kova-test-<random>`). */
  serverName?: string;
  /** How long to wait for the server to become healthy (default 15 s). */
  startTimeoutMs?: number;
  /** Use this client port instead of a free one (e.g. to start on 4222). */
  port?: number;
  /** Internal: cluster settings for `startNatsCluster`. */
  cluster?: { name: string; port: number; routes: number[] };
  /** Abandons the start (not a later restart): the server is killed and the start rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * How a server Kova starts finds a client that stopped answering (a frozen node, a host cut
 * off the network): it PINGs a client it has not heard from for `interval` seconds and
 * closes the connection after `max` unanswered PINGs, 12-15 s after the client went
 * silent (`(max + 1) x interval` to `(max + 2) x interval`: the first PING goes out at the
 * first timer tick at least one interval after the client's last word). The nats-server
 * default, 2 minutes x 2, keeps a dead client's subscriptions for 4-6 minutes. The same
 * values are in deploy/nats/ and deploy/k8s/ (test/unit/nats-ping.test.ts checks them).
 */
export const SERVER_PING = { intervalS: 3, max: 3 } as const;

/** A nats-server could not be found or did not start. */
export class NatsLaunchError extends KovaError {
  constructor(message: string, cause?: unknown, data?: Record<string, unknown>) {
    super(NodeErrorCode.NATS_LAUNCH_FAILED, message, { cause, ...(data ? { data } : {}) });
  }
}

/**
 * The nats-server exited during start because one of its listen ports was taken. A port
 * chosen free before the start (a route port every server of a cluster must know) can be
 * taken by any process in the meantime: a start on fresh ports may succeed.
 */
export class NatsPortInUseError extends NatsLaunchError {
  constructor(
    message: string,
    /** The port it could not listen on, when its log names it. */
    readonly port: number | undefined,
  ) {
    super(message, undefined, { port });
  }
}

/** Finds the nats-server binary: NATS_SERVER_BIN, then PATH, then /usr/sbin (Debian). */
export function findNatsServerBinary(): string | undefined {
  const explicit = process.env.NATS_SERVER_BIN;
  if (explicit) return existsSync(explicit) ? explicit : undefined;
  const dirs = (process.env.PATH ?? "").split(delimiter).concat(["/usr/sbin", "/usr/local/sbin", "/usr/local/bin"]);
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = join(dir, "nats-server");
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** Asks the OS for a free TCP port on loopback. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts a nats-server from `bin` (see findNatsServerBinary) and waits until it is healthy.
 * @throws NatsLaunchError when it exits during start or does not become healthy in time
 */
export async function launchNatsServer(bin: string, options: StartNatsServerOptions = {}): Promise<NatsServerProcess> {
  const server = new NatsServerProcess(bin, options);
  await server.start();
  return server;
}

/** A nats-server process that reported its ports and answers `/healthz`. */
export interface SpawnedNatsServer {
  readonly child: ChildProcess;
  readonly port: number;
  readonly monitorPort: number;
  /** The last few KB of its log (stderr), for error messages. */
  stderr(): string;
}

/**
 * Runs `bin -c confPath` and waits until it is healthy. The config must set
 * `ports_file_dir` to `portsDir`: the server's client and monitoring ports are read from
 * the file it writes there, so they may be `-1` (the server picks free ones, nothing races
 * for them).
 * @throws NatsPortInUseError when it exits because a listen port is taken; NatsLaunchError
 *   when it exits for another reason or is not healthy within `timeoutMs` (it is killed then)
 */
export async function spawnNatsServer(
  bin: string,
  confPath: string,
  portsDir: string,
  o: { name: string; timeoutMs: number; signal?: AbortSignal; healthQuery?: string },
): Promise<SpawnedNatsServer> {
  o.signal?.throwIfAborted();
  let tail = "";
  const child = spawn(bin, ["-c", confPath], { stdio: ["ignore", "ignore", "pipe"] });
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (chunk: string) => {
    tail = (tail + chunk).slice(-4000);
  });
  const stderr = () => tail;
  let exitCode: number | null | undefined;
  /** The binary could not be started at all (not executable, vanished): no 'exit' follows. */
  let spawnError: Error | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once("exit", (code) => {
      exitCode = code;
      resolve();
    });
    // Without a listener this 'error' would be an uncaught exception that ends the node.
    child.once("error", (err) => {
      spawnError = err;
      exitCode ??= null;
      resolve();
    });
  });
  const abandoned = new Promise<void>((resolve) => o.signal?.addEventListener("abort", () => resolve(), { once: true }));
  const deadline = Date.now() + o.timeoutMs;
  /** Throws when the server has exited (naming why) or the start is abandoned. */
  const alive = () => {
    o.signal?.throwIfAborted();
    if (exitCode === undefined) return;
    if (spawnError) throw new NatsLaunchError(`nats-server ${o.name} could not be started from ${bin}: ${spawnError.message}`);
    const log = tail.trim();
    const inUse = /listen tcp \S*?:(\d+): bind: address already in use/.exec(log);
    if (inUse) throw new NatsPortInUseError(`nats-server ${o.name} could not listen on port ${inUse[1]}, another process has it: ${log}`, Number(inUse[1]));
    throw new NatsLaunchError(`nats-server ${o.name} exited with code ${exitCode} during start: ${log}`);
  };
  try {
    let ports: { nats?: string[]; monitoring?: string[] } | undefined;
    while (!ports?.nats?.[0] || !ports.monitoring?.[0]) {
      await Promise.race([exited, abandoned, sleep(50)]);
      alive();
      if (Date.now() > deadline) throw new NatsLaunchError(`nats-server ${o.name} did not report its ports within ${o.timeoutMs} ms: ${tail.trim()}`);
      const files = await readdir(portsDir).catch(() => [] as string[]);
      const file = files.find((f) => f.endsWith(".ports"));
      if (!file) continue;
      try {
        ports = JSON.parse(await readFile(join(portsDir, file), "utf8"));
      } catch {
        ports = undefined; // written but not complete yet
      }
    }
    const port = Number(new URL(ports.nats[0]).port);
    const monitorPort = Number(new URL(ports.monitoring[0]).port);
    let last = "";
    for (;;) {
      alive();
      try {
        // Each probe bounded (1 s): one that hangs must not hold the start past its deadline
        // (an abandoned start waits at most that long; `abandoned` ends the loop below).
        const res = await fetch(`http://127.0.0.1:${monitorPort}/healthz${o.healthQuery ?? ""}`, { signal: AbortSignal.timeout(1_000) });
        if (res.ok) return { child, port, monitorPort, stderr };
        last = await res.text();
      } catch (err) {
        last = String(err);
      }
      if (Date.now() > deadline) throw new NatsLaunchError(`nats-server ${o.name} not healthy within ${o.timeoutMs} ms: ${last}`);
      await Promise.race([exited, abandoned, sleep(100)]);
    }
  } catch (err) {
    if (exitCode === undefined) {
      child.kill("SIGKILL");
      await exited;
    }
    throw err;
  }
}

export class NatsServerProcess implements NatsServerHandle {
  readonly external = false;
  readonly serverName: string;
  url = "";
  monitorUrl: string | undefined;
  storeDir: string | undefined;
  private baseDir = "";
  private ownsBaseDir = false;
  private child: ChildProcess | undefined;
  private port = -1;
  private monitorPort = -1;

  get pid(): number | undefined {
    return this.child?.pid;
  }

  constructor(
    private readonly bin: string,
    private readonly options: StartNatsServerOptions,
  ) {
    this.serverName = options.serverName ?? `kova-test-${Math.random().toString(36).slice(2, 10)}`;
  }

  async start(): Promise<void> {
    if (this.options.baseDir) {
      this.baseDir = this.options.baseDir;
      await mkdir(this.baseDir, { recursive: true });
    } else {
      this.baseDir = await mkdtemp(join(tmpdir(), "kova-nats-"));
      this.ownsBaseDir = true;
    }
    if (this.options.port !== undefined) this.port = this.options.port;
    this.storeDir = join(this.baseDir, "jetstream");
    try {
      await this.launch(this.options.signal);
    } catch (err) {
      if (this.ownsBaseDir) await rm(this.baseDir, { recursive: true, force: true });
      throw err;
    }
  }

  private configText(portsDir: string): string {
    const o = this.options;
    const lines = [
      `server_name: ${JSON.stringify(this.serverName)}`,
      `listen: "127.0.0.1:${this.port}"`,
      `http: "127.0.0.1:${this.monitorPort}"`,
      `ports_file_dir: ${JSON.stringify(portsDir)}`,
      `ping_interval: "${SERVER_PING.intervalS}s"`,
      `ping_max: ${SERVER_PING.max}`,
    ];
    if (o.jetstream !== false) {
      lines.push(`jetstream { store_dir: ${JSON.stringify(this.storeDir)}, max_mem: 256M, max_file: 4G }`);
    }
    if (o.cluster) {
      const routes = o.cluster.routes.map((p) => `"nats-route://127.0.0.1:${p}"`).join(", ");
      lines.push(`cluster { name: ${JSON.stringify(o.cluster.name)}, listen: "127.0.0.1:${o.cluster.port}", routes: [${routes}] }`);
    }
    if (o.extraConfig) lines.push(o.extraConfig);
    return `${lines.join("\n")}\n`;
  }

  private async launch(signal?: AbortSignal, restart: RestartOptions = {}): Promise<void> {
    const portsDir = join(this.baseDir, `ports-${Date.now()}-${Math.random().toString(36).slice(2, 6)}`);
    await mkdir(portsDir, { recursive: true });
    const confPath = join(this.baseDir, "nats-server.conf");
    await writeFile(confPath, this.configText(portsDir));
    const started = await spawnNatsServer(this.bin, confPath, portsDir, {
      name: this.serverName,
      timeoutMs: restart.healthTimeoutMs ?? this.options.startTimeoutMs ?? 15_000,
      ...(restart.jetStreamOnly ? { healthQuery: "?js-enabled-only=true" } : {}),
      ...(signal ? { signal } : {}),
    });
    this.child = started.child;
    this.port = started.port;
    this.monitorPort = started.monitorPort;
    this.url = `nats://127.0.0.1:${this.port}`;
    this.monitorUrl = `http://127.0.0.1:${this.monitorPort}`;
  }

  async kill(): Promise<void> {
    await this.terminate("SIGKILL");
  }

  async restart(opts: RestartOptions = {}): Promise<void> {
    await this.terminate("SIGTERM");
    await this.launch(undefined, opts);
  }

  async stop(): Promise<void> {
    await this.terminate("SIGTERM");
    if (this.ownsBaseDir) await rm(this.baseDir, { recursive: true, force: true });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async terminate(signal: NodeJS.Signals): Promise<void> {
    await terminateServer(this.child, signal);
    this.child = undefined;
  }
}

/** Sends `signal` to a nats-server process that still runs and waits for its exit (SIGKILL after 5 s). */
export async function terminateServer(child: ChildProcess | undefined, signal: NodeJS.Signals): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill(signal);
  const forced = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(forced);
}
