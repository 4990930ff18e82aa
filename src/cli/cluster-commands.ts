import type { Command } from "commander";
import { ArgumentError, ErrorCode, KovaError, isKovaError, isValidId, silentLogger } from "../core/index.js";
import { resolveTarget, targetOptions, type TargetOpts } from "./target.js";
import { BusErrorCode, connectNats, redactUrls, type NatsConnection } from "../bus/index.js";
import {
  controlRequest,
  nodeSubject,
  readAgent,
  readNodes,
  readRegistry,
  spawnSubject,
  type AgentRecord,
  type AgentStatusView,
  type NodeStatusView,
  type SignalReply,
  type SpawnReply,
} from "../cluster/index.js";
import { ActorErrorCode } from "../actors/index.js";
import { print, table } from "./output.js";

type ClusterOpts = TargetOpts;

/**
 * Cluster inspection and control from the command line: `kova nodes ls`, `kova agents
 * ls`, `kova status`, `kova spawn`, `kova signal`. Each reads the same KV buckets and
 * calls the same `kova-node` endpoints that `nats kv` / `nats req` would.
 */
export function register(program: Command): void {
  const common = (cmd: Command) => targetOptions(cmd).option("--json", "print JSON instead of a table");

  const nodes = program.command("nodes").description("cluster nodes");
  common(nodes.command("ls").description("list nodes with their heartbeat and actor count")).action((o: ClusterOpts) =>
    withCluster(o, async (nc, cluster) => {
      const records = await readNodes(nc, cluster);
      const now = Date.now();
      const rows = records.map((r) => ({ ...r, silentMs: now - r.heartbeatAt }));
      if (o.json) return print(rows);
      table(
        ["NODE", "STATE", "ACTORS", "HEARTBEAT", "HOST", "PID", "VERSION"],
        rows.map((r) => [
          r.id,
          r.state === "up" && r.silentMs < 15_000 ? "up" : r.state === "up" ? "stale" : r.state,
          String(r.actors),
          `${(r.silentMs / 1000).toFixed(1)}s ago`,
          r.host,
          String(r.pid),
          r.version,
        ]),
      );
    }),
  );

  const agents = program.command("agents").description("actors (agents) in the cluster");
  common(agents.command("ls").description("list actors: type, hosting node, state").option("--node <id>", "only actors on this node")).action(
    (o: ClusterOpts & { node?: string }) =>
      withCluster(o, async (nc, cluster) => {
        let records = await readRegistry(nc, cluster);
        if (o.node) records = records.filter((r) => r.node === o.node);
        if (o.json) return print(records);
        // A registry entry keeps naming a node that died until the takeover rewrites it.
        const nodeRecords = await readNodes(nc, cluster).catch(() => []);
        const alive = new Set(nodeRecords.filter((n) => n.state !== "leaving" && Date.now() - n.heartbeatAt < 15_000).map((n) => n.id));
        const where = (r: AgentRecord) => (r.node === null ? "-" : alive.has(r.node) ? r.node : `${r.node} (not responding)`);
        table(
          ["AGENT", "TYPE", "NODE", "STATE", "DESIRED"],
          records.map((r) => [r.id, r.type, where(r), r.state, r.desired]),
        );
      }),
  );

  common(program.command("status").description("cluster summary and each live node's status")).action((o: ClusterOpts) =>
    withCluster(o, async (nc, cluster) => {
      const nodeRecords = await readNodes(nc, cluster);
      const agentRecords = await readRegistry(nc, cluster).catch(() => []);
      const statuses: Array<NodeStatusView | { nodeId: string; error: string }> = await Promise.all(
        nodeRecords
          .filter((r) => r.state === "up")
          .map((r) =>
            controlRequest<NodeStatusView>(nc, nodeSubject(cluster, r.id, "status"), {}, 3000).catch((err: Error) => ({ nodeId: r.id, error: err.message })),
          ),
      );
      const byState: Record<string, number> = {};
      for (const a of agentRecords) byState[a.state] = (byState[a.state] ?? 0) + 1;
      const summary = { cluster, server: nc.getServer(), nodes: statuses, agents: { total: agentRecords.length, byState } };
      if (o.json) return print(summary);
      process.stdout.write(
        `cluster ${cluster} on ${summary.server}: ${statuses.filter((s) => !("error" in s)).length} node(s) answering, ${agentRecords.length} agent(s)\n`,
      );
      process.stdout.write(
        `agents by state: ${
          Object.entries(byState)
            .map(([k, v]) => `${k}=${v}`)
            .join(" ") || "(none)"
        }\n`,
      );
      table(
        ["NODE", "HEALTHY", "HOSTED", "UPTIME", "NATS", "RECOVERED", "ABANDONED"],
        statuses.map((s) =>
          "error" in s
            ? [s.nodeId, "no reply", "-", "-", "-", "-", s.error]
            : [
                s.nodeId,
                String(s.healthy),
                String(s.actors.hosted),
                `${Math.round(s.uptimeMs / 1000)}s`,
                s.nats.source,
                String(s.recovery.finished.length),
                String(s.recovery.abandoned.length),
              ],
        ),
      );
      const answered = statuses.filter((s): s is NodeStatusView => !("error" in s));
      const templateRows = answered.flatMap((s) =>
        (s.virtual?.templates ?? []).map((t) => [
          s.nodeId,
          t.name,
          t.type,
          String(t.hosted),
          t.idleAfterMs === 0 ? "never" : `${t.idleAfterMs / 1000}s`,
          String(s.virtual.activations),
          String(s.virtual.passivations),
          String(s.virtual.refused),
        ]),
      );
      if (templateRows.length > 0) {
        process.stdout.write("\ntemplates (virtual actors):\n");
        table(["NODE", "TEMPLATE", "TYPE", "ACTIVE", "IDLE_AFTER", "ACTIVATED", "PASSIVATED", "REFUSED"], templateRows);
      }
      const modelRows = answered.flatMap((s) =>
        (s.models ?? []).flatMap((m) =>
          Object.keys(m.classes).length === 0
            ? [[s.nodeId, m.model, m.policy, `${m.inFlight}/${m.maxConcurrency}`, String(m.queued), "-", "0", "0", "-", "-"]]
            : Object.entries(m.classes).map(([cls, w]) => [
                s.nodeId,
                m.model,
                m.policy,
                `${m.inFlight}/${m.maxConcurrency}`,
                String(m.queued),
                cls,
                String(w.queued),
                String(w.granted),
                `${w.waitMs.p50}`,
                `${w.waitMs.p99}`,
              ]),
        ),
      );
      if (modelRows.length > 0) {
        process.stdout.write("\nmodel-call scheduling (per node, model and class; waits in ms):\n");
        table(["NODE", "MODEL", "POLICY", "IN_FLIGHT", "QUEUED", "CLASS", "CLASS_QUEUED", "GRANTED", "WAIT_P50", "WAIT_P99"], modelRows);
      }
    }),
  );

  common(
    program
      .command("spawn <id>")
      .description("declare an actor at run time; placement hosts it on a live node")
      .requiredOption("-t, --type <type>", "registered actor type, e.g. counter"),
  ).action((id: string, o: ClusterOpts & { type: string }) =>
    withCluster(o, async (nc, cluster) => {
      if (!isValidId(id)) throw new KovaError(ErrorCode.INVALID_ID, `actor id ${JSON.stringify(id)} is invalid: use 1-128 characters from [A-Za-z0-9_-]`);
      const reply = await controlRequest<SpawnReply>(nc, spawnSubject(cluster), { id, type: o.type });
      if (o.json) return print(reply);
      process.stdout.write(reply.created ? `spawned ${id} (${o.type}) via node ${reply.via}\n` : `${id} already exists; left as it is\n`);
    }),
  );

  common(program.command("signal <agent> <signal>").description("pause, resume, interrupt or kill an actor; model=<name> switches an agent's model")).action(
    (agent: string, signal: string, o: ClusterOpts) =>
      withCluster(o, async (nc, cluster) => {
        if (!["pause", "resume", "interrupt", "kill"].includes(signal) && !/^model=[A-Za-z0-9_-]+$/.test(signal)) {
          throw new ArgumentError("signal", `unknown signal "${signal}": use pause, resume, interrupt, kill or model=<name>`);
        }
        const record = await readAgent(nc, cluster, agent);
        if (!record) throw new KovaError(ActorErrorCode.NOT_HOSTED, `no agent ${agent} in cluster ${cluster}: check the id with kova agents ls`);
        if (!record.node) {
          throw new KovaError(
            ActorErrorCode.NOT_HOSTED,
            `agent ${agent} is not running on any node right now (state ${record.state}); wait for placement and retry, see kova agents ls`,
          );
        }
        const reply = await controlRequest<SignalReply>(nc, nodeSubject(cluster, record.node, "signal"), { actorId: agent, signal });
        if (o.json) return print(reply);
        process.stdout.write(`${signal} delivered to ${agent} on ${reply.node}; state now ${reply.state}\n`);
      }),
  );

  common(program.command("node-agents <node>").description("actors a node hosts right now, with in-flight turns")).action((node: string, o: ClusterOpts) =>
    withCluster(o, async (nc, cluster) => {
      const list = await controlRequest<AgentStatusView[]>(nc, nodeSubject(cluster, node, "agents"), {});
      if (o.json) return print(list);
      table(
        ["AGENT", "TYPE", "STATE", "IN-FLIGHT", "HANDLED"],
        list.map((a) => [a.id, a.type, a.state, String(a.inFlight), String(a.handled)]),
      );
    }),
  );
}

export async function withCluster(o: TargetOpts, fn: (nc: NatsConnection, cluster: string) => Promise<void>): Promise<void> {
  const { urls, cluster, security } = await resolveTarget(o);
  let nc: NatsConnection;
  try {
    // NATS_URL may carry user info; connectNats moves it into the options.
    nc = await connectNats({ servers: urls, name: "kova-cli", connectTimeoutMs: 3000, security, logger: silentLogger() });
  } catch (err) {
    if (isKovaError(err, BusErrorCode.NATS_AUTH_FAILED)) throw err;
    throw new KovaError(
      BusErrorCode.NATS_UNREACHABLE,
      `NATS unreachable at ${redactUrls(urls.split(",")).join(",")}: start the cluster's nats-server, or pass --server / set NATS_URL (and credentials: --creds, --user, see kova --help)`,
      { cause: err },
    );
  }
  try {
    await fn(nc, cluster);
  } finally {
    await nc.close();
  }
}
