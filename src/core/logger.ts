import { pino, type Logger, type LoggerOptions } from "pino";

export type { Logger };

/**
 * The root logger. Library code never logs through console: each component takes a
 * child (`logger.child({ component: "bus" })`). `KOVA_LOG_LEVEL` sets the level;
 * tests default to `silent` unless it is set.
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const level =
    process.env.KOVA_LOG_LEVEL ?? (process.env.VITEST !== undefined ? "silent" : "info");
  return pino({ level, base: { pid: process.pid }, ...options });
}

/** A logger that writes nothing: what library code embedded in someone else's process uses unless given one. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}

let root: Logger | undefined;

/** A process-wide default logger, made on first use. */
export function defaultLogger(): Logger {
  root ??= createLogger();
  return root;
}
