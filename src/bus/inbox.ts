import { createInbox, type NatsConnection } from "@nats-io/transport-node";

/**
 * A new reply inbox under the connection's own inbox prefix (`[nats] inbox_prefix`), so a
 * client whose account grants it only `_INBOX_<name>.>` receives its replies. nats.js
 * applies the prefix to its own requests but its `createInbox()` does not read it.
 */
export function newInbox(nc: NatsConnection): string {
  return createInbox((nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
}
