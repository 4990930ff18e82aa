// Shared helpers of the actor benchmarks: a nats-server of their own, node processes
// started with `bin/kova.js node start`, registry polling, and reporting.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, createWriteStream } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { startNatsServer } from "../dist/testing/index.js";
import { Bus, createEnvelope } from "../dist/bus/index.js";
import { createLogger } from "../dist/core/logger.js";
import { controlRequest, nodeSubject, spawnSubject } from "../dist/cluster/control.js";

export { createEnvelope };
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/**
 * What the node processes run: KOVA_BENCH_BIN names another build's `bin/kova.js` (beside
 * its own dist/ and a copy of package.json, which dist/core/version.js reads; inside this
 * repository so that it finds node_modules), to measure a change's before and after with the
 * same bench.
 */
const KOVA_BIN = process.env.KOVA_BENCH_BIN ? resolve(process.env.KOVA_BENCH_BIN) : join(REPO, "bin/kova.js");

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const fmt = (n) => Math.round(n).toLocaleString("en-US");

/** A free loopback port (for a nats-server listener its ports file does not report). */
const freePort = () =>
  new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });

/**
 * A cluster of node processes on its own nats-server. With `profile`, the server's Go
 * profiling port is on and `goMemory()` reads its heap after a forced GC.
 */
export async function startCluster({
  nodes,
  heartbeatMs = 1000,
  staleAfterMs = 5000,
  walSync = "full",
  actors = [],
  clusterToml = [],
  extraToml = "",
  modules = [],
  profile = false,
}) {
  const profPort = profile ? await freePort() : undefined;
  const server = await startNatsServer({ allowExternal: false, ...(profPort ? { extraConfig: `prof_port: ${profPort}` } : {}) });
  const dir = mkdtempSync(join(process.env.KOVA_BENCH_DIR ?? tmpdir(), "kova-bench-actors-"));
  const cluster = `b${Math.random().toString(36).slice(2, 10)}`;
  const nc = await connect({ servers: server.url });
  const bus = await Bus.connect({ servers: server.url, cluster, logger: createLogger({ level: "silent" }) });
  await bus.ensureStreams();
  const procs = new Map();
  const configFor = (id) => {
    const file = join(dir, `${id}.toml`);
    const lines = [
      // `modules` is a top-level key: it must precede every table header.
      ...(modules.length > 0 ? [`modules = ${JSON.stringify(modules)}`] : []),
      `[node]`,
      `id = "${id}"`,
      `data_dir = "${join(dir, id)}"`,
      `[cluster]`,
      `name = "${cluster}"`,
      `heartbeat_ms = ${heartbeatMs}`,
      `stale_after_ms = ${staleAfterMs}`,
      ...clusterToml,
      `[nats]`,
      `urls = ["${server.url}"]`,
      `[wal]`,
      `sync = "${walSync}"`,
    ];
    for (const a of actors) lines.push(`[[actors]]`, `id = "${a.id}"`, `type = "${a.type}"`, ...(a.module ? [`module = "${a.module}"`] : []));
    if (extraToml) lines.push(extraToml);
    writeFileSync(file, `${lines.join("\n")}\n`);
    return file;
  };
  const status = (id, timeoutMs = 2000) => controlRequest(nc, nodeSubject(cluster, id, "status"), {}, timeoutMs);
  const startNode = async (id) => {
    const env = { ...process.env, KOVA_LOG_LEVEL: process.env.KOVA_LOG_LEVEL ?? "warn" };
    delete env.NATS_URL;
    const child = spawn(
      process.execPath,
      [...(process.env.KOVA_BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), KOVA_BIN, "node", "start", "--config", configFor(id)],
      { env, stdio: ["ignore", "pipe", "pipe"] },
    );
    const log = createWriteStream(join(dir, `${id}.log`), { flags: "a" });
    child.stdout.pipe(log);
    child.stderr.pipe(log);
    const exited = new Promise((r) => child.on("exit", r));
    procs.set(id, { child, exited });
    for (let i = 0; i < 300; i++) {
      try {
        await status(id, 500);
        return;
      } catch {
        if (child.exitCode !== null) throw new Error(`node ${id} exited; see ${join(dir, `${id}.log`)}`);
        await sleep(100);
      }
    }
    throw new Error(`node ${id} did not start`);
  };
  const kill = async (id) => {
    const p = procs.get(id);
    p.child.kill("SIGKILL");
    await p.exited;
  };
  const term = async (id) => {
    const p = procs.get(id);
    p.child.kill("SIGTERM");
    await p.exited;
  };
  let agentsKv;
  const agents = async () => {
    agentsKv ??= await new Kvm(nc).open(`kova_${cluster}_agents`);
    const out = new Map();
    const iter = await agentsKv.watch();
    const status = await agentsKv.status();
    if (status.values === 0) {
      iter.stop();
      return out;
    }
    for await (const e of iter) {
      if (e.operation === "PUT") out.set(e.key, e.json());
      else out.delete(e.key);
      if (e.delta === 0) break;
    }
    iter.stop();
    return out;
  };
  const hostedBy = (id) => controlRequest(nc, nodeSubject(cluster, id, "agents"), {}, 10_000);
  const spawnActor = (id, type) => controlRequest(nc, spawnSubject(cluster), { id, type }, 10_000);
  /** The node processes' pids, by node id. */
  const pids = () => new Map([...procs].map(([id, p]) => [id, p.child.pid]));
  const varz = async () => await (await fetch(`${server.monitorUrl}/varz`)).json();
  /**
   * nats-server's Go memory right after a forced GC (pprof `heap?gc=1`): `heapAlloc` is what
   * it holds live, independent of when Go last collected or returned memory to the OS (its
   * RSS, varz `mem`, also holds garbage up to the next GC and freed memory not yet returned).
   */
  const goMemory = async () => {
    if (!profPort) throw new Error("goMemory needs startCluster({ profile: true })");
    const text = await (await fetch(`http://127.0.0.1:${profPort}/debug/pprof/heap?gc=1&debug=1`)).text();
    const field = (k) => Number(new RegExp(`^# ${k} = (\\d+)`, "m").exec(text)?.[1]);
    return { heapAlloc: field("HeapAlloc"), heapInuse: field("HeapInuse"), sys: field("Sys") };
  };
  const stop = async () => {
    for (const p of procs.values()) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
    await Promise.all([...procs.values()].map((p) => p.exited));
    await bus.close().catch(() => {});
    await nc.close().catch(() => {});
    await server.stop();
    if (process.env.KOVA_BENCH_KEEP) console.log(`kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const id of nodes) await startNode(id);
  } catch (err) {
    // The caller gets no handle to stop what started: a node that did not come up would
    // otherwise leave the nats-server and the other nodes running.
    await stop().catch(() => {});
    throw err;
  }
  return { server, cluster, nc, bus, dir, status, startNode, kill, term, agents, hostedBy, spawnActor, varz, pids, goMemory, stop };
}

/** Polls `cond` every `everyMs` until it returns a value; throws after `timeoutMs`. */
export async function waitFor(cond, timeoutMs, what, everyMs = 100) {
  const start = performance.now();
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (performance.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

/** CPU time (user + system) a process has used so far, ms, from /proc (USER_HZ = 100). */
export function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

export function machine() {
  return `node ${process.version}, ${process.platform}/${process.arch}`;
}
