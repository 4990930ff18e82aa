// Chaos under load: 3 node processes on a 3-server NATS cluster (replicas 3), LLM agents in
// tool loops against the scripted model (each job three calls of the non-idempotent
// `ledger_charge` tool), a sender of durable task_delegate jobs and a plain NATS prober
// (`createToolLoopLoad`, docs/cluster.md "Faults under load"). Faults one after another,
// drawn at random (seeded) or in turn, at most one node and one NATS server faulted at a time:
//
//   kill-quick  SIGKILL, restart on the same data dir 0.5-4 s later (inside the staleness window)
//   kill-slow   SIGKILL, restart after the staleness window (peers took the agents meanwhile)
//   term        SIGTERM (graceful: the agents move), restart
//   freeze      the node frozen whole (cgroup freezer, else SIGSTOP) past its lease, then thawed
//   partition   the node's link cut (network namespaces; root) past its lease, then healed
//   nats-kill   one NATS server SIGKILLed and restarted 1-5 s later; it runs beside the node
//               faults that follow it (at most one server down at a time)
//
// Takeover time of a node fault: from the fault to every agent the node held running again
// (its next model request or tool effect, on a peer or on the restarted node; a frozen or
// cut-off node's own work does not count). "Answering": to every such agent's first answered
// fast-path probe from a live host. For a NATS server kill: the longest any agent went
// unanswered on the fast path. At the end: jobs acknowledged, done, failed, outcome unknown
// (a fault cut a tool call and the model was told so), lost (acknowledged, never ended) and
// double effects (a (job, step) in the ledger twice), in total and for the jobs open at each
// kind of fault; the takeover distribution per kind. Progress lines while it runs, a JSON
// summary at the end (also to KOVA_CHAOS_OUT).
//
// Settings (env):
//   KOVA_CHAOS_FAULTS (20)            faults in all, node and NATS ones counted together
//   KOVA_CHAOS_MINUTES                stop drawing faults after this many minutes, even if
//                                     fewer than KOVA_CHAOS_FAULTS ran (the end is the same)
//   KOVA_CHAOS_SEED (1)               the random draws (kinds, victims, waits)
//   KOVA_CHAOS_ORDER (random)         random, or turn (the kinds in turn)
//   KOVA_CHAOS_KINDS (all)            comma list of the kinds above (partition needs root)
//   KOVA_CHAOS_PROFILE (fast)         fast: the availability test's settings (heartbeat 500 ms,
//                                     stale after 2.5 s, reconcile 500 ms, drain 1 s, WAL sync
//                                     normal); defaults: the node's defaults (1 s, 5 s, ...)
//   KOVA_CHAOS_HEARTBEAT_MS, KOVA_CHAOS_STALE_MS   override the profile's
//   KOVA_CHAOS_ACK_WAIT_MS (the bus default, 30 s) the mailbox's ack_wait
//   KOVA_CHAOS_AGENTS (12), KOVA_CHAOS_TOOL_HOLD_MS (300)
//   KOVA_CHAOS_OUT                    a file for the JSON summary
//   KOVA_CHAOS_KEEP=1                 keep the cluster's directory (node logs); kept anyway
//                                     when a job was lost or doubled or a takeover took > 10 s
//   KOVA_LOG_LEVEL (warn)             the nodes' log level
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import {
  createFreezer,
  createNetworkTopology,
  createToolLoopLoad,
  networkNamespacesAvailable,
  startNatsCluster,
  startNatsServersIn,
} from "../dist/testing/index.js";
import { Bus } from "../dist/bus/index.js";
import { createLogger } from "../dist/core/logger.js";
import { controlRequest, nodeSubject } from "../dist/cluster/control.js";
import { percentile, seededRandom } from "../dist/eval/index.js";
import { machine, REPO, sleep } from "./actors-lib.mjs";

const env = process.env;
const FAULTS = Number(env.KOVA_CHAOS_FAULTS ?? 20);
const UNTIL = env.KOVA_CHAOS_MINUTES ? Date.now() + Number(env.KOVA_CHAOS_MINUTES) * 60_000 : Number.POSITIVE_INFINITY;
const SEED = Number(env.KOVA_CHAOS_SEED ?? 1);
const ORDER = env.KOVA_CHAOS_ORDER ?? "random";
const PROFILE = env.KOVA_CHAOS_PROFILE ?? "fast";
const FAST = PROFILE === "fast";
const HEARTBEAT_MS = Number(env.KOVA_CHAOS_HEARTBEAT_MS ?? (FAST ? 500 : 1000));
const STALE_MS = Number(env.KOVA_CHAOS_STALE_MS ?? (FAST ? 2500 : 5 * HEARTBEAT_MS));
const ACK_WAIT_MS = env.KOVA_CHAOS_ACK_WAIT_MS ? Number(env.KOVA_CHAOS_ACK_WAIT_MS) : undefined;
const AGENTS = Number(env.KOVA_CHAOS_AGENTS ?? 12);
const TOOL_HOLD_MS = Number(env.KOVA_CHAOS_TOOL_HOLD_MS ?? 300);
/** How long a takeover may take before the fault is recorded as not taken over. */
const MEASURE_TIMEOUT_MS = 60_000;
const NODES = ["a1", "a2", "a3"];
const SERVERS = ["s1", "s2", "s3"];
const ALL_KINDS = ["kill-quick", "kill-slow", "term", "freeze", "partition", "nats-kill"];
const t00 = Date.now();
const since = () => `${((Date.now() - t00) / 1000).toFixed(0)}s`;
const log = (line) => console.log(`[${new Date().toISOString().slice(11, 19)} +${since()}] ${line}`);
const s1 = (ms) => (ms === undefined ? "-" : `${(ms / 1000).toFixed(1)} s`);

// The same seed draws the same faults, victims and waits.
const rnd = seededRandom(SEED);
const between = (lo, hi) => lo + (hi - lo) * rnd();
const pick = (list) => list[Math.floor(rnd() * list.length)];

const netns = await networkNamespacesAvailable();
const kinds = (env.KOVA_CHAOS_KINDS ?? ALL_KINDS.join(",")).split(",").map((k) => k.trim());
for (const k of kinds) if (!ALL_KINDS.includes(k)) throw new Error(`KOVA_CHAOS_KINDS: unknown kind ${k} (kinds: ${ALL_KINDS.join(", ")})`);
if (kinds.includes("partition") && !netns.ok) {
  kinds.splice(kinds.indexOf("partition"), 1);
  log(`partition faults skipped: ${netns.why}`);
}

// ---- the cluster: NATS servers, node processes (in namespaces and freezers where possible)
const load = await createToolLoopLoad({ agents: AGENTS, steps: 3, toolHoldMs: TOOL_HOLD_MS, modelLatencyMs: 50 });
const dir = await mkdtemp(join(env.KOVA_CHAOS_DIR ?? tmpdir(), "kova-chaos-"));
const cluster = `x${Math.random().toString(36).slice(2, 10)}`;
let topology;
let servers;
if (netns.ok) {
  topology = await createNetworkTopology({ hosts: [...SERVERS, ...NODES] });
  servers = await startNatsServersIn(topology, SERVERS);
} else {
  servers = (await startNatsCluster({ size: 3 })).servers;
}
log(`NATS servers up (${servers.map((s) => s.url).join(", ")}); ensuring the streams`);
const urls = servers.map((s) => s.url);
const nodeUrls = netns.ok ? servers.map((s) => s.innerUrl) : urls;
const nc = await connect({ servers: urls, maxReconnectAttempts: -1 });
const bus = await Bus.connect({ servers: urls, cluster, logger: createLogger({ level: "silent" }) });
for (let i = 0; ; i++) {
  try {
    await bus.ensureStreams({ replicas: 3 });
    break;
  } catch (err) {
    if (i > 60) throw err;
    await sleep(500);
  }
}
let modelUrl = load.model.url;
if (topology) {
  const inside = await topology.expose(Number(new URL(modelUrl).port));
  modelUrl = modelUrl.replace(new URL(modelUrl).host, `${inside.host}:${inside.port}`);
}
const freezers = new Map();
for (const id of NODES) freezers.set(id, await createFreezer(`${cluster}-${id}`));

const configPath = (id) => join(dir, `${id}.toml`);
for (const id of NODES) {
  const lines = [
    `modules = ${JSON.stringify(load.modules)}`,
    `[node]`,
    `id = "${id}"`,
    `data_dir = "${join(dir, id)}"`,
    `[cluster]`,
    `name = "${cluster}"`,
    ...(FAST || env.KOVA_CHAOS_HEARTBEAT_MS ? [`heartbeat_ms = ${HEARTBEAT_MS}`, `stale_after_ms = ${STALE_MS}`] : []),
    ...(FAST ? [`reconcile_ms = 500`, `drain_timeout_ms = 1000`] : []),
    `[nats]`,
    `urls = ${JSON.stringify(nodeUrls)}`,
    `replicas = 3`,
    ...(FAST ? [`[wal]`, `sync = "normal"`] : []),
    ...(ACK_WAIT_MS ? [`[mailbox]`, `ack_wait_ms = ${ACK_WAIT_MS}`] : []),
    load.toml(modelUrl),
  ];
  await writeFile(configPath(id), `${lines.join("\n")}\n`);
}

const procs = new Map();
/** Node exits we did not cause. */
const unexpectedExits = [];
const status = (id, timeoutMs = 2000) => controlRequest(nc, nodeSubject(cluster, id, "status"), {}, timeoutMs);

/** Spawns node `id` on its data dir (inside its namespace and freezer); resolves once it answers `status`. */
async function startNode(id, timeoutMs = 60_000) {
  const nodeEnv = { ...env, KOVA_LOG_LEVEL: env.KOVA_LOG_LEVEL ?? "warn" };
  for (const k of ["NATS_URL", "KOVA_NODE_ID", "KOVA_CLUSTER", "KOVA_DATA_DIR"]) delete nodeEnv[k];
  let command = { command: process.execPath, args: [join(REPO, "bin/kova.js"), "node", "start", "--config", configPath(id)] };
  if (topology) command = topology.command(id, command.command, command.args);
  const freezer = freezers.get(id);
  command = freezer.command(command.command, command.args);
  const child = spawn(command.command, command.args, { env: nodeEnv, stdio: ["ignore", "pipe", "pipe"], detached: freezer.method === "sigstop" });
  if (child.pid !== undefined) freezer.track(child.pid);
  const out = createWriteStream(join(dir, `${id}.log`), { flags: "a" });
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  const proc = { id, child, expectExit: false, exited: undefined };
  proc.exited = new Promise((r) =>
    child.on("exit", (code, signal) => {
      if (!proc.expectExit && !stopping) {
        unexpectedExits.push({ node: id, code, signal, at: Date.now() });
        log(`UNEXPECTED: node ${id} exited (${code ?? signal}); see ${join(dir, `${id}.log`)}`);
      }
      r({ code, signal });
    }),
  );
  procs.set(id, proc);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`node ${id} exited during start; see ${join(dir, `${id}.log`)}`);
    try {
      await status(id, 1000);
      return proc;
    } catch {
      if (Date.now() > deadline) throw new Error(`node ${id} did not answer status within ${timeoutMs} ms`);
      await sleep(100);
    }
  }
}

/** The node's process id, as the ledger tool records it (inside `ip netns exec` and the freezer's shell, which exec). */
const pidOf = (id) => procs.get(id)?.child.pid;

let stopping = false;
async function teardown() {
  stopping = true;
  await Promise.all([...freezers.values()].map((f) => f.thaw().catch(() => undefined)));
  for (const p of procs.values()) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
  await Promise.all([...procs.values()].map((p) => p.exited));
  await Promise.all([...freezers.values()].map((f) => f.dispose().catch(() => undefined)));
  await load.dispose().catch(() => undefined);
  await bus.close().catch(() => undefined);
  await nc.close().catch(() => undefined);
  await Promise.all(servers.map((s) => s.stop().catch(() => undefined)));
  await topology?.dispose();
}
process.once("SIGINT", () => {
  log("SIGINT: stopping");
  void teardown().finally(() => process.exit(130));
});

// ---- what the agents do: model requests (as they arrive) and ledger lines (tailed)
/** Per agent: recent activity, { at, pid } (pid undefined: a model request, which names no process). */
const activity = new Map(load.agentIds.map((a) => [a, []]));
const waiters = new Set();
load.onModelCall((c) => note(c.agent, c.at, undefined));
function note(agent, at, pid) {
  activity.get(agent)?.push({ at, pid });
  for (const w of waiters) w();
}
let ledgerOffset = 0;
let ledgerRest = "";
async function tailLedger() {
  const fh = await open(load.ledgerPath, "r").catch(() => undefined);
  if (!fh) return;
  try {
    const { size } = await fh.stat();
    if (size <= ledgerOffset) return;
    const buf = Buffer.alloc(size - ledgerOffset);
    await fh.read(buf, 0, buf.length, ledgerOffset);
    ledgerOffset = size;
    const lines = (ledgerRest + buf.toString("utf8")).split("\n");
    ledgerRest = lines.pop() ?? "";
    for (const l of lines) {
      if (!l) continue;
      const e = JSON.parse(l);
      note(e.agent, e.at, e.pid);
    }
  } finally {
    await fh.close();
  }
}
const tailer = setInterval(() => void tailLedger().catch((err) => log(`ledger tail: ${err}`)), 200);

// ---- start
log(
  `chaos-agents: ${FAULTS} faults (${kinds.join(", ")}; ${ORDER}, seed ${SEED}); profile ${PROFILE} (heartbeat ${HEARTBEAT_MS} ms, stale after ${STALE_MS} ms, ack_wait ${ACK_WAIT_MS ?? "default"}); ` +
    `${AGENTS} agents; NATS cluster of 3${netns.ok ? " in network namespaces" : " on loopback"}; freezer ${freezers.get("a1").method}; ${machine()}; dir ${dir}`,
);
await Promise.all(NODES.map((id) => startNode(id)));
const leasesNow = async () => {
  const out = new Map();
  for (const a of load.agentIds) out.set(a, load.leaseHistory(a).at(-1)?.node ?? null);
  return out;
};
await load.start(bus, nc);
for (let i = 0; ; i++) {
  const l = await leasesNow();
  if (new Set([...l.values()].filter(Boolean)).size === 3 && [...l.values()].every(Boolean)) break;
  if (i > 240) throw new Error("the agents were not placed on all three nodes within 60 s");
  await sleep(250);
}
const prober = load.probe(nc, { perSecond: 4, timeoutMs: 1000 });
await sleep(3000);

// ---- faults
const faults = [];
let natsFault; // the running NATS server fault, if any

/**
 * Per agent, the first activity after `t0` that `counts` (it decides per fault what is the
 * faulted node's own work); resolves when every agent has one or `MEASURE_TIMEOUT_MS` passed.
 */
function firstActivity(agents, counts) {
  return new Promise((resolve) => {
    const found = new Map();
    const check = () => {
      for (const a of agents) {
        if (found.has(a)) continue;
        const hit = activity.get(a).find((x) => counts(x));
        if (hit) found.set(a, hit.at);
      }
      if (found.size === agents.length) finish();
    };
    const finish = () => {
      waiters.delete(check);
      clearTimeout(timer);
      resolve(found);
    };
    const timer = setTimeout(finish, MEASURE_TIMEOUT_MS);
    waiters.add(check);
    check();
  });
}

/** Per agent, the send time of its first answered probe after `t0` that `counts`. */
function firstAnswers(agents, counts) {
  const out = new Map();
  for (const x of prober.samples) if (x.ok && agents.includes(x.agent) && !out.has(x.agent) && counts(x)) out.set(x.agent, x.sentAt);
  return out;
}

async function nodeFault(kind, no) {
  let leases = await leasesNow();
  // A node that hosts no agent yet (one restarted a moment ago, before it took its agents
  // back) would measure nothing: wait a little for one that does.
  for (let i = 0; i < 40 && !NODES.every((n) => [...leases.values()].includes(n)); i++) {
    await sleep(250);
    leases = await leasesNow();
  }
  const hosting = NODES.filter((n) => [...leases.values()].includes(n));
  const victim = pick(hosting.length > 0 ? hosting : NODES);
  const agents = load.agentIds.filter((a) => leases.get(a) === victim);
  const jobs = [...load.jobs.values()].filter((j) => !j.end && agents.includes(j.agent)).map((j) => j.id);
  const pid = pidOf(victim);
  const f = { no, kind, node: victim, agents: agents.length, jobs, load: loadavg()[0], t0: 0, releaseAt: Infinity, exitAt: undefined };
  const proc = procs.get(victim);
  f.t0 = Date.now();
  // What counts as the agent running again: nothing the faulted process did while faulted.
  // A frozen or cut-off node that kept an agent (no peer took it before the thaw or heal)
  // runs it again itself afterwards: its model requests count from 1 s after that (what it
  // began before the fault may still finish in that second), its tool effects only once they
  // could have begun after it.
  const counts = (x) => {
    if (x.at <= f.t0) return false;
    const woken = (kind === "freeze" || kind === "partition") && x.at > f.releaseAt + 1000 + (x.pid !== undefined ? TOOL_HOLD_MS : 0);
    if (x.pid !== undefined) return x.pid !== pid || woken;
    // A model request names no process: after a kill anyone's; during a freeze or cut only a
    // peer can reach the model; after SIGTERM once the node has exited.
    if (kind === "term") return f.exitAt !== undefined && x.at > f.exitAt;
    if (kind === "freeze" || kind === "partition") return x.at < f.releaseAt || woken;
    return true;
  };
  let measured;
  if (kind === "kill-quick" || kind === "kill-slow") {
    proc.expectExit = true;
    proc.child.kill("SIGKILL");
    measured = firstActivity(agents, counts);
    await proc.exited;
    const wait = kind === "kill-quick" ? between(500, 4000) : STALE_MS + between(1000, 3000);
    await sleep(Math.max(0, f.t0 + wait - Date.now()));
    f.downMs = Date.now() - f.t0;
    await startNode(victim);
    f.backMs = Date.now() - f.t0;
  } else if (kind === "term") {
    proc.expectExit = true;
    proc.child.kill("SIGTERM");
    measured = firstActivity(agents, counts);
    await proc.exited;
    f.exitAt = Date.now();
    f.exitMs = f.exitAt - f.t0;
    for (const w of waiters) w();
    await sleep(between(500, 2000));
    await startNode(victim);
    f.backMs = Date.now() - f.t0;
  } else {
    if (kind === "freeze") await freezers.get(victim).freeze();
    else await topology.cut(victim);
    measured = firstActivity(agents, counts);
    await sleep(STALE_MS + between(1500, 4000));
    f.releaseAt = Date.now();
    if (kind === "freeze") await freezers.get(victim).thaw();
    else await topology.heal(victim);
    f.downMs = f.releaseAt - f.t0;
    // Back once it answers again (a healed node may first have to notice its dead connection).
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        await status(victim, 1000);
        break;
      } catch {
        if (Date.now() > deadline) {
          log(`  ${victim} does not answer status 60 s after the ${kind === "freeze" ? "thaw" : "heal"}`);
          break;
        }
        await sleep(250);
      }
    }
    f.backMs = Date.now() - f.t0;
  }
  const found = await measured;
  f.perAgentMs = agents.map((a) => (found.has(a) ? found.get(a) - f.t0 : null));
  f.takeoverMs = agents.length === 0 ? undefined : f.perAgentMs.includes(null) ? null : Math.max(...f.perAgentMs);
  const answers = firstAnswers(agents, (x) => {
    if (x.sentAt <= f.t0) return false;
    if (x.node !== victim) return true;
    if (kind === "term") return f.exitAt !== undefined && x.sentAt > f.exitAt;
    if (kind === "freeze" || kind === "partition") return x.sentAt > f.releaseAt;
    return true;
  });
  f.answerMs = agents.length === 0 ? undefined : agents.every((a) => answers.has(a)) ? Math.max(...agents.map((a) => answers.get(a) - f.t0)) : null;
  faults.push(f);
  log(
    `#${no} ${kind} ${victim} (${agents.length} agents, ${jobs.length} jobs open): running again after ${f.takeoverMs === null ? `NOT within ${MEASURE_TIMEOUT_MS / 1000} s (${f.perAgentMs.filter((x) => x === null).length} agents)` : s1(f.takeoverMs)}, ` +
      `answering after ${s1(f.answerMs ?? undefined)}; ${kind === "term" ? `exit after ${s1(f.exitMs)}, ` : ""}back after ${s1(f.backMs)}; load ${f.load.toFixed(1)}`,
  );
}

/** Why not every NATS server is caught up (healthz), or undefined when they all are. */
async function natsLagging() {
  for (const server of servers) {
    const health = await fetch(`${server.monitorUrl}/healthz`, { signal: AbortSignal.timeout(2_000) }).then(
      (r) => r.json(),
      (err) => ({ error: String(err) }),
    );
    if (health.status !== "ok") return `${server.serverName}: ${health.error ?? JSON.stringify(health)}`;
  }
  return undefined;
}

/** One NATS server SIGKILLed and restarted; runs beside the node faults that follow. */
async function natsKill(no, server) {
  const f = {
    no,
    kind: "nats-kill",
    server: server.serverName,
    agents: AGENTS,
    jobs: [...load.jobs.values()].filter((j) => !j.end).map((j) => j.id),
    load: loadavg()[0],
    t0: Date.now(),
  };
  await server.kill();
  await sleep(between(1000, 5000));
  f.downMs = Date.now() - f.t0;
  // Back once its JetStream runs; then up to 60 s for every stream and consumer on it to
  // catch up (healthz), before another server may be killed.
  await server.restart({ healthTimeoutMs: 60_000, jetStreamOnly: true });
  f.backMs = Date.now() - f.t0;
  for (const deadline = Date.now() + 60_000; ; await sleep(500)) {
    const health = await fetch(`${server.monitorUrl}/healthz`, { signal: AbortSignal.timeout(2_000) }).then(
      (r) => r.json(),
      (err) => ({ error: String(err) }),
    );
    if (health.status === "ok") {
      f.currentMs = Date.now() - f.t0;
      break;
    }
    if (Date.now() > deadline) {
      f.notCurrent = health.error ?? JSON.stringify(health);
      log(`  ${server.serverName} not caught up 60 s after its restart: ${f.notCurrent}`);
      break;
    }
  }
  // The longest any agent went unanswered from the kill until 5 s after the restart.
  const until = f.t0 + f.backMs + 5000;
  await sleep(Math.max(0, until + 1000 - Date.now()));
  let worst = 0;
  for (const a of load.agentIds) {
    const mine = prober.samples.filter((x) => x.agent === a);
    worst = Math.max(worst, load.allAnsweringAfter(mine, f.t0, until));
  }
  f.takeoverMs = worst;
  faults.push(f);
  log(
    `#${no} nats-kill ${server.serverName}: down ${s1(f.downMs)}, JetStream back after ${s1(f.backMs)}, caught up after ${s1(f.currentMs)}; longest an agent went unanswered ${s1(worst)}; load ${f.load.toFixed(1)}`,
  );
}

let no = 0;
let turn = 0;
let keepDir = Boolean(env.KOVA_CHAOS_KEEP);
let postponedNatsKills = 0;
try {
  while (no < FAULTS && Date.now() < UNTIL) {
    const kind = ORDER === "turn" ? kinds[turn++ % kinds.length] : pick(kinds);
    no++;
    if (kind === "nats-kill") {
      await natsFault; // one server at a time
      // ... and only while the others are caught up: a server that lags is still faulted.
      const lagging = await natsLagging();
      if (lagging) {
        no--;
        postponedNatsKills++;
        log(`nats-kill not drawn: ${lagging}`);
        await sleep(1000);
        continue;
      }
      const n = no;
      natsFault = natsKill(n, pick(servers)).catch((err) => log(`#${n} nats-kill failed: ${err}`));
      await sleep(between(500, 1500));
      continue;
    }
    await nodeFault(kind, no).catch((err) => {
      log(`#${no} ${kind} failed: ${err?.stack ?? err}`);
      throw err;
    });
    // Samples older than any later measurement needs.
    const old = Date.now() - 120_000;
    const keep = prober.samples.filter((x) => x.sentAt >= old);
    prober.samples.splice(0, prober.samples.length, ...keep);
    for (const list of activity.values()) {
      const k = list.filter((x) => x.at >= old);
      list.splice(0, list.length, ...k);
    }
    if (no % 25 === 0) {
      const r = await load.report();
      log(
        `-- ${no} faults: ${r.acked} jobs acknowledged, ${r.done} done, ${r.failed} failed, ${r.open.length} open, ${r.doubleEffects.length} double effects, ${r.outcomeUnknown} outcome unknown`,
      );
    }
    await sleep(between(500, 2000));
  }
  await natsFault;

  // ---- the end: every acknowledged job must end
  log("faults done; stopping the sender and waiting for every acknowledged job to end (up to 180 s)");
  await load.stopSending();
  const open = await load.drain(180_000);
  await sleep(1000);
  await tailLedger();
  const report = await load.report();
  await prober.stop();

  const dist = (xs) => {
    const v = xs.filter((x) => x !== null && x !== undefined);
    if (v.length === 0) return { n: 0 };
    const q = (p) => percentile(v, p);
    return { n: v.length, min: q(0), p50: q(50), p90: q(90), p99: q(99), max: q(100) };
  };
  const jobsById = load.jobs;
  const byKind = {};
  for (const k of ALL_KINDS) {
    const fs = faults.filter((f) => f.kind === k && f.agents > 0);
    if (fs.length === 0) continue;
    const ids = new Set(fs.flatMap((f) => f.jobs));
    const jobsOf = [...ids].map((id) => jobsById.get(id)).filter(Boolean);
    const worst = fs.reduce((w, f) => ((f.takeoverMs ?? Number.POSITIVE_INFINITY) > (w?.takeoverMs ?? -1) ? f : w), undefined);
    byKind[k] = {
      faults: fs.length,
      notTakenOver: fs.filter((f) => f.takeoverMs === null).length,
      takeoverMs: dist(fs.map((f) => f.takeoverMs)),
      ...(k === "nats-kill" ? {} : { answerMs: dist(fs.map((f) => f.answerMs)), perAgentMs: dist(fs.flatMap((f) => f.perAgentMs)) }),
      worst: worst && { no: worst.no, node: worst.node ?? worst.server, takeoverMs: worst.takeoverMs, load: worst.load, natsOverlap: worst.natsOverlap },
      ...(k === "nats-kill" ? {} : { withoutNatsFault: dist(fs.filter((f) => !f.natsOverlap).map((f) => f.takeoverMs)) }),
      jobs: {
        open: ids.size,
        done: jobsOf.filter((j) => j.end === "run_completed").length,
        failed: jobsOf.filter((j) => j.end && j.end !== "run_completed").length,
        lost: jobsOf.filter((j) => !j.end).length,
        outcomeUnknown: [...load.unknownOutcomes].filter((x) => ids.has(x.split("/")[0])).length,
        doubleEffects: report.doubleEffects.filter((x) => ids.has(x.split("/")[0])).length,
      },
    };
  }
  // A node fault that overlaps a NATS server fault (from its kill until 10 s after the server
  // was healthy again) waits out the election too: counted apart.
  const natsWindows = faults.filter((f) => f.kind === "nats-kill").map((f) => [f.t0, f.t0 + f.backMs + 10_000]);
  for (const f of faults) {
    if (f.kind === "nats-kill") continue;
    const end = f.t0 + (f.takeoverMs ?? MEASURE_TIMEOUT_MS);
    f.natsOverlap = natsWindows.some(([a, b]) => a <= end && b >= f.t0);
  }
  const kills = faults.filter((f) => (f.kind === "kill-quick" || f.kind === "kill-slow") && f.agents > 0);
  const clean = kills.filter((f) => !f.natsOverlap);
  const loads = faults.map((f) => f.load).sort((a, b) => a - b);
  const summary = {
    script: "bench/chaos-agents.mjs",
    date: new Date().toISOString(),
    durationS: Math.round((Date.now() - t00) / 1000),
    seed: SEED,
    order: ORDER,
    profile: PROFILE,
    heartbeatMs: HEARTBEAT_MS,
    staleAfterMs: STALE_MS,
    ackWaitMs: ACK_WAIT_MS ?? "default",
    agents: AGENTS,
    netns: netns.ok,
    freezer: freezers.get("a1").method,
    machine: machine(),
    loadAverage: { min: loads[0], p50: loads[Math.floor(loads.length / 2)], max: loads.at(-1) },
    faults: faults.length,
    natsKillsNotDrawn: postponedNatsKills,
    natsNotCaughtUp: faults.filter((f) => f.notCurrent).map((f) => ({ no: f.no, server: f.server, why: f.notCurrent })),
    faultsByKind: Object.fromEntries(Object.entries(byKind).map(([k, v]) => [k, v.faults])),
    jobs: {
      acked: report.acked,
      done: report.done,
      failed: report.failed,
      failures: report.failures,
      lost: open.length,
      lostIds: open.slice(0, 20),
      outcomeUnknown: report.outcomeUnknown,
      doubleEffects: report.doubleEffects.length,
      doubleEffectIds: report.doubleEffects.slice(0, 20),
      effects: report.effects,
    },
    sigkill: {
      faults: kills.length,
      takeoverMs: dist(kills.map((f) => f.takeoverMs)),
      perAgentMs: dist(kills.flatMap((f) => f.perAgentMs)),
      withoutNatsFault: { faults: clean.length, takeoverMs: dist(clean.map((f) => f.takeoverMs)) },
      worst: kills.reduce((w, f) => ((f.takeoverMs ?? Number.POSITIVE_INFINITY) > (w?.takeoverMs ?? -1) ? f : w), undefined)?.no,
    },
    byKind,
    unexpectedExits,
    faultLog: faults.map(({ releaseAt, exitAt, t0, jobs, ...rest }) => ({ ...rest, at: new Date(t0).toISOString(), jobs: jobs.length })),
  };
  const slow = faults.some((f) => f.kind !== "nats-kill" && f.agents > 0 && (f.takeoverMs === null || f.takeoverMs > 10_000));
  const bad = open.length > 0 || report.doubleEffects.length > 0 || slow || unexpectedExits.length > 0;
  log(
    `done: ${faults.length} faults ${JSON.stringify(summary.faultsByKind)}; jobs ${report.acked} acknowledged, ${report.done} done, ${report.failed} failed, ${open.length} lost, ` +
      `${report.doubleEffects.length} double effects, ${report.outcomeUnknown} outcome unknown; SIGKILL → running again ${JSON.stringify(summary.sigkill.takeoverMs)}`,
  );
  const text = JSON.stringify(summary, null, 2);
  console.log(text);
  if (env.KOVA_CHAOS_OUT) await writeFile(env.KOVA_CHAOS_OUT, `${text}\n`);
  if (bad || env.KOVA_CHAOS_KEEP) {
    keepDir = true;
    log(`kept ${dir} (node logs)${bad ? ": something was lost, doubled, slow or exited" : ""}`);
  }
  process.exitCode = bad ? 1 : 0;
} finally {
  clearInterval(tailer);
  await prober.stop().catch(() => undefined);
  await teardown();
  if (!keepDir) await rm(dir, { recursive: true, force: true });
}
