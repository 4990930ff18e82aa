import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { isNatsTimeout } from "./nats-errors.js";

/**
 * Per-try timeouts of an actor consumer's create or delete, the last one the JetStream
 * client's usual 5 s. On nats-server 2.9 these requests are answered by the consumer's raft
 * leader once the meta group applied them: while that group has no leader (an election,
 * a server too busy to keep its raft heartbeats) the server does the work and nobody
 * answers, and the client waits out its whole timeout, which on a takeover the actor waits
 * too. Sent again, the request is answered once the first is done, queued behind it on the
 * meta leader: a delete with "consumer not found" (done), a create of the consumer the
 * first try made as an update of it. Both are idempotent, so a try that was only slow costs
 * nothing but its duplicate; a server that is slow on every request still gets the full
 * 5 s on the last try.
 */
export const CONSUMER_TRIES_MS: readonly number[] = [1_500, 3_000, 5_000];

const managers = new WeakMap<NatsConnection, Map<number, Promise<JetStreamManager>>>();

/** A JetStream manager on `nc` whose requests time out after `timeoutMs` (made once per connection and timeout). */
function manager(nc: NatsConnection, timeoutMs: number): Promise<JetStreamManager> {
  let byTimeout = managers.get(nc);
  if (!byTimeout) managers.set(nc, (byTimeout = new Map()));
  let m = byTimeout.get(timeoutMs);
  if (!m) byTimeout.set(timeoutMs, (m = jetstreamManager(nc, { timeout: timeoutMs, checkAPI: false })));
  return m;
}

/**
 * Runs an idempotent consumer request in tries of growing timeouts ({@link CONSUMER_TRIES_MS});
 * only a timeout is tried again.
 * @throws the last try's error, or the first error that is not a timeout
 */
export async function consumerRequest<T>(nc: NatsConnection, call: (jsm: JetStreamManager) => Promise<T>, triesMs = CONSUMER_TRIES_MS): Promise<T> {
  for (let i = 0; ; i++) {
    const jsm = await manager(nc, triesMs[i]!);
    try {
      return await call(jsm);
    } catch (err) {
      if (!isNatsTimeout(err) || i + 1 >= triesMs.length) throw err;
    }
  }
}
