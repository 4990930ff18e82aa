import { type Logger, componentLogger } from "../core/index.js";

export interface ShutdownOptions {
  /** The graceful path: stop taking messages, finish or checkpoint turns, flush, release, leave. */
  stop: (reason: string) => Promise<void>;
  logger: Logger;
  /** After this long the graceful path is abandoned and the process exits (default 30 s). */
  graceMs?: number;
  /** Injected for tests; defaults to process.exit. */
  exit?: (code: number) => void;
  signals?: NodeJS.Signals[];
  /** Signals that are logged and otherwise ignored (default SIGHUP; see installShutdown). */
  ignored?: NodeJS.Signals[];
}

/**
 * SIGTERM / SIGINT handling for a node process. The first signal starts the graceful
 * stop and exits 0 when it completes; a second signal (an impatient operator, or an
 * orchestrator's escalation) exits at once with 130, and so does a stop that outlasts
 * `graceMs`. Exiting without the graceful path is safe, only slower for the cluster:
 * leases then expire by staleness and the WAL finishes the interrupted turns on restart.
 *
 * SIGHUP is ignored (logged): its default action ends the process, and it is sent without
 * anyone asking for a stop. A terminal that closes sends it, and so does the kernel to a
 * process group that becomes orphaned while one of its members is stopped: a node frozen
 * with SIGSTOP under a service manager was killed 2 s later by the SIGHUP that followed
 * another member's exit, turning a freeze into a crash. Nothing is reloaded on SIGHUP;
 * a changed kova.toml takes effect on restart.
 * @returns a function that removes the handlers
 */
export function installShutdown(opts: ShutdownOptions): () => void {
  const exit = opts.exit ?? ((code: number) => process.exit(code));
  const signals = opts.signals ?? ["SIGTERM", "SIGINT"];
  const log = componentLogger(opts.logger, "shutdown");
  let stopping = false;

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, "second signal: exiting now without finishing the graceful stop");
      exit(130);
      return;
    }
    stopping = true;
    log.info({ signal }, "stopping gracefully (send the signal again to force exit)");
    const timer = setTimeout(() => {
      log.error({ graceMs: opts.graceMs ?? 30_000 }, "graceful stop took too long: exiting");
      exit(1);
    }, opts.graceMs ?? 30_000);
    timer.unref();
    opts
      .stop(signal)
      .then(() => {
        clearTimeout(timer);
        log.info("stopped");
        exit(0);
      })
      .catch((err: unknown) => {
        clearTimeout(timer);
        log.error({ err }, "graceful stop failed");
        exit(1);
      });
  };
  const ignored = opts.ignored ?? ["SIGHUP"];
  const onIgnored = (signal: NodeJS.Signals) => {
    log.warn({ signal }, `${signal} ignored: nothing is reloaded on it (restart the process to apply configuration changes); SIGTERM stops it`);
  };
  for (const s of signals) process.on(s, onSignal);
  for (const s of ignored) process.on(s, onIgnored);
  return () => {
    for (const s of signals) process.off(s, onSignal);
    for (const s of ignored) process.off(s, onIgnored);
  };
}
