import { isKovaError, componentLogger, silentLogger, type Logger, UnsupportedFormatError } from "../core/index.js";
import { BusErrorCode, isNoResponders, AGENT_RECORD_FORMAT, readKvEntries, type AgentRecord, type Bus } from "../bus/index.js";
import type { AgentInfo } from "../agents/index.js";

/** An agent a coordinator may delegate to, as the cluster sees it now. */
export interface AgentCandidate {
  agentId: string;
  /** The node hosting it (from the registry). */
  node: string | null;
  state: string;
  capabilities: string[];
  /** Messages waiting in its mailbox plus the one in progress (its consumer's pending + ack pending). */
  backlog: number;
}

/** Where a coordinator finds agents. The NATS one reads the registry and asks the agents; tests may pass a fixed list. */
export interface AgentDirectory {
  /** Live agents that can take work, with their capabilities and backlog. */
  list(): Promise<AgentCandidate[]>;
}

/** States in which an agent takes no new work. */
const UNAVAILABLE = new Set(["Failed", "Paused", "Completed"]);

export interface NatsDirectoryOptions {
  /** Agent ids never to delegate to (the coordinator itself, its peers). */
  exclude?: Iterable<string>;
  /** Bound of each `capability_query` on the fast path (default 2 s). */
  rpcTimeoutMs?: number;
  /** A listing is reused for this long (default 1 s): a burst of swarms asks the cluster once. */
  cacheMs?: number;
  logger?: Logger;
}

/**
 * The cluster's agents, from two sources:
 * - the registry (KV `kova_<c>_agents`, read with one watch of its last values): every
 *   declared agent, its node, its lifecycle state and its type's capabilities; agents that
 *   are unplaced, killed, Failed, Paused, declare no capability or are template instances
 *   are left out;
 * - the agents themselves, over the fast path (`capability_query` on `kova.<c>.rpc.<id>`,
 *   answered by the node hosting the agent): no responders means nobody hosts it right now
 *   (it is moving), so it is left out; an answer's capabilities and state win over the
 *   registry's; an agent that answers with an error (no rpc handler) keeps the registry's;
 * and the backlog from its mailbox consumer (`num_pending + num_ack_pending`), so the
 * least loaded agents get work first.
 */
export function natsAgentDirectory(bus: Bus, opts: NatsDirectoryOptions = {}): AgentDirectory {
  const exclude = new Set(opts.exclude ?? []);
  const rpcTimeoutMs = opts.rpcTimeoutMs ?? 2000;
  const cacheMs = opts.cacheMs ?? 1000;
  const log = componentLogger(opts.logger ?? silentLogger(), "agent-directory");
  let cached: { at: number; list: Promise<AgentCandidate[]> } | undefined;

  async function registry(): Promise<AgentRecord[]> {
    // A one-shot read, not a watch: its ordered consumer can stall while a rebalance rewrites the registry.
    const out: AgentRecord[] = [];
    for (const [key, e] of await readKvEntries(bus.nc, bus.subjects.kv.agents)) {
      try {
        out.push(AGENT_RECORD_FORMAT.decode(key, e.json<unknown>()));
      } catch (err) {
        // A newer Kova's record (or a damaged one): that agent gets no work from this
        // coordinator, and the others still do.
        if (!(err instanceof UnsupportedFormatError) && !(err instanceof SyntaxError)) throw err;
        log.warn({ err, agentId: key }, "registry record not readable by this build; the agent gets no subtasks");
      }
    }
    return out;
  }

  async function probe(r: AgentRecord): Promise<AgentCandidate | undefined> {
    const candidate: AgentCandidate = { agentId: r.id, node: r.node, state: r.state, capabilities: r.capabilities ?? [], backlog: 0 };
    const [info, backlog] = await Promise.all([
      bus.request<AgentInfo>(r.id, "capability_query", {}, { timeoutMs: rpcTimeoutMs }).catch((err: unknown) => (isNoResponders(err) ? null : undefined)),
      bus.mailboxBacklog(r.id).catch(() => 0),
    ]);
    if (info === null) return undefined;
    if (info && Array.isArray(info.capabilities)) candidate.capabilities = info.capabilities.filter((c): c is string => typeof c === "string");
    if (info && typeof info.state === "string") candidate.state = info.state;
    candidate.backlog = backlog;
    return UNAVAILABLE.has(candidate.state) || candidate.capabilities.length === 0 ? undefined : candidate;
  }

  async function load(): Promise<AgentCandidate[]> {
    let entries: AgentRecord[];
    try {
      entries = await registry();
    } catch (err) {
      if (isKovaError(err, BusErrorCode.BUCKET_NOT_FOUND)) return []; // no node ever ran in this cluster
      throw err;
    }
    const eligible = entries.filter(
      // A template instance belongs to its key (a user's, a session's): work is delegated to
      // declared agents only, and a thousand active instances are not probed per listing.
      (r) =>
        r.template === undefined &&
        !exclude.has(r.id) &&
        r.desired !== "killed" &&
        r.node !== null &&
        !UNAVAILABLE.has(r.state) &&
        (r.capabilities?.length ?? 0) > 0,
    );
    const probed = await Promise.all(eligible.map(probe));
    const out = probed.filter((c): c is AgentCandidate => c !== undefined).sort((a, b) => (a.agentId < b.agentId ? -1 : 1));
    log.debug({ registered: entries.length, eligible: eligible.length, live: out.length }, "listed agents");
    return out;
  }

  return {
    list() {
      const now = Date.now();
      if (!cached || now - cached.at > cacheMs) {
        const list = load();
        cached = { at: now, list };
        list.catch(() => (cached = undefined));
      }
      return cached.list;
    },
  };
}

/** A fixed directory (tests, or an application that knows its agents). */
export function staticAgentDirectory(agents: AgentCandidate[]): AgentDirectory {
  return { list: async () => agents.map((a) => ({ ...a, capabilities: [...a.capabilities] })) };
}

/** Where each subtask goes, or why it goes nowhere. */
export type Assignment = { agentId: string; node: string | null } | { agentId: null; reason: string };

/**
 * Assigns subtasks to agents: for each subtask (in plan order), among the agents with its
 * capability (or the agent it names), the one with the least load, where load is the
 * agent's backlog plus what this plan already gave it; ties go to the agent on the node
 * with the fewest subtasks of this plan, then by id. So equal agents are used in turn,
 * and a plan spreads over nodes. Pure: the same inputs give the same assignment.
 */
export function assignSubtasks(subtasks: ReadonlyArray<{ capability?: string; agent?: string }>, agents: readonly AgentCandidate[]): Assignment[] {
  const load = new Map(agents.map((a) => [a.agentId, a.backlog]));
  const perNode = new Map<string, number>();
  return subtasks.map((s) => {
    const pool =
      s.agent !== undefined
        ? agents.filter((a) => a.agentId === s.agent)
        : agents.filter((a) => s.capability !== undefined && a.capabilities.includes(s.capability));
    if (pool.length === 0) {
      return { agentId: null, reason: s.agent !== undefined ? `agent ${s.agent} is not live` : `no live agent has capability ${JSON.stringify(s.capability)}` };
    }
    let best = pool[0]!;
    for (const a of pool.slice(1)) {
      const d = load.get(a.agentId)! - load.get(best.agentId)!;
      const n = (perNode.get(a.node ?? "") ?? 0) - (perNode.get(best.node ?? "") ?? 0);
      if (d < 0 || (d === 0 && (n < 0 || (n === 0 && a.agentId < best.agentId)))) best = a;
    }
    load.set(best.agentId, load.get(best.agentId)! + 1);
    perNode.set(best.node ?? "", (perNode.get(best.node ?? "") ?? 0) + 1);
    return { agentId: best.agentId, node: best.node };
  });
}
