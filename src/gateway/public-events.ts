import { publicError } from "../core/index.js";
import type { KovaEvent } from "../bus/index.js";

const FAILED = { code: "FAILED", message: "failed" };

/**
 * An event's data as an end user sees it (the web view, a task's status messages): every
 * `error` in it (a run's, a step's, a tool result's) reduced to its code and a message
 * without internals (core/public-error.ts); its `data` (a model's endpoint, a failed
 * branch's own errors) stays with the operators, in the EVENTS stream and the logs.
 */
export function publicEventData(data: unknown): unknown {
  if (typeof data !== "object" || data === null || Array.isArray(data)) return data;
  const d = data as Record<string, unknown>;
  if (typeof d.error !== "object" || d.error === null) return data;
  return { ...d, error: publicError(d.error as { code?: unknown; message?: unknown }, FAILED) };
}

/** The event with its data as publicEventData leaves it. */
export function publicEvent(event: KovaEvent): KovaEvent {
  const data = publicEventData(event.data);
  return data === event.data ? event : { ...event, data };
}
