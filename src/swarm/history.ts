import { KovaTimeoutError } from "../core/index.js";
import { isMessageGone, type Bus, type KovaEvent } from "../bus/index.js";

/**
 * Every stored event of one run, oldest first: the run's own subject
 * (`kova.<c>.events.<sessionId>.<runId>`) read with an ordered consumer up to the last
 * message it held when the read began. A coordinator reads its run's events before it
 * does anything (a journaled step). A takeover normally replays that read and every later
 * step from the step journal on NATS; the events are the second safeguard, for a turn that
 * runs again from the top without its journal entries (`[journal] nats = false`, a step
 * result too large for an entry): it continues from what the first run published — its
 * plan, the children it linked, its answer — instead of planning anew.
 * @throws KovaTimeoutError when the events cannot be read within `timeoutMs`
 */
export async function readRunEvents(bus: Bus, sessionId: string, runId: string, timeoutMs = 10_000): Promise<KovaEvent[]> {
  const stream = bus.subjects.streams.events;
  const subject = bus.subjects.events(sessionId, runId);
  const last = await bus.jsm.streams.getMessage(stream, { last_by_subj: subject }).catch((err: unknown) => {
    if (isMessageGone(err)) return null;
    throw err;
  });
  if (!last) return [];
  const lastSeq = last.seq;
  const reader = await bus.readStoredEvents(subject);
  const { messages } = reader;
  const timer = setTimeout(() => reader.close(), timeoutMs);
  const out: KovaEvent[] = [];
  let reached = false;
  try {
    for await (const m of messages) {
      try {
        out.push(m.json<KovaEvent>());
      } catch {
        // not an event: skipped, as every reader of the events stream does
      }
      if (m.seq >= lastSeq) {
        reached = true;
        break;
      }
    }
  } finally {
    clearTimeout(timer);
    reader.close();
  }
  if (!reached) throw new KovaTimeoutError(`reading the events of run ${runId}`, timeoutMs, { data: { subject } });
  return out;
}
