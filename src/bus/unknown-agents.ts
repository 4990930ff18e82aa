import type { MsgRequest } from "@nats-io/jetstream";
import type { Msg } from "@nats-io/transport-node";
import { isValidId } from "../core/index.js";
import type { BusContext } from "./context.js";
import { moveStored } from "./dlq.js";
import { UnknownAgentError } from "./errors.js";
import { isMessageGone, isPermissionDenied, isStreamNotFound } from "./nats-errors.js";
import { DlqReason } from "./wire.js";

/** What a sweep asks about each agent id with messages waiting in the A2A stream. */
export interface UnknownAgentSweep {
  /** Declared (registered): its mailbox takes the messages; the sweep leaves them alone. */
  isKnown(agentId: string): boolean;
  /** Messages to an id neither known nor activated go to the DLQ once older than this. */
  olderThanMs: number;
  /**
   * Claims an unknown id that can be brought to life (a template instance): the node
   * activates it, and its messages wait for its mailbox instead of going to the DLQ.
   */
  activate?(agentId: string): boolean;
}

/**
 * Messages to agents nobody declared. The A2A stream captures `kova.<c>.a2a.*` whether or
 * not an agent of that id exists, so a typo in an id would sit in the WorkQueue stream
 * forever. A sweep (every node runs it; moves are idempotent) finds the stream's subjects
 * whose agent `isKnown` denies, hands each to `activate` (template instances), and
 * dead-letters the messages of the rest once they are older than `olderThanMs`, with
 * reason `unknown_agent`. The age threshold leaves room for an agent declared right after
 * its first message (a spawn racing a send).
 *
 * A last token that is no valid id (`bad+id`, over 128 characters) is captured too, since
 * the stream and the client role's `a2a.>` take any token; no agent can ever have it, so
 * no mailbox would consume it. It goes the same way after the same wait, without asking
 * `isKnown` or `activate`, so that nobody can fill the stream's disk with it.
 * @returns how many messages were moved
 */
export async function sweepUnknownAgents(ctx: BusContext, sweep: UnknownAgentSweep): Promise<number> {
  const { isKnown, olderThanMs } = sweep;
  const stream = ctx.subjects.streams.a2a;
  const prefix = `${ctx.subjects.prefix}.a2a.`;
  let info: Awaited<ReturnType<typeof ctx.jsm.streams.info>>;
  try {
    info = await ctx.jsm.streams.info(stream, { subjects_filter: `${prefix}*` });
  } catch (err) {
    if (isStreamNotFound(err)) return 0;
    throw err;
  }
  const cutoff = Date.now() - olderThanMs;
  let moved = 0;
  for (const subject of Object.keys(info.state.subjects ?? {})) {
    const agentId = subject.slice(prefix.length);
    const valid = isValidId(agentId);
    if (valid && (isKnown(agentId) || sweep.activate?.(agentId) === true)) continue;
    const error = valid
      ? new UnknownAgentError(agentId, `nothing declared agent ${agentId} within ${Math.round(olderThanMs / 1000)} s of this message`)
      : notAnAgentId(subject.slice(prefix.length));
    for (let from = 1; ; ) {
      // STREAM.MSG.GET takes next_by_subj on 2.9; nats.js 3.4 only types it for direct gets.
      const m = await ctx.jsm.streams.getMessage(stream, { next_by_subj: subject, seq: from } as unknown as MsgRequest).catch((err: unknown) => {
        if (isMessageGone(err)) return null;
        throw err;
      });
      if (!m || m.time.getTime() > cutoff) break;
      const ok = await moveStored(ctx, stream, m.seq, { reason: DlqReason.unknownAgent, error, agentId });
      if (ok) moved++;
      from = m.seq + 1;
    }
  }
  if (moved > 0) ctx.log.warn({ moved }, "moved messages to agents nobody declared to the DLQ (reason unknown_agent)");
  return moved;
}

/** The error of a message whose subject's last token can be no agent's id. */
function notAnAgentId(token: string): UnknownAgentError {
  const shown = JSON.stringify(token.length > 140 ? `${token.slice(0, 140)}…` : token);
  return new UnknownAgentError(
    token,
    `${shown} (${token.length} characters) is not an agent id, so no agent can take this message`,
    "address agents by ids of 1-128 characters from [A-Za-z0-9_-] (kova agents ls lists them)",
  );
}

/**
 * Whether the registry (KV `kova_<c>_agents`) knows `agentId`, read with one direct get
 * over the connection's request mux: a missing bucket answers "no responders" at once
 * (nats.js's own direct get would wait out its timeout), and the wait is bounded.
 * @param onRefused called when the user's permissions refuse the lookup (it never will be answered)
 * @returns true/false, or undefined when it cannot tell (no registry yet, no permission, a timeout)
 */
export async function registryKnows(ctx: BusContext, agentId: string, timeoutMs = 1000, onRefused?: () => void): Promise<boolean | undefined> {
  const bucket = ctx.subjects.kv.agents;
  const body = new TextEncoder().encode(JSON.stringify({ last_by_subj: `$KV.${bucket}.${agentId}` }));
  let reply: Msg;
  try {
    reply = await ctx.mux.request(`$JS.API.DIRECT.GET.KV_${bucket}`, body, {
      timeoutMs,
      noResponders: () => new Error("no registry"),
      timedOut: () => new Error("registry lookup timed out"),
    });
  } catch (err) {
    if (isPermissionDenied(err)) onRefused?.();
    return undefined;
  }
  // A direct get answers a missing key with a status message (404) and no body.
  const status = reply.headers?.code ?? 0;
  if (status === 404) return false;
  if (status !== 0 && reply.data.length === 0) return undefined;
  const op = reply.headers?.get("KV-Operation");
  return op !== "DEL" && op !== "PURGE";
}
