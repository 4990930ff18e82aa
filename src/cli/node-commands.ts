import type { Command } from "commander";
import { createTerminalLogger } from "../core/index.js";
import { defaultConfig, loadConfig, KovaNode, installShutdown } from "../node/index.js";
import { ActorTypeRegistry, counterActor } from "../actors/index.js";

/**
 * `kova node start [--config kova.toml]`: runs one cluster node in the foreground until
 * SIGTERM/SIGINT (graceful: drain, release, leave) or a second signal (immediate exit).
 */
export function register(program: Command): void {
  const node = program.command("node").description("run a Kova cluster node");
  node
    .command("start")
    .description("start a node: join the cluster, host actors, serve control requests")
    .option("-c, --config <path>", "kova.toml to read (default: built-in defaults + environment)")
    .option("--grace-ms <ms>", "how long a graceful stop may take before the process exits anyway", "30000")
    .action(async (opts: { config?: string; graceMs: string }) => {
      const config = opts.config ? await loadConfig(opts.config) : defaultConfig();
      const logger = createTerminalLogger();
      // A stray rejection in a long-running node is logged, not fatal: everything that
      // matters is journaled or fenced, and killing the node would move all its actors.
      process.on("unhandledRejection", (err) => logger.error({ err }, "unhandled rejection"));
      // The quick start's example actor; applications add their types through config modules.
      const types = new ActorTypeRegistry([counterActor]);
      const kova = await KovaNode.start({ config, logger, types });
      // `[gateway]` in the node's config: the node serves HTTP too, on its own connection.
      // Loaded only then, so a node without it does not load express and the A2A SDK.
      let gateway: Awaited<ReturnType<typeof import("./gateway-commands.js").startGatewayFor>> | undefined;
      try {
        gateway = config.gateway ? await (await import("./gateway-commands.js")).startGatewayFor(config, logger, { bus: kova.busClient }) : undefined;
      } catch (err) {
        // A node whose [gateway] cannot serve does not run on half-started: it hands its
        // actors back and leaves, and the error says what to change.
        await kova.stop("gateway failed to start").catch((e: unknown) => logger.warn({ err: e }, "node stop after the gateway failure"));
        throw err;
      }
      if (gateway) logger.info({ url: gateway.url }, "gateway serving");
      installShutdown({
        stop: async (reason) => {
          await gateway?.close();
          await kova.stop(reason);
        },
        logger,
        graceMs: Number(opts.graceMs) || 30_000,
      });
      // The process now lives on its connections and timers; exit comes from the shutdown
      // handler, or from here when the node failed over (its WAL failed): non-zero, so a
      // supervisor notices and restarts it once the disk is repaired.
      void kova.closed().then((err) => {
        if (!err) return;
        logger.fatal({ err }, "node stopped after a failure; its actors moved to its peers");
        process.exit(1);
      });
    });
}
