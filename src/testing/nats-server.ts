/**
 * A nats-server for tests and local tooling: started on free loopback ports with a
 * fresh JetStream store (through the node's launcher), or an external one named by
 * `NATS_URL`, or a container where there is a Docker engine and no binary.
 *
 * Shaped after nats.js's own test harness: cleanup is `stop()` or `await using`.
 */

import { existsSync } from "node:fs";
import { findNatsServerBinary, launchNatsServer, NatsPortInUseError, type NatsServerHandle, type StartNatsServerOptions } from "../node/index.js";
import { HarnessError } from "./errors.js";
import { startOnFreshPorts, type FreshPortsOptions } from "./fresh-ports.js";

export {
  findNatsServerBinary,
  freePort,
  NatsLaunchError,
  NatsPortInUseError,
  type NatsServerHandle,
  type RestartOptions,
  type SpawnedNatsServer,
  spawnNatsServer,
  type StartNatsServerOptions,
} from "../node/index.js";
export { HarnessError } from "./errors.js";
export { startOnFreshPorts, type FreshPortsOptions, type StartOnFreshPortsOptions } from "./fresh-ports.js";

const INSTALL_HINT =
  "install it with `sudo apt-get install nats-server` (Debian/Ubuntu), `brew install nats-server` (macOS) " +
  "or run it with Docker (`docker run -p 4222:4222 nats -js`) and set NATS_URL=nats://127.0.0.1:4222; " +
  "NATS_SERVER_BIN may name the binary explicitly";

/**
 * Starts a nats-server (or returns an external one from NATS_URL).
 * @throws HarnessError when no binary is found (the message says how to install one)
 *   or the server does not become healthy in time.
 */
export async function startNatsServer(options: StartNatsServerOptions = {}): Promise<NatsServerHandle> {
  const external = process.env.NATS_URL;
  if (external && options.allowExternal !== false && !options.cluster) {
    return externalServer(external);
  }
  const bin = findNatsServerBinary();
  if (!bin) {
    if (await dockerEngineAvailable()) return startContainer(options);
    throw new HarnessError(`nats-server not found on PATH: ${INSTALL_HINT}`);
  }
  return launchNatsServer(bin, options);
}

export interface NatsClusterHandle {
  readonly servers: NatsServerHandle[];
  /** All client URLs, for a client that should fail over between them. */
  readonly urls: string[];
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Starts a JetStream cluster of `size` servers (default 3) on loopback. Client and
 * monitoring ports are the servers' own picks; the route ports must be known before the
 * start (every server lists them all), so a start that finds one taken by another process
 * starts again on fresh ones (see startOnFreshPorts; `pickPort` and `attempts` are for
 * tests of that).
 * @throws HarnessError when no binary is found, or every attempt found a route port taken;
 *   NatsLaunchError when a server does not start for another reason
 */
export async function startNatsCluster(options: { size?: number; name?: string; jetstream?: boolean } & FreshPortsOptions = {}): Promise<NatsClusterHandle> {
  const size = options.size ?? 3;
  const name = options.name ?? `kova-${Math.random().toString(36).slice(2, 8)}`;
  const bin = findNatsServerBinary();
  if (!bin) throw new HarnessError(`nats-server not found on PATH: ${INSTALL_HINT}`);
  const servers = await startOnFreshPorts(
    size,
    (i, routes, _attempt, signal) =>
      launchNatsServer(bin, {
        signal,
        jetstream: options.jetstream ?? true,
        serverName: `${name}-n${i + 1}`,
        cluster: { name, port: routes[i]!, routes: [...routes] },
        startTimeoutMs: 30_000,
      }),
    {
      what: `a ${size}-server NATS cluster`,
      isPortTaken: (err) => err instanceof NatsPortInUseError,
      ...(options.pickPort ? { pickPort: options.pickPort } : {}),
      ...(options.attempts !== undefined ? { attempts: options.attempts } : {}),
    },
  );
  const stop = async () => {
    await Promise.all(servers.map((s) => s.stop()));
  };
  return { servers, urls: servers.map((s) => s.url), stop, [Symbol.asyncDispose]: stop };
}

function externalServer(url: string): NatsServerHandle {
  const unsupported = async () => {
    throw new HarnessError(`cannot kill or restart the external server at NATS_URL=${url}; unset NATS_URL to let the harness start its own`);
  };
  return {
    url,
    monitorUrl: undefined,
    storeDir: undefined,
    serverName: "external",
    external: true,
    stop: async () => {},
    kill: unsupported,
    restart: unsupported,
    [Symbol.asyncDispose]: async () => {},
  };
}

async function dockerEngineAvailable(): Promise<boolean> {
  if (process.env.DOCKER_HOST) return true;
  return existsSync("/var/run/docker.sock");
}

/**
 * Fallback for machines with a Docker engine and no binary. `@testcontainers/nats` is
 * an optional dependency: it is loaded only here, so installs without Docker skip it.
 */
async function startContainer(options: StartNatsServerOptions): Promise<NatsServerHandle> {
  const moduleName = "@testcontainers/nats";
  // biome-ignore lint/suspicious/noExplicitAny: an optional dependency, not installed here, so its types are not either
  let mod: { NatsContainer: new (image?: string) => any };
  try {
    mod = (await import(moduleName)) as typeof mod;
  } catch (err) {
    throw new HarnessError(`nats-server not found and ${moduleName} is not installed (npm i -D ${moduleName}); or ${INSTALL_HINT}`, err);
  }
  let container = await new mod.NatsContainer("nats:2.9").withArgs({ "-js": "" }).start();
  const handle: NatsServerHandle = {
    get url() {
      return `nats://${container.getHost()}:${container.getMappedPort(4222)}`;
    },
    monitorUrl: undefined,
    storeDir: undefined,
    serverName: options.serverName ?? "testcontainer",
    external: false,
    stop: async () => {
      await container.stop();
    },
    kill: async () => {
      await container.stop({ timeout: 0 });
    },
    restart: async () => {
      container = await container.restart();
    },
    [Symbol.asyncDispose]: async () => {
      await container.stop();
    },
  };
  return handle;
}
