import { pino, type Logger, type LoggerOptions } from "pino";
import { lineStream } from "./log-lines.js";

export type { Logger };

/**
 * The root logger. Library code never logs through console: each component takes a
 * child (`componentLogger(logger, "bus")`). `KOVA_LOG_LEVEL` sets the level;
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

/**
 * `parent.child(bindings)` without the keys `parent` already binds to the same value.
 * pino writes a child's bindings after its parent's without merging them, so a key bound
 * twice (a node's `nodeId`, bound again by the actor host it hands its logger to) would
 * appear twice in one JSON line.
 */
export function childLogger(parent: Logger, bindings: Record<string, unknown>): Logger {
  const bound = parent.bindings();
  const fresh = Object.fromEntries(Object.entries(bindings).filter(([k, v]) => bound[k] !== v));
  return Object.keys(fresh).length === 0 ? parent : parent.child(fresh);
}

/**
 * The logger of one part of Kova: `component` names it, unless the logger it was handed
 * already names another component (a coordinator's logger handed to its run watcher):
 * then that stays and the part is named in `part`, since a key bound twice would be
 * written twice.
 */
export function componentLogger(parent: Logger, component: string, bindings: Record<string, unknown> = {}): Logger {
  const bound = parent.bindings();
  const name = bound.component === undefined || bound.component === component ? { component } : bound.part === undefined ? { part: component } : {};
  return childLogger(parent, { ...name, ...bindings });
}
