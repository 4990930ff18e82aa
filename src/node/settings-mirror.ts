import type { JetStreamClient } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../core/logger.js";
import { NatsSettingsStore, type AgentSettings, type SettingsStore } from "../agents/settings.js";
import { KvMirror, type MirrorTiming } from "./kv-mirror.js";
import { componentLogger } from "../core/logger.js";

/**
 * The agents' run-time settings (`kova_<cluster>_agent_settings`, the model a `model=<name>`
 * signal switched to) as a node reads them: from a watched copy of the bucket, so each run
 * learns its agent's model without a round trip to NATS. A switch is made on the agent's
 * host (noted here at once); a node that takes the agent over later has long received it
 * through the watch. While the copy is not known to be current (a watch being restarted)
 * the store reads the bucket instead.
 */
export class MirroredSettingsStore implements SettingsStore {
  private constructor(
    private readonly bucket: NatsSettingsStore,
    private readonly mirror: KvMirror<AgentSettings>,
  ) {}

  /** @throws NATS errors when the bucket cannot be opened or watched */
  static async open(opts: {
    js: JetStreamClient;
    nc: NatsConnection;
    cluster: string;
    replicas: number;
    logger: Logger;
    timing?: MirrorTiming;
  }): Promise<MirroredSettingsStore> {
    const bucket = await NatsSettingsStore.open(opts);
    const mirror = await KvMirror.start<AgentSettings>(bucket.kv, componentLogger(opts.logger, "settings", { bucket: "agent_settings" }), {
      nc: opts.nc,
      ...opts.timing,
    });
    return new MirroredSettingsStore(bucket, mirror);
  }

  async get(agentId: string): Promise<AgentSettings> {
    if (this.mirror.healthy()) return this.mirror.get(agentId)?.value ?? {};
    return this.bucket.get(agentId);
  }

  async set(agentId: string, settings: AgentSettings): Promise<void> {
    this.mirror.note(agentId, settings, await this.bucket.put(agentId, settings));
  }

  close(): void {
    this.mirror.stop();
  }
}
