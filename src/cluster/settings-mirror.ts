import type { JetStreamClient } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { type Logger, componentLogger, UnsupportedFormatError } from "../core/index.js";
import { NatsSettingsStore, SETTINGS_FORMAT, type AgentSettings, type SettingsStore } from "../agents/index.js";
import { KvMirror, type MirrorTiming } from "./kv-mirror.js";

/**
 * The agents' run-time settings (`kova_<cluster>_agent_settings`, the model a `model=<name>`
 * signal switched to) as a node reads them: from a watched copy of the bucket, so each run
 * learns its agent's model without a round trip to NATS. A switch is made on the agent's
 * host (noted here at once); a node that takes the agent over later has long received it
 * through the watch. While the copy is not known to be current (a watch being restarted)
 * the store reads the bucket instead. Settings a newer Kova wrote are kept in the copy as
 * that refusal, so the agent's run fails naming them instead of running on the default model.
 */
export class MirroredSettingsStore implements SettingsStore {
  private constructor(
    private readonly bucket: NatsSettingsStore,
    private readonly mirror: KvMirror<AgentSettings | UnsupportedFormatError>,
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
    const mirror = await KvMirror.start<AgentSettings | UnsupportedFormatError>(
      bucket.store.kv,
      componentLogger(opts.logger, "settings", { bucket: "agent_settings" }),
      {
        decode: readOrRefusal,
        nc: opts.nc,
        ...opts.timing,
      },
    );
    return new MirroredSettingsStore(bucket, mirror);
  }

  /** @throws UnsupportedFormatError when the agent's settings were stored by a newer Kova */
  async get(agentId: string): Promise<AgentSettings> {
    if (!this.mirror.healthy()) return this.bucket.get(agentId);
    const value = this.mirror.get(agentId)?.value ?? {};
    if (value instanceof UnsupportedFormatError) throw value;
    return value;
  }

  async set(agentId: string, settings: AgentSettings): Promise<void> {
    this.mirror.note(agentId, settings, await this.bucket.store.put(agentId, settings));
  }

  close(): void {
    this.mirror.stop();
  }
}

/** Unreadable settings stay in the copy as the error (a mirror leaves out what its decoder throws). */
function readOrRefusal(agentId: string, value: unknown): AgentSettings | UnsupportedFormatError {
  try {
    return SETTINGS_FORMAT.decode(agentId, value);
  } catch (err) {
    if (err instanceof UnsupportedFormatError) return err;
    throw err;
  }
}
