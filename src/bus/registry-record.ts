import { recordFormat } from "../core/index.js";

/**
 * A value of the agents registry, KV `kova_<cluster>_agents` (docs/protocol.md): actor id →
 * where it runs, its lifecycle state and capabilities. Nodes write it (src/cluster/registry.ts);
 * anyone who reads the bucket — the CLI, a swarm's directory, the gateway — reads it through
 * `AGENT_RECORD_FORMAT`, so a record a newer Kova wrote is refused by everyone, not misread by some.
 */
export interface AgentRecord {
  /** Format version (AGENT_RECORD_VERSION). */
  v?: number;
  id: string;
  type: string;
  /** Hosting node, null while unplaced. */
  node: string | null;
  /** ActorState of the runtime (`Created`, `Idle`, `Running`, `Paused`, ...). */
  state: string;
  capabilities: string[];
  /** What the cluster should do with it: run it, keep it paused, or never start it again. */
  desired: "running" | "paused" | "killed";
  /**
   * Set for an instance of a template (virtual actor): activated by its first message,
   * removed from the registry again when passivated (its checkpoint stays).
   */
  template?: string;
  updatedAt: number;
}

export const AGENT_RECORD_VERSION = 1;

/** Every reader of the registry reads its values through this: a record a newer Kova wrote is refused by all, misread by none. */
export const AGENT_RECORD_FORMAT = recordFormat<AgentRecord>({
  describe: (id) => `registry record of agent ${id}`,
  version: AGENT_RECORD_VERSION,
  readable: [1],
});
