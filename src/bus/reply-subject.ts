import { isValidId } from "../core/ids.js";
import type { Subjects } from "./subjects.js";

/** nats.js's default inbox prefix: `_INBOX.<nuid>…`. */
export const DEFAULT_INBOX_PREFIX = "_INBOX";

/**
 * Where a node may publish the reply to a message, given the message's `replyTo`: a reply
 * inbox (`_INBOX.…`, or a configured prefix such as `_INBOX_billing` that an account's
 * permissions grant a client) or an agent inbox of this cluster
 * (`kova.<c>.a2a.<agentId>`). Anything else — `$KV.…`, `$JS.…`, `$SRV.…`, `$SYS.…`,
 * another cluster's prefix, Kova's own events or DLQ — would let a sender make the node
 * write where the sender itself may not, so it is refused before the turn runs.
 * @returns undefined when allowed, else why not (for the DLQ reason and the error)
 */
export function replyToProblem(replyTo: string, subjects: Subjects, inboxPrefixes: readonly string[]): string | undefined {
  for (const prefix of inboxPrefixes) {
    if (replyTo.startsWith(`${prefix}.`) && replyTo.length > prefix.length + 1 && !replyTo.endsWith(".")) return undefined;
  }
  const agentPrefix = `${subjects.prefix}.a2a.`;
  if (replyTo.startsWith(agentPrefix) && isValidId(replyTo.slice(agentPrefix.length))) return undefined;
  return `may name only a reply inbox (${inboxPrefixes.map((p) => `${p}.>`).join(", ")}) or an agent inbox of this cluster (${agentPrefix}<agentId>), not ${JSON.stringify(replyTo.length > 80 ? `${replyTo.slice(0, 80)}…` : replyTo)}`;
}
