import type { ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sleep } from "../core/index.js";
import { findNatsServerBinary, SERVER_PING, terminateServer, type NatsServerHandle, type RestartOptions } from "../node/index.js";
import { HarnessError } from "./errors.js";
import type { NetworkTopology } from "./netns.js";

/** A nats-server running inside a topology's host. */
export interface TopologyNatsServer extends NatsServerHandle {
  /** The host (namespace) it runs in. */
  readonly host: string;
  /** The client URL inside the topology, for processes that run there (Kova nodes). */
  readonly innerUrl: string;
}

export interface TopologyNatsOptions {
  /** JetStream cluster name when there are several servers (default `kova`). */
  cluster?: string;
  /** How long each server may take to answer /healthz (default 30 s: a cluster waits for its routes). */
  startTimeoutMs?: number;
}

const CLIENT_PORT = 4222;
const MONITOR_PORT = 8222;
const ROUTE_PORT = 6222;

/**
 * Starts one nats-server with JetStream in each of `hosts` of the topology (a cluster with
 * routes to all when there are several), with the ping settings of every server Kova starts.
 * Their URLs as seen from this process go through the topology's relay; `innerUrl` is the
 * address inside. `kill`/`restart` keep the store, as the loopback harness does.
 * @throws HarnessError when nats-server is not installed or a server is not healthy in time
 */
export async function startNatsServersIn(topology: NetworkTopology, hosts: string[], opts: TopologyNatsOptions = {}): Promise<TopologyNatsServer[]> {
  const bin = findNatsServerBinary();
  if (!bin) throw new HarnessError("nats-server not found on PATH: install it with `sudo apt-get install nats-server`");
  const routes = hosts.length > 1 ? hosts.map((h) => `"nats-route://${topology.address(h)}:${ROUTE_PORT}"`).join(", ") : undefined;
  const servers = await Promise.all(
    hosts.map(async (host) => {
      const dir = await mkdtemp(join(tmpdir(), `kova-topology-nats-${host}-`));
      const address = topology.address(host);
      const conf = [
        `server_name: ${JSON.stringify(host)}`,
        `listen: "${address}:${CLIENT_PORT}"`,
        `http: "${address}:${MONITOR_PORT}"`,
        `ping_interval: "${SERVER_PING.intervalS}s"`,
        `ping_max: ${SERVER_PING.max}`,
        `jetstream { store_dir: ${JSON.stringify(join(dir, "jetstream"))}, max_mem: 256M, max_file: 4G }`,
        ...(routes ? [`cluster { name: ${JSON.stringify(opts.cluster ?? "kova")}, listen: "${address}:${ROUTE_PORT}", routes: [${routes}] }`] : []),
      ];
      await writeFile(join(dir, "nats-server.conf"), `${conf.join("\n")}\n`);
      const server = new TopologyServer(topology, bin, host, dir, await topology.forward(host, CLIENT_PORT), await topology.forward(host, MONITOR_PORT));
      return server;
    }),
  );
  try {
    await Promise.all(servers.map((s) => s.launch(opts.startTimeoutMs ?? 30_000)));
  } catch (err) {
    await Promise.all(servers.map((s) => s.stop()));
    throw err;
  }
  return servers;
}

const HEALTH_PROBE_TIMEOUT_MS = 1_000;

class TopologyServer implements TopologyNatsServer {
  readonly external = false;
  readonly url: string;
  readonly monitorUrl: string;
  readonly innerUrl: string;
  readonly storeDir: string;
  private child: ChildProcess | undefined;
  private tail = "";

  constructor(
    private readonly topology: NetworkTopology,
    private readonly bin: string,
    readonly host: string,
    private readonly dir: string,
    clientPort: number,
    monitorPort: number,
  ) {
    this.url = `nats://127.0.0.1:${clientPort}`;
    this.monitorUrl = `http://127.0.0.1:${monitorPort}`;
    this.innerUrl = `nats://${topology.address(host)}:${CLIENT_PORT}`;
    this.storeDir = join(dir, "jetstream");
  }

  get serverName(): string {
    return this.host;
  }

  async launch(timeoutMs: number, healthQuery = ""): Promise<void> {
    const child = this.topology.spawn(this.host, this.bin, ["-c", join(this.dir, "nats-server.conf")], { stdio: ["ignore", "ignore", "pipe"] });
    this.child = child;
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      this.tail = (this.tail + chunk).slice(-4000);
    });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (child.exitCode !== null) throw new HarnessError(`nats-server ${this.host} exited with ${child.exitCode} during start: ${this.tail.trim()}`);
      // Each probe bounded: a probe goes through the topology's relay, and one whose connection
      // inside hangs (its first SYN lost while the namespace's link comes up) would otherwise
      // wait for undici's 300 s header timeout with the server long healthy.
      const ok = await fetch(`${this.monitorUrl}/healthz${healthQuery}`, { signal: AbortSignal.timeout(HEALTH_PROBE_TIMEOUT_MS) }).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return;
      if (Date.now() > deadline) throw new HarnessError(`nats-server ${this.host} not healthy within ${timeoutMs} ms: ${this.tail.trim()}`);
      await sleep(100);
    }
  }

  private async terminate(signal: NodeJS.Signals): Promise<void> {
    await terminateServer(this.child, signal);
    this.child = undefined;
  }

  kill(): Promise<void> {
    return this.terminate("SIGKILL");
  }

  async restart(opts: RestartOptions = {}): Promise<void> {
    await this.terminate("SIGTERM");
    await this.launch(opts.healthTimeoutMs ?? 30_000, opts.jetStreamOnly ? "?js-enabled-only=true" : "");
  }

  async stop(): Promise<void> {
    await this.terminate("SIGTERM");
    await rm(this.dir, { recursive: true, force: true });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }
}
