import { KvStore, type KvConnection } from "../bus/index.js";
import { recordFormat } from "../core/index.js";

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

/** Settings a newer Kova wrote are refused: running the agent on a model it was not switched to would be worse. */
export const SETTINGS_FORMAT = recordFormat<AgentSettings>({
  describe: (agentId) => `settings of agent ${agentId}`,
  version: SETTINGS_VERSION,
  readable: [1],
  read: (_agentId, value) => {
    const model = (value as AgentSettings | null)?.model;
    return model === undefined ? {} : { model };
  },
});

/**
 * Settings in NATS KV `kova_<cluster>_agent_settings`, key = agent id, JSON. A model
 * switch is written here before it is applied, so the node that takes an agent over
 * keeps using the model it was switched to.
 */
export class NatsSettingsStore implements SettingsStore {
  private constructor(readonly store: KvStore<AgentSettings>) {}

  /** @throws JetStream errors when JetStream is unavailable */
  static async open(opts: { js: KvConnection; cluster: string; replicas?: number }): Promise<NatsSettingsStore> {
    return new NatsSettingsStore(await KvStore.open(opts.js, opts.cluster, "agentSettings", SETTINGS_FORMAT, { replicas: opts.replicas }));
  }

  async get(agentId: string): Promise<AgentSettings> {
    return (await this.store.get(agentId))?.value ?? {};
  }

  async set(agentId: string, settings: AgentSettings): Promise<void> {
    await this.store.put(agentId, settings);
  }
}
