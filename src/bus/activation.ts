import type { Msg } from "@nats-io/transport-node";
import { ErrorCode, fromWire, RemoteError } from "../core/index.js";
import type { BusContext } from "./context.js";

/** A node's answer to an activation request (the `activate` endpoint). */
export interface ActivationReply {
  /** The agent to send to: a bus client's instance id is its own (principals.ts), which may differ from the one asked. */
  id: string;
  /** The instance's template; absent when the id is a declared agent (no instance: nothing was activated). */
  template?: string;
  /** True when this request registered the instance; false when it was registered already. */
  created: boolean;
  /** The node that answered (placement then chooses the host). */
  via: string;
}

const utf8 = new TextEncoder();

/**
 * Asks the cluster to activate a template instance before a message is sent to it, so
 * the message finds its mailbox opening instead of waiting for the nodes' listener or
 * sweep (see docs/virtual-actors.md). Any node answers (queue group).
 * @returns the node's reply, or undefined when no node answered in time (the message is
 *   still stored durably when sent, and a node activates the instance when it sees it)
 * @throws RemoteError with the node's code: UNKNOWN_AGENT when no template matches the
 *   id, QUOTA_EXCEEDED past `[cluster] max_actors`, INVALID_ID …
 */
export async function requestActivation(ctx: BusContext, id: string, timeoutMs = 1000): Promise<ActivationReply | undefined> {
  let reply: Msg;
  try {
    reply = await ctx.mux.request(ctx.subjects.activate, utf8.encode(JSON.stringify({ id })), {
      timeoutMs,
      noResponders: () => new Error("no node"),
      timedOut: () => new Error("activation timed out"),
    });
  } catch {
    return undefined;
  }
  const body = reply.data.length > 0 ? (JSON.parse(new TextDecoder().decode(reply.data)) as unknown) : null;
  if (reply.headers?.get("Nats-Service-Error-Code")) {
    throw (
      fromWire(body) ??
      new RemoteError({ code: ErrorCode.REMOTE_ERROR, message: reply.headers.get("Nats-Service-Error") || `activation of ${id} failed`, retryable: false })
    );
  }
  return body as ActivationReply;
}
