/**
 * Real network partitions for tests (Linux, root): every host of a test cluster (a
 * nats-server, a Kova node) runs in a network namespace of its own, joined by a veth pair
 * to a bridge in a "switch" namespace. A test can then pull a host's cable (`cut`: its
 * port on the switch goes down, so its packets are lost both ways and nothing tells its
 * TCP connections), or drop the traffic between two hosts only (`block`: a blackhole route
 * on each side), and heal either.
 *
 * Every address lives inside namespaces the topology creates (10.77.0.0/24, the same in
 * every topology: topologies are separate worlds, so concurrent tests do not collide), and
 * nothing is added to the caller's own network namespace. The caller reaches in through
 * `forward` (a loopback port here whose connections go to a host's port there) and a host
 * reaches out through `expose` (an address there whose connections go to a loopback port
 * here, e.g. a scripted model server): both through one relay process in the switch
 * namespace, which holds listening sockets made in both namespaces.
 */
import { execFile, spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { connect, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { HarnessError } from "./errors.js";

const run = promisify(execFile);

const SUBNET = "10.77.0";
const SWITCH_ADDRESS = `${SUBNET}.254`;
/** Namespace names start with this, then the creating process's pid: stale ones are found by it. */
const PREFIX = "kova";

export interface NetworkTopologyOptions {
  /** Host names (`[A-Za-z0-9_-]`, up to 40 hosts): one namespace each, in this order from 10.77.0.1. */
  hosts: string[];
}

export interface NetworkTopology extends AsyncDisposable {
  readonly hosts: readonly string[];
  /** The host's address inside the topology. */
  address(host: string): string;
  /** The host's network namespace (for `ip netns exec`). */
  namespace(host: string): string;
  /** The command line that runs `command` inside the host's namespace (`ip netns exec`, which becomes the command). */
  command(host: string, command: string, args: string[]): { command: string; args: string[] };
  /** Starts `command` inside the host's namespace (the child's pid is the command's). */
  spawn(host: string, command: string, args: string[], options?: SpawnOptions): ChildProcess;
  /** Pulls the host's cable: every packet to or from it is lost, and no side is told. */
  cut(host: string): Promise<void>;
  /** Plugs the cable back in. */
  heal(host: string): Promise<void>;
  /** Drops every packet between `a` and `b` (both ways); their traffic with other hosts flows. */
  block(a: string, b: string): Promise<void>;
  unblock(a: string, b: string): Promise<void>;
  /** A port on 127.0.0.1 of the caller's namespace whose connections reach `host:port` inside. */
  forward(host: string, port: number): Promise<number>;
  /** An address inside (on the switch) whose connections reach `127.0.0.1:port` of the caller's namespace. */
  expose(port: number): Promise<{ host: string; port: number }>;
  /** Stops the relay and deletes the namespaces (stop the processes inside first). */
  dispose(): Promise<void>;
}

/**
 * Whether this process can build a topology: root, `ip` (iproute2), and a kernel that
 * makes namespaces, bridges and veth pairs (a container without CAP_NET_ADMIN cannot).
 * @returns `{ ok: false, why }` naming what is missing
 */
export async function networkNamespacesAvailable(): Promise<{ ok: true } | { ok: false; why: string }> {
  if (process.platform !== "linux") return { ok: false, why: `network namespaces are Linux only (this is ${process.platform})` };
  if (process.getuid?.() !== 0) return { ok: false, why: "network namespaces need root (ip netns add)" };
  const ip = ipBinary();
  if (!ip) return { ok: false, why: "the ip command (iproute2) is not installed: apt-get install iproute2" };
  const probe = `${PREFIX}${process.pid}probe${Math.random().toString(36).slice(2, 6)}`;
  try {
    await run(ip, ["netns", "add", probe]);
    await run(ip, ["-n", probe, "link", "add", "br0", "type", "bridge"]);
    await run(ip, ["-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"]);
    return { ok: true };
  } catch (err) {
    return {
      ok: false,
      why: `this machine cannot make network namespaces, bridges and veth pairs: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`,
    };
  } finally {
    await run(ip, ["netns", "del", probe]).catch(() => undefined);
  }
}

function ipBinary(): string | undefined {
  return ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].find((p) => existsSync(p));
}

/**
 * Builds the namespaces, the bridge and one veth pair per host, and starts the relay.
 * Namespaces left behind by a test process that died are deleted first.
 * @throws HarnessError when a namespace or link cannot be made (see networkNamespacesAvailable)
 */
export async function createNetworkTopology(opts: NetworkTopologyOptions): Promise<NetworkTopology> {
  const ip = ipBinary();
  if (!ip) throw new HarnessError("the ip command (iproute2) is not installed: apt-get install iproute2");
  if (opts.hosts.length === 0 || opts.hosts.length > 40) throw new HarnessError(`a topology has 1 to 40 hosts, not ${opts.hosts.length}`);
  for (const h of opts.hosts) if (!/^[A-Za-z0-9_-]{1,32}$/.test(h)) throw new HarnessError(`host name ${JSON.stringify(h)}: use 1-32 of [A-Za-z0-9_-]`);
  if (new Set(opts.hosts).size !== opts.hosts.length) throw new HarnessError(`host names repeat: ${opts.hosts.join(", ")}`);
  await removeStaleNamespaces(ip);
  const topology = new Topology(ip, `${PREFIX}${process.pid}x${Math.random().toString(36).slice(2, 6)}`, opts.hosts);
  try {
    await topology.build();
  } catch (err) {
    await topology.dispose();
    throw err instanceof HarnessError
      ? err
      : new HarnessError(`could not build the network topology: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`, err);
  }
  return topology;
}

async function removeStaleNamespaces(ip: string): Promise<void> {
  const { stdout } = await run(ip, ["netns", "list"]);
  for (const line of stdout.split("\n")) {
    const name = line.split(" ")[0] ?? "";
    const m = new RegExp(`^${PREFIX}(\\d+)(?:x|probe)`).exec(name);
    if (!m || processAlive(Number(m[1]))) continue;
    await run(ip, ["netns", "del", name]).catch(() => undefined);
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

class Topology implements NetworkTopology {
  private relay: ChildProcess | undefined;
  private relayReplies = new Map<number, (msg: RelayReply) => void>();
  private nextRequest = 0;
  private readonly sockets: string[] = [];
  private readonly exposers: Server[] = [];

  constructor(
    private readonly ip: string,
    private readonly id: string,
    readonly hosts: readonly string[],
  ) {}

  private get switchNs(): string {
    return `${this.id}-sw`;
  }

  namespace(host: string): string {
    this.index(host);
    return `${this.id}-${host}`;
  }

  address(host: string): string {
    return `${SUBNET}.${this.index(host) + 1}`;
  }

  private index(host: string): number {
    const i = this.hosts.indexOf(host);
    if (i < 0) throw new HarnessError(`no host ${JSON.stringify(host)} in this topology (hosts: ${this.hosts.join(", ")})`);
    return i;
  }

  private port(host: string): string {
    return `p${this.index(host)}`;
  }

  private async ipIn(ns: string, ...args: string[]): Promise<void> {
    await run(this.ip, ["-n", ns, ...args]);
  }

  async build(): Promise<void> {
    const sw = this.switchNs;
    await run(this.ip, ["netns", "add", sw]);
    await this.ipIn(sw, "link", "set", "lo", "up");
    await this.ipIn(sw, "link", "add", "br0", "type", "bridge");
    await this.ipIn(sw, "addr", "add", `${SWITCH_ADDRESS}/24`, "dev", "br0");
    await this.ipIn(sw, "link", "set", "br0", "up");
    for (const host of this.hosts) {
      const ns = this.namespace(host);
      await run(this.ip, ["netns", "add", ns]);
      await this.ipIn(ns, "link", "set", "lo", "up");
      await this.ipIn(sw, "link", "add", this.port(host), "type", "veth", "peer", "name", "eth0", "netns", ns);
      await this.ipIn(sw, "link", "set", this.port(host), "master", "br0");
      await this.ipIn(sw, "link", "set", this.port(host), "up");
      await this.ipIn(ns, "addr", "add", `${this.address(host)}/24`, "dev", "eth0");
      await this.ipIn(ns, "link", "set", "eth0", "up");
    }
    await this.startRelay();
  }

  command(host: string, command: string, args: string[]): { command: string; args: string[] } {
    return { command: this.ip, args: ["netns", "exec", this.namespace(host), command, ...args] };
  }

  spawn(host: string, command: string, args: string[], options: SpawnOptions = {}): ChildProcess {
    const c = this.command(host, command, args);
    return spawn(c.command, c.args, options);
  }

  async cut(host: string): Promise<void> {
    await this.ipIn(this.switchNs, "link", "set", this.port(host), "down");
  }

  async heal(host: string): Promise<void> {
    await this.ipIn(this.switchNs, "link", "set", this.port(host), "up");
  }

  async block(a: string, b: string): Promise<void> {
    await this.ipIn(this.namespace(a), "route", "add", "blackhole", `${this.address(b)}/32`);
    await this.ipIn(this.namespace(b), "route", "add", "blackhole", `${this.address(a)}/32`);
  }

  async unblock(a: string, b: string): Promise<void> {
    await this.ipIn(this.namespace(a), "route", "del", "blackhole", `${this.address(b)}/32`);
    await this.ipIn(this.namespace(b), "route", "del", "blackhole", `${this.address(a)}/32`);
  }

  private async startRelay(): Promise<void> {
    const child = spawn(this.ip, ["netns", "exec", this.switchNs, process.execPath, "-e", `(${relayMain.toString()})()`], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    this.relay = child;
    child.on("message", (msg: RelayReply) => {
      const done = this.relayReplies.get(msg.id);
      this.relayReplies.delete(msg.id);
      done?.(msg);
    });
    child.on("exit", () => {
      for (const done of this.relayReplies.values()) done({ id: -1, error: "the relay process exited" });
      this.relayReplies.clear();
    });
    const ready = await this.ask({ kind: "ping" });
    if (ready.error) throw new HarnessError(`the topology's relay did not start: ${ready.error}`);
  }

  private ask(msg: Omit<RelayRequest, "id">, handle?: Server): Promise<RelayReply> {
    const relay = this.relay;
    if (!relay?.connected) return Promise.resolve({ id: -1, error: "the relay process is not running" });
    const id = this.nextRequest++;
    return new Promise<RelayReply>((resolve) => {
      this.relayReplies.set(id, resolve);
      relay.send({ ...msg, id } as RelayRequest, handle, (err) => {
        if (err) {
          this.relayReplies.delete(id);
          resolve({ id, error: err.message });
        }
      });
    });
  }

  async forward(host: string, port: number): Promise<number> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    const local = (server.address() as { port: number }).port;
    const reply = await this.ask({ kind: "forward", host: this.address(host), port }, server);
    // The relay holds its own copy of the listening socket now; ours would take connections too.
    server.close();
    if (reply.error) throw new HarnessError(`could not forward 127.0.0.1:${local} to ${host}:${port}: ${reply.error}`);
    return local;
  }

  async expose(port: number): Promise<{ host: string; port: number }> {
    const path = join(tmpdir(), `${this.id}-${this.sockets.length}.sock`);
    await rm(path, { force: true });
    const server = createServer((inside) => {
      const out = connect(port, "127.0.0.1");
      inside.pipe(out).pipe(inside);
      inside.on("error", () => out.destroy());
      out.on("error", () => inside.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(path, () => resolve());
    });
    this.sockets.push(path);
    this.exposers.push(server);
    const reply = await this.ask({ kind: "expose", host: SWITCH_ADDRESS, path });
    if (reply.error || reply.port === undefined) throw new HarnessError(`could not expose 127.0.0.1:${port} inside the topology: ${reply.error}`);
    return { host: SWITCH_ADDRESS, port: reply.port };
  }

  async dispose(): Promise<void> {
    const relay = this.relay;
    if (relay && relay.exitCode === null && relay.signalCode === null) {
      const exited = new Promise<void>((r) => relay.once("exit", () => r()));
      relay.kill("SIGKILL");
      await exited;
    }
    for (const s of this.exposers) s.close();
    await Promise.all(this.sockets.map((p) => rm(p, { force: true })));
    for (const host of this.hosts) await run(this.ip, ["netns", "del", `${this.id}-${host}`]).catch(() => undefined);
    await run(this.ip, ["netns", "del", this.switchNs]).catch(() => undefined);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

interface RelayRequest {
  id: number;
  kind: "ping" | "forward" | "expose";
  host?: string;
  port?: number;
  path?: string;
}

interface RelayReply {
  id: number;
  error?: string;
  port?: number;
}

/**
 * The relay, run as `node -e` inside the switch namespace (so it is plain JavaScript with
 * `require`, and uses nothing from around it). `forward`: the parent sends a listening
 * socket made in its own namespace; each connection on it is piped to host:port here.
 * `expose`: a listener on the switch's address here; each connection is piped to a Unix
 * socket the parent listens on (a path in the file system, which both namespaces see).
 */
function relayMain(): void {
  const net = require("node:net") as typeof import("node:net");
  const pipe = (a: import("node:net").Socket, b: import("node:net").Socket) => {
    // An upstream that does not answer its SYN (a link just brought up, a cut host) fails the
    // connection in 5 s rather than holding the client for the kernel's minutes of retries.
    const connecting = setTimeout(() => b.destroy(), 5_000);
    b.once("connect", () => clearTimeout(connecting));
    b.once("close", () => clearTimeout(connecting));
    a.pipe(b).pipe(a);
    a.on("error", () => b.destroy());
    b.on("error", () => a.destroy());
    a.on("close", () => b.destroy());
    b.on("close", () => a.destroy());
  };
  process.on("disconnect", () => process.exit(0));
  process.on("message", (msg: { id: number; kind: string; host?: string; port?: number; path?: string }, handle?: import("node:net").Server) => {
    const reply = (r: Record<string, unknown>) => process.send?.({ id: msg.id, ...r });
    if (msg.kind === "ping") return reply({});
    if (msg.kind === "forward" && handle) {
      handle.on("connection", (c) => pipe(c, net.connect(msg.port as number, msg.host as string)));
      return reply({});
    }
    if (msg.kind === "expose") {
      const srv = net.createServer((c) => pipe(c, net.connect(msg.path as string)));
      srv.on("error", (err) => reply({ error: String(err) }));
      srv.listen(0, msg.host, () => reply({ port: (srv.address() as { port: number }).port }));
      return;
    }
    reply({ error: `unknown relay request ${msg.kind}` });
  });
}
