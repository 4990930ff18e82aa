import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { checkFormatVersion } from "../core/format-version.js";

/** Run-time settings of an agent that outlive its host: the model it was switched to. */
export interface AgentSettings {
  model?: string;
}

export interface SettingsStore {
  /** @throws UnsupportedFormatError when the agent's settings were stored by a newer Kova */
  get(agentId: string): Promise<AgentSettings>;
  set(agentId: string, settings: AgentSettings): Promise<void>;
  /** Releases what the store holds open (a watch). */
  close?(): void;
}

/** Format version of stored settings (values written before versioning have no `v`: version 1). */
export const SETTINGS_VERSION = 1;
const READABLE: readonly number[] = [1];

/**
 * An agent's stored settings as this build reads them.
 * @throws UnsupportedFormatError for settings a newer Kova wrote (running the agent on the
 *   model it was not switched to would be worse than refusing)
 */
export function readAgentSettings(agentId: string, value: unknown): AgentSettings {
  const stored = value as (AgentSettings & { v?: number }) | null;
  checkFormatVersion(`settings of agent ${agentId}`, stored?.v, READABLE);
  return stored?.model === undefined ? {} : { model: stored.model };
}

const enc = new TextEncoder();

/**
 * Settings in NATS KV `kova_<cluster>_agent_settings`, key = agent id, JSON. A model
 * switch is written here before it is applied, so the node that takes an agent over
 * keeps using the model it was switched to.
 */
export class NatsSettingsStore implements SettingsStore {
  private constructor(readonly kv: KV) {}

  static bucketName(cluster: string): string {
    return `kova_${cluster}_agent_settings`;
  }

  /** @throws JetStream errors when JetStream is unavailable */
  static async open(opts: { js: JetStreamClient; cluster: string; replicas?: number }): Promise<NatsSettingsStore> {
    return new NatsSettingsStore(await openOrCreateBucket(opts.js, NatsSettingsStore.bucketName(opts.cluster), { history: 1, replicas: opts.replicas ?? 1 }));
  }

  async get(agentId: string): Promise<AgentSettings> {
    const e = await this.kv.get(agentId);
    return e === null || e.operation !== "PUT" ? {} : readAgentSettings(agentId, e.json<unknown>());
  }

  async set(agentId: string, settings: AgentSettings): Promise<void> {
    await this.put(agentId, settings);
  }

  /** `set`, resolving with the entry's revision (a watched copy notes the write under it). */
  put(agentId: string, settings: AgentSettings): Promise<number> {
    return this.kv.put(agentId, enc.encode(JSON.stringify({ v: SETTINGS_VERSION, ...settings })));
  }
}
