import { parseInstanceId } from "../core/index.js";
import { requestActivation } from "./activation.js";
import type { BusContext } from "./context.js";
import { UnknownAgentError } from "./errors.js";
import { registryKnows } from "./unknown-agents.js";

/**
 * How long a connection trusts the registry's "declared" for an agent before it asks again.
 * An agent whose declaration is removed meanwhile gets the message stored, as one removed
 * right after the lookup would: the unknown-agent sweep dead-letters it, and the asker waits
 * its timeout. An id found unknown is never remembered (it may be declared any moment).
 */
export const KNOWN_AGENT_TTL_MS = 10_000;
/** Agents remembered per connection: a client addressing many template instances keeps the most recent. */
const KNOWN_AGENTS_MAX = 1024;
const knownAgents = new WeakMap<BusContext, Map<string, { until: number; id: string }>>();

/**
 * The id to send to when the registry (or a node) said `agentId` is declared less than
 * KNOWN_AGENT_TTL_MS ago on this connection: `agentId` itself, or a bus client's own
 * instance it stands for (principals.ts).
 */
function recentlyKnown(ctx: BusContext, agentId: string, now: number): string | undefined {
  const known = knownAgents.get(ctx)?.get(agentId);
  return known !== undefined && known.until > now ? known.id : undefined;
}

function rememberKnown(ctx: BusContext, agentId: string, now: number, id = agentId): void {
  let known = knownAgents.get(ctx);
  if (!known) knownAgents.set(ctx, (known = new Map()));
  known.delete(agentId);
  known.set(agentId, { until: now + KNOWN_AGENT_TTL_MS, id });
  // Insertion order is refresh order: the first key is the least recently confirmed.
  if (known.size > KNOWN_AGENTS_MAX) known.delete(known.keys().next().value!);
}

/**
 * Makes sure a message to `agentId` can ever be answered, before it is sent, and says
 * where to send it: a durable
 * send to an id nobody declared is stored anyway (the A2A stream captures every
 * `kova.<c>.a2a.*`), so a typo would otherwise cost the caller its whole timeout. An id
 * of the instance form `<template>--<key>` is activated instead (a node answers
 * UNKNOWN_AGENT when no template matches): its mailbox is then opening when the message
 * lands. An unknown plain id goes to the nodes too, whose answer names the templates (and
 * says how to address an instance when the id is a template's name). When the registry
 * cannot be read (no node ran yet, no permission) it lets the send go ahead: the
 * unknown-agent sweep deals with it later. A "declared" answer is trusted for
 * KNOWN_AGENT_TTL_MS on this connection: an agent asked again and again costs one lookup
 * per period instead of a round trip before every send. A connection whose user may not
 * read the registry (a bus client, docs/security.md) asks the nodes instead.
 * @returns the id to send to (a bus client's instance: its own, principals.ts)
 * @throws UnknownAgentError (or RemoteError UNKNOWN_AGENT, the nodes' answer) when no
 *   such agent is declared; RemoteError QUOTA_EXCEEDED … from the activation of an instance id
 */
export async function addressableAgent(ctx: BusContext, agentId: string): Promise<string> {
  const now = Date.now();
  const remembered = recentlyKnown(ctx, agentId, now);
  if (remembered !== undefined) return remembered;
  const known = unreadable.has(ctx) ? undefined : await registryKnows(ctx, agentId, 1000, () => unreadable.add(ctx));
  if (known === true) {
    rememberKnown(ctx, agentId, now);
    return agentId;
  }
  // The registry cannot tell (a bus client may not read it; no node ran yet) or knows no
  // such id: the nodes can. An instance id is activated (a bus client's is its own: the
  // reply names it); a declared agent is answered as found; anything else is refused,
  // with a reply that says more than the registry can (that the id is a template's name,
  // and which templates there are).
  const reply = await requestActivation(ctx, agentId);
  if (reply) {
    rememberKnown(ctx, agentId, now, reply.id);
    return reply.id;
  }
  // No node answered: a known-missing plain id is refused; otherwise the send goes ahead
  // (the unknown-agent sweep deals with it later).
  if (known === false && parseInstanceId(agentId) === undefined) throw new UnknownAgentError(agentId);
  return agentId;
}

/** Connections whose user may not read the registry (a bus client): the nodes answer instead. */
const unreadable = new WeakSet<BusContext>();
