import { parseInstanceId } from "../core/ids.js";
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
const knownAgents = new WeakMap<BusContext, Map<string, number>>();

/** True when the registry said `agentId` is declared less than KNOWN_AGENT_TTL_MS ago on this connection. */
function recentlyKnown(ctx: BusContext, agentId: string, now: number): boolean {
  const until = knownAgents.get(ctx)?.get(agentId);
  return until !== undefined && until > now;
}

function rememberKnown(ctx: BusContext, agentId: string, now: number): void {
  let known = knownAgents.get(ctx);
  if (!known) knownAgents.set(ctx, (known = new Map()));
  known.delete(agentId);
  known.set(agentId, now + KNOWN_AGENT_TTL_MS);
  // Insertion order is refresh order: the first key is the least recently confirmed.
  if (known.size > KNOWN_AGENTS_MAX) known.delete(known.keys().next().value!);
}

/**
 * Makes sure a message to `agentId` can ever be answered, before it is sent: a durable
 * send to an id nobody declared is stored anyway (the A2A stream captures every
 * `kova.<c>.a2a.*`), so a typo would otherwise cost the caller its whole timeout. An id
 * of the instance form `<template>--<key>` is activated instead (a node answers
 * UNKNOWN_AGENT when no template matches): its mailbox is then opening when the message
 * lands. An unknown plain id goes to the nodes too, whose answer names the templates (and
 * says how to address an instance when the id is a template's name). When the registry
 * cannot be read (no node ran yet, no permission) it lets the send go ahead: the
 * unknown-agent sweep deals with it later. A "declared" answer is trusted for
 * KNOWN_AGENT_TTL_MS on this connection: an agent asked again and again costs one lookup
 * per period instead of a round trip before every send.
 * @throws UnknownAgentError (or RemoteError UNKNOWN_AGENT, the nodes' answer) when no
 *   such agent is declared; RemoteError QUOTA_EXCEEDED … from the activation of an instance id
 */
export async function assertAgentAddressable(ctx: BusContext, agentId: string): Promise<void> {
  const now = Date.now();
  if (recentlyKnown(ctx, agentId, now)) return;
  const known = await registryKnows(ctx, agentId);
  if (known === true) rememberKnown(ctx, agentId, now);
  if (known !== false) return;
  if (parseInstanceId(agentId) !== undefined) {
    await requestActivation(ctx, agentId);
    return;
  }
  // Not an instance id, so the nodes refuse to activate it; but their refusal says more
  // than the registry can: that the id is a template's name (and how to address one of
  // its instances), and which templates there are.
  await requestActivation(ctx, agentId);
  throw new UnknownAgentError(agentId);
}
