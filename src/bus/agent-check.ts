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
 * lands. When the registry cannot be read (no node ran yet, no permission) it lets the
 * send go ahead: the unknown-agent sweep deals with it later.
 * @throws UnknownAgentError when the registry knows no such agent; RemoteError
 *   UNKNOWN_AGENT (or QUOTA_EXCEEDED …) from the activation of an instance id
 */
export async function assertAgentAddressable(ctx: BusContext, agentId: string): Promise<void> {
  if ((await registryKnows(ctx, agentId)) !== false) return;
  if (parseInstanceId(agentId) === undefined) throw new UnknownAgentError(agentId);
  await requestActivation(ctx, agentId);
}
