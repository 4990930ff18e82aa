import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import type { Logger } from "../core/logger.js";
import { NatsSettingsStore, type AgentSettings, type SettingsStore } from "../agents/settings.js";
import { KvMirror, openBucket, type MirrorTiming } from "./kv-mirror.js";

const enc = new TextEncoder();

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
    private readonly kv: KV,
    private readonly mirror: KvMirror<AgentSettings>,
  ) {}

  /** @throws NATS errors when the bucket cannot be opened or watched */
  static async open(opts: { nc: NatsConnection; cluster: string; replicas: number; logger: Logger; timing?: MirrorTiming }): Promise<MirroredSettingsStore> {
    const kv = await openBucket(opts.nc, NatsSettingsStore.bucketName(opts.cluster), opts.replicas);
    const mirror = await KvMirror.start<AgentSettings>(kv, opts.logger.child({ bucket: "agent_settings" }), { nc: opts.nc, ...opts.timing });
    return new MirroredSettingsStore(kv, mirror);
  }

  async get(agentId: string): Promise<AgentSettings> {
    if (this.mirror.healthy()) return this.mirror.get(agentId)?.value ?? {};
    const e = await this.kv.get(agentId);
    return e === null || e.operation !== "PUT" ? {} : e.json<AgentSettings>();
  }

  async set(agentId: string, settings: AgentSettings): Promise<void> {
    const revision = await this.kv.put(agentId, enc.encode(JSON.stringify(settings)));
    this.mirror.note(agentId, settings, revision);
  }

  close(): void {
    this.mirror.stop();
  }
}
