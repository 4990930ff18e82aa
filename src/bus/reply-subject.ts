import { isValidId } from "../core/index.js";
import type { Subjects } from "./subjects.js";

/** nats.js's default inbox prefix: `_INBOX.<nuid>…`. */
export const DEFAULT_INBOX_PREFIX = "_INBOX";

/**
 * The reply subject nats-server puts on a request that reached this account through a
 * service import (`_R_.<random>.<random>`): the server maps an answer to it back to the
 * requester's own reply subject in the requester's account, so a requester cannot point
 * it at a subject of this one (deploy/nats/accounts.conf puts every non-node role in an
 * account of its own for exactly that).
 */
export const SERVICE_IMPORT_REPLY_PREFIX = "_R_";

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
  if (underPrefix(replyTo, inboxPrefixes)) return undefined;
  const agentPrefix = `${subjects.prefix}.a2a.`;
  if (replyTo.startsWith(agentPrefix) && isValidId(replyTo.slice(agentPrefix.length))) return undefined;
  return `may name only a reply inbox (${wildcards(inboxPrefixes)}) or an agent inbox of this cluster (${agentPrefix}<agentId>), not ${quoted(replyTo)}`;
}

/**
 * Where a node may answer a core NATS request (the rpc fast path, the control endpoints,
 * `$SRV` discovery), given the request's reply subject, which the requester chose: a
 * reply inbox (as for `replyTo`) or a service import's reply. Not an agent inbox, which
 * `replyTo` allows: a core answer is not an envelope, so in a mailbox it could only be a
 * dead letter. Without this check a requester in the nodes' account makes a node write
 * its answer into `$KV.…` (the registry, the leases): nats-server checks a publish's
 * subject against the publisher's permissions, never its reply subject.
 * @returns undefined when allowed, else why not
 */
export function coreReplyProblem(reply: string, inboxPrefixes: readonly string[]): string | undefined {
  const allowed = [...inboxPrefixes, SERVICE_IMPORT_REPLY_PREFIX];
  if (underPrefix(reply, allowed)) return undefined;
  return `a request's reply subject may name only a reply inbox (${wildcards(allowed)}), not ${quoted(reply)}`;
}

/** `<prefix>.<at least one more token>` for one of the prefixes. */
function underPrefix(subject: string, prefixes: readonly string[]): boolean {
  return prefixes.some((p) => subject.startsWith(`${p}.`) && subject.length > p.length + 1 && !subject.endsWith("."));
}

function wildcards(prefixes: readonly string[]): string {
  return prefixes.map((p) => `${p}.>`).join(", ");
}

function quoted(subject: string): string {
  return JSON.stringify(subject.length > 80 ? `${subject.slice(0, 80)}…` : subject);
}
