import { pino, type Logger, type LoggerOptions } from "pino";
import { lineStream } from "./log-lines.js";

export type { Logger };

/**
 * The root logger. Library code never logs through console: each component takes a
 * child (`logger.child({ component: "bus" })`). `KOVA_LOG_LEVEL` sets the level;
 * tests default to `silent` unless it is set.
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const level = process.env.KOVA_LOG_LEVEL ?? (process.env.VITEST !== undefined ? "silent" : "info");
  return pino({ level, base: { pid: process.pid }, ...options });
}

/**
 * The logger of a command a person may be watching: JSON lines when stdout is piped (to
 * a file, journald, a log shipper), readable coloured lines when it is a terminal.
 * `KOVA_LOG_FORMAT=json|pretty` overrides the guess.
 */
export function createTerminalLogger(out: NodeJS.WriteStream = process.stdout): Logger {
  const format = process.env.KOVA_LOG_FORMAT ?? (out.isTTY ? "pretty" : "json");
  if (format !== "pretty") return createLogger();
  return pino({ level: process.env.KOVA_LOG_LEVEL ?? "info", base: { pid: process.pid } }, lineStream(out, out.isTTY === true));
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
