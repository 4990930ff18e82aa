import { loadConfig } from "../node/config.js";

/** The options every networked CLI command takes to find its cluster. */
export interface TargetOpts {
  server?: string;
  cluster?: string;
  config?: string;
  json?: boolean;
}

/**
 * Which NATS servers and cluster a command talks to. Precedence: flags, then the
 * environment (NATS_URL, KOVA_CLUSTER), then the `--config` file, then the defaults
 * a single-node quick start uses.
 */
export async function resolveTarget(o: TargetOpts): Promise<{ urls: string; cluster: string }> {
  let urls = o.server ?? process.env.NATS_URL;
  let cluster = o.cluster ?? process.env.KOVA_CLUSTER;
  if (o.config) {
    const cfg = await loadConfig(o.config);
    urls ??= cfg.natsUrls?.join(",");
    cluster ??= cfg.cluster;
  }
  return { urls: urls ?? "nats://127.0.0.1:4222", cluster: cluster ?? "default" };
}
