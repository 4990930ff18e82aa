import type { KV } from "@nats-io/kv";
import type { Logger } from "../core/logger.js";

/**
 * Follows a KV bucket (every current entry, then each change) for the node's workflow
 * services (timers, subject waits). `onPut` gets each stored value as `decode` reads it
 * (a value it refuses, such as one of a newer format, is logged and skipped), `onDelete`
 * each removed key. A watch that ends (its server went away) is restarted a second later:
 * a service that stopped following its bucket would miss timers and waits. Resolves once
 * the first watch runs.
 * @throws JetStream errors when the first watch cannot start
 */
export async function followBucket<T>(
  kv: KV,
  key: string,
  handlers: { decode: (key: string, value: unknown) => T; onPut: (key: string, value: T) => void; onDelete: (key: string) => void },
  log: Logger,
): Promise<{ stop(): void }> {
  let stopped = false;
  let current: { stop(): void } | undefined;
  const start = async (): Promise<void> => {
    const iter = await kv.watch({ key });
    current = iter;
    if (stopped) iter.stop();
    void (async () => {
      try {
        for await (const e of iter) {
          if (e.operation !== "PUT") {
            handlers.onDelete(e.key);
            continue;
          }
          try {
            handlers.onPut(e.key, handlers.decode(e.key, e.json<unknown>()));
          } catch (err) {
            log.warn({ err, key: e.key }, "unreadable entry skipped");
          }
        }
      } catch (err) {
        log.warn({ err }, "bucket watch ended");
      }
      if (!stopped) setTimeout(() => void start().catch((err: unknown) => log.warn({ err }, "bucket watch restart failed")), 1000).unref();
    })();
  };
  await start();
  return {
    stop: () => {
      stopped = true;
      current?.stop();
    },
  };
}
