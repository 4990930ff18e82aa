import { DeliverPolicy, type ConsumerMessages, type OrderedConsumerOptions } from "@nats-io/jetstream";
import type { BusContext } from "./context.js";

/** Where a stored-events read starts; default: the first stored event of the filter. */
export type StoredEventsFrom = { startTime: Date } | { afterSeq: number } | undefined;

/** An ordered read of the EVENTS stream; `close()` ends it and removes its consumer. */
export interface StoredEventsReader {
  readonly messages: ConsumerMessages;
  close(): void;
}

/**
 * Reads the EVENTS stream under `filter` (a run's or a session's subject) with an ordered
 * consumer, from `from` on, then live. Everything that follows a run reads this way: run
 * watchers (every ask with events, swarm subtask and gateway request), the gateway's task
 * followers and web view, the CLI's trees. `close()` stops the read and deletes the
 * consumer at once: only stopped, it stays on the server for its 5 min inactivity
 * threshold, and a busy gateway had about 4,900 of them at a time. A delete that fails
 * (no permission, NATS away) is logged at debug; that consumer still expires.
 */
export async function readStoredEvents(
  ctx: BusContext,
  filter: string,
  from?: StoredEventsFrom,
  opts: { maxMessages?: number } = {},
): Promise<StoredEventsReader> {
  const config: Partial<OrderedConsumerOptions> = { filter_subjects: filter };
  if (from && "startTime" in from) Object.assign(config, { deliver_policy: DeliverPolicy.StartTime, opt_start_time: from.startTime.toISOString() });
  else if (from && from.afterSeq > 0) Object.assign(config, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from.afterSeq + 1 });
  const consumer = await ctx.js.consumers.get(ctx.subjects.streams.events, config);
  let messages: ConsumerMessages;
  try {
    messages = await consumer.consume(opts.maxMessages ? { max_messages: opts.maxMessages } : {});
  } catch (err) {
    void consumer.delete().catch(() => undefined);
    throw err;
  }
  let closed = false;
  return {
    messages,
    close: () => {
      if (closed) return;
      closed = true;
      messages.stop();
      void consumer.delete().catch((err: unknown) => ctx.log.debug({ err, filter }, "an events reader's consumer was not deleted; it expires when idle"));
    },
  };
}
