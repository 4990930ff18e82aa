import type { Command } from "commander";
import { ArgumentError, createTerminalLogger, type Logger } from "../core/index.js";
import { defaultConfig, loadConfig, type NodeConfig, installShutdown } from "../node/index.js";
import type { Bus } from "../bus/index.js";
import type { Gateway } from "../gateway/index.js";
import { dirname } from "node:path";
import { withCluster } from "./cluster-commands.js";
import { print, table } from "./output.js";
import { targetOptions, type TargetOpts } from "./target.js";

// express and the A2A SDK load only when a gateway command runs: every other command
// (and a node without [gateway]) starts without them.
const gatewayModule = () => import("../gateway/index.js");

/**
 * `kova gateway start` (HTTP: A2A, OpenAI-compatible chat, web view) and
 * `kova gateway keys add|ls|rm|hash` (the API keys it accepts). docs/gateway.md.
 */
export function register(program: Command): void {
  const gw = program.command("gateway").description("the HTTP gateway: A2A v1.0, OpenAI-compatible /v1/chat/completions, web view");
  gw.command("start")
    .description("serve HTTP for the cluster named in the config ([gateway] in kova.toml)")
    .option("-c, --config <path>", "kova.toml to read ([nats], [cluster] name and [gateway])")
    .option("--listen <host:port>", "overrides [gateway] listen")
    .option("--grace-ms <ms>", "how long a graceful stop may take", "10000")
    .action(async (opts: { config?: string; listen?: string; graceMs: string }) => {
      const config = opts.config ? await loadConfig(opts.config) : defaultConfig();
      const logger = createTerminalLogger();
      process.on("unhandledRejection", (err) => logger.error({ err }, "unhandled rejection"));
      const gateway = await startGatewayFor(config, logger, { ...(opts.listen ? { listen: opts.listen } : {}) });
      process.stdout.write(`kova gateway listening on ${gateway.url} (cluster ${config.cluster}, auth ${gateway.config.auth})\n`);
      installShutdown({ stop: () => gateway.close(), logger, graceMs: Number(opts.graceMs) || 10_000 });
    });

  const keys = gw.command("keys").description("API keys the gateway accepts (stored hashed in the cluster's KV bucket)");
  targetOptions(keys.command("add <name>").description("create a key: prints it once; only its hash is stored"))
    .option("--agents <ids>", "comma-separated agents the key may use (default: every agent)")
    .option("--rate <perMinute>", "requests per minute for this key (default: [gateway] rate_per_minute)")
    .option("--max-instances <n>", "template instances the key may hold (default: [gateway] max_instances)")
    .option("--max-concurrent-runs <n>", "runs the key may have going at once (default: [gateway] max_concurrent_runs)")
    .option("--tokens-per-minute <n>", "tokens the key's runs may use per minute (default: [gateway] tokens_per_minute)")
    .option("--admin", "an operator's key: sees every key's sessions, instances and agents (never the default)")
    .option("--json", "print JSON")
    .action(
      (
        name: string,
        o: TargetOpts & { agents?: string; rate?: string; maxInstances?: string; maxConcurrentRuns?: string; tokensPerMinute?: string; admin?: boolean },
      ) =>
        withCluster(o, async (nc, cluster) => {
          const rate = positive(o.rate, "--rate", "requests per minute");
          const limits = {
            ...(rate ? { ratePerMinute: rate } : {}),
            ...optional("maxInstances", positive(o.maxInstances, "--max-instances", "instances")),
            ...optional("maxConcurrentRuns", positive(o.maxConcurrentRuns, "--max-concurrent-runs", "runs")),
            ...optional("tokensPerMinute", positive(o.tokensPerMinute, "--tokens-per-minute", "tokens per minute")),
            ...(o.admin ? { admin: true } : {}),
          };
          const keys = await (await gatewayModule()).KeyAdmin.open(nc, cluster);
          const agents = o.agents
            ?.split(",")
            .map((a) => a.trim())
            .filter(Boolean);
          const { key, record } = await keys.add(name, { ...(agents ? { agents } : {}), ...limits });
          const id = (await gatewayModule()).keyIdOf(record.hash);
          if (o.json)
            return print({
              name,
              id,
              key,
              agents: record.agents ?? null,
              ratePerMinute: record.ratePerMinute ?? null,
              admin: record.admin === true,
              maxInstances: record.maxInstances ?? null,
              maxConcurrentRuns: record.maxConcurrentRuns ?? null,
              tokensPerMinute: record.tokensPerMinute ?? null,
            });
          process.stdout.write(`${key}\n`);
          process.stderr.write(`key ${name} (id ${id}) created; this is the only time it is shown: store it now (gateways accept it within a second)\n`);
        }),
    );
  targetOptions(keys.command("ls").description("list keys (names and limits, never the keys)"))
    .option("--json", "print JSON")
    .action((o: TargetOpts) =>
      withCluster(o, async (nc, cluster) => {
        const list = await (await (await gatewayModule()).KeyAdmin.open(nc, cluster)).list();
        if (o.json) return print(list);
        table(
          ["NAME", "ID", "AGENTS", "RATE/MIN", "ADMIN", "CREATED"],
          list.map((k) => [
            k.name,
            k.id,
            k.agents?.join(",") ?? "*",
            k.ratePerMinute ? String(k.ratePerMinute) : "default",
            k.admin ? "yes" : "no",
            new Date(k.createdAt).toISOString(),
          ]),
        );
      }),
    );
  targetOptions(keys.command("rm <name>").description("remove a key: gateways refuse it within a second")).action((name: string, o: TargetOpts) =>
    withCluster(o, async (nc, cluster) => {
      const removed = await (await (await gatewayModule()).KeyAdmin.open(nc, cluster)).remove(name);
      if (!removed) throw new ArgumentError("name", `no key named ${name} (kova gateway keys ls lists them)`);
      process.stdout.write(`removed key ${name}\n`);
    }),
  );
  keys
    .command("hash")
    .description("read a key on stdin and print its hash, for [[gateway.keys]] hash in kova.toml")
    .action(async () => {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      const key = Buffer.concat(chunks).toString("utf8").trim();
      if (key === "") throw new ArgumentError("stdin", 'no key given: echo -n "$KEY" | kova gateway keys hash');
      process.stdout.write(`${(await gatewayModule()).hashKey(key)}\n`);
    });
}

/**
 * Starts a gateway for a node config's cluster and `[gateway]`: on its own connection, or
 * on a node's (`kova node start` with `[gateway]` in its config).
 * @throws ConfigError from `[gateway]`; what Gateway.start throws
 */
export async function startGatewayFor(config: NodeConfig, logger: Logger, opts: { listen?: string; bus?: Bus } = {}): Promise<Gateway> {
  const { Gateway, parseGatewayConfig } = await gatewayModule();
  const raw = { ...(config.gateway ?? {}), ...(opts.listen ? { listen: opts.listen } : {}) };
  const gwConfig = parseGatewayConfig(raw, { ...(config.configPath ? { baseDir: dirname(config.configPath) } : {}) });
  return Gateway.start({
    config: gwConfig,
    cluster: config.cluster,
    logger,
    ...(opts.bus ? { bus: opts.bus } : { servers: config.natsUrls ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222" }),
    ...(config.security ? { security: config.security } : {}),
    ...(config.replicas ? { replicas: config.replicas } : {}),
  });
}

/** A whole number of at least 1 from a flag, or undefined when the flag is absent. */
function positive(value: string | undefined, flag: string, what: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new ArgumentError(flag, `must be a whole number of ${what}, at least 1, not ${JSON.stringify(value)}`);
  return n;
}

function optional<K extends string>(key: K, value: number | undefined): Partial<Record<K, number>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, number>);
}
