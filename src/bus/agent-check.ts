import { parseInstanceId } from "../core/ids.js";
import { requestActivation } from "./activation.js";
import type { BusContext } from "./context.js";
import { UnknownAgentError } from "./errors.js";
import { registryKnows } from "./unknown-agents.js";

/**
 * Makes sure a message to `agentId` can ever be answered, before it is sent: a durable
 * send to an id nobody declared is stored anyway (the A2A stream captures every
 * `kova.<c>.a2a.*`), so a typo would otherwise cost the caller its whole timeout. An id
 * of the instance form `<template>--<key>` is activated instead (a node answers
 * UNKNOWN_AGENT when no template matches): its mailbox is then opening when the message
 * lands. An unknown plain id goes to the nodes too, whose answer names the templates (and
 * says how to address an instance when the id is a template's name). When the registry
 * cannot be read (no node ran yet, no permission) it lets the send go ahead: the
 * unknown-agent sweep deals with it later.
 * @throws UnknownAgentError (or RemoteError UNKNOWN_AGENT, the nodes' answer) when no
 *   such agent is declared; RemoteError QUOTA_EXCEEDED … from the activation of an instance id
 */
export async function assertAgentAddressable(ctx: BusContext, agentId: string): Promise<void> {
  if ((await registryKnows(ctx, agentId)) !== false) return;
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
