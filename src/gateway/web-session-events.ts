import type { Request, Response } from "express";
import { isValidId } from "../core/index.js";
import type { Bus, KovaEvent, StoredEventsReader } from "../bus/index.js";
import { mayUse, type Principal } from "./auth.js";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";
import { sessionNotFound } from "./sessions.js";
import { publicEvent } from "./public-events.js";

/** A comment line this often keeps proxies from closing an idle stream. */
const KEEP_ALIVE_MS = 15_000;

/**
 * `GET /ui/api/sessions/<id>/events`: SSE of a session's events from its first one, then
 * live. Each stream holds one ordered consumer on EVENTS, so whatever ends the request
 * (the client leaving at any moment, also while the consumer is still being created)
 * must stop and delete it: the close handler is hooked before the first await, and every
 * await is followed by a check that the client is still there.
 *
 * A key sees its own sessions only (an admin key every one), and a key restricted to some
 * agents only the events of their runs (RunAgentFilter).
 */
export async function sessionEvents(deps: { bus: Bus }, req: Request, res: Response): Promise<void> {
  const sessionId = req.params.sessionId as string;
  if (!isValidId(sessionId)) throw new GatewayHttpError(400, GatewayErrorCode.BAD_REQUEST, `${JSON.stringify(sessionId)} is not a session id`);
  // Only the caller's own sessions (its scope: core/principals.ts); another's is 404 as if it did not exist.
  if (!seesSession(req.principal, sessionId)) throw sessionNotFound(sessionId);
  const { bus } = deps;
  const visible = new RunAgentFilter(req.principal);
  let closed = false;
  let events: StoredEventsReader | undefined;
  let keepAlive: NodeJS.Timeout | undefined;
  const release = () => {
    clearInterval(keepAlive);
    // Stops the read and deletes its consumer.
    events?.close();
  };
  res.on("close", () => {
    closed = true;
    release();
  });
  // The socket may have gone before this handler ran (its close event then came already).
  const gone = () => closed || req.socket.destroyed;
  try {
    if (gone()) return;
    events = await bus.readStoredEvents(bus.subjects.sessionEvents(sessionId), undefined, { maxMessages: 512 });
    if (gone()) return;
    res.status(200);
    res.setHeader("Content-Type", "text/event-stream");
    res.setHeader("Cache-Control", "no-cache");
    res.setHeader("X-Accel-Buffering", "no");
    res.flushHeaders();
    keepAlive = setInterval(() => res.write(": keep-alive\n\n"), KEEP_ALIVE_MS);
    let caughtUp = false;
    for await (const m of events.messages) {
      if (gone()) return;
      let event: KovaEvent | undefined;
      try {
        event = m.json<KovaEvent>();
      } catch {
        event = undefined;
      }
      if (event && visible.shows(event)) res.write(`data: ${JSON.stringify(forView(event))}\n\n`);
      if (!caughtUp && m.info.pending === 0) {
        caughtUp = true;
        res.write("event: caught_up\ndata: {}\n\n");
      }
    }
    // The consumer stopped (the server went away): end the stream; EventSource reconnects.
    if (!gone()) res.end();
  } finally {
    release();
  }
}

/**
 * Which events of a session a key sees. Events name no agent; a run's `run_started`
 * carries its agent id (docs/protocol.md, "Agent runs"), so the filter learns each run's
 * agent from it and shows a restricted key (one with `agents`) only the runs of agents it
 * may use. An event of a run it cannot attribute (no `run_started` seen) is not shown to
 * such a key: what cannot be checked is not shown. A key without `agents` sees everything.
 */
export class RunAgentFilter {
  private readonly agentOfRun = new Map<string, string>();
  constructor(private readonly principal: Principal | undefined) {}

  shows(event: KovaEvent): boolean {
    const agentId = (event.data as { agentId?: unknown } | undefined)?.agentId;
    if (event.type === "run_started" && typeof agentId === "string" && !this.agentOfRun.has(event.runId)) this.agentOfRun.set(event.runId, agentId);
    if (this.principal !== undefined && this.principal.agents === undefined) return true;
    const owner = this.agentOfRun.get(event.runId);
    return owner !== undefined && mayUse(this.principal, owner);
  }
}

/** Whether the caller may watch a session: its own (in its scope), or any for an admin. */
export function seesSession(p: Principal | undefined, sessionId: string): boolean {
  return p !== undefined && (p.admin || (p.sessionScope !== undefined && sessionId.startsWith(p.sessionScope)));
}

/**
 * An event as the web view gets it. Tokens are many and the tree needs only their count:
 * their size, not their text. Errors are the user's version (public-events.ts): code and
 * message, no endpoint, path, key or stack trace.
 */
export function forView(event: KovaEvent): KovaEvent {
  return event.type === "model_delta" ? { ...event, data: { chars: String((event.data as { text?: unknown })?.text ?? "").length } } : publicEvent(event);
}
