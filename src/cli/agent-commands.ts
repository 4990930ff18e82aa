import type { Command } from "commander";
import { ErrorCode, KovaError, isKovaError } from "../core/index.js";
import { BusErrorCode, type KovaClient, type KovaEvent } from "../bus/index.js";
import { askAgent, forProfile, inProfile, isEventProfile, type EventProfile, type AgentInfo, type AgentResult } from "../agents/index.js";
import { readRegistry } from "../cluster/index.js";
import { print, table } from "./output.js";

/**
 * `kova ask <agent> "…"` (the agent form of ask: streams the answer as it is written),
 * the `--profile` filter of `kova events tail`, and `kova agents usage [agent]`.
 */

export interface AgentAskOpts {
  session?: string;
  chat?: boolean;
  json?: boolean;
  timeout?: string;
  maxTokens?: string;
  deadline?: string;
  priority?: string;
  /** `--for-user` (`--user` names the NATS user). */
  forUser?: string;
  verbose?: boolean;
}

/** Runs `kova ask <agent> <text…>`: tokens to stdout as they stream, a usage line to stderr. */
export async function askAgentCommand(client: KovaClient, agentId: string, text: string, o: AgentAskOpts): Promise<void> {
  if (o.chat && !o.session) throw new KovaError(ErrorCode.INVALID_ARGUMENT, "--chat needs --session <id>: a chat message continues a session");
  const stdout = process.stdout;
  let streamed = false;
  const onEvent = (e: KovaEvent) => {
    if (o.json) return;
    const d = (e.data ?? {}) as Record<string, unknown>;
    if (e.type === "model_delta") {
      if (typeof d.restart === "number") stdout.write("\n[the model call is retried; the answer restarts]\n");
      else if (typeof d.text === "string") {
        stdout.write(d.text);
        streamed ||= d.text.length > 0;
      }
    } else if (e.type === "approval_requested") {
      process.stderr.write(
        `[${String(d.tool)} ${JSON.stringify(d.args)} waits for approval: kova approve ${e.runId} ${String(d.approvalId)}  |  kova reject ${e.runId} ${String(d.approvalId)}]\n`,
      );
    } else if (e.type === "approval_granted" || e.type === "approval_rejected") {
      process.stderr.write(
        `[${String(d.tool)} ${e.type === "approval_granted" ? "approved" : d.timedOut ? "rejected: no decision in time" : "rejected"}${d.by ? ` by ${String(d.by)}` : ""}]\n`,
      );
    } else if (o.verbose && e.type === "tool_call") {
      process.stderr.write(`[tool ${String(d.tool)} ${JSON.stringify(d.args)}]\n`);
    } else if (o.verbose && e.type === "tool_result") {
      process.stderr.write(`[tool ${String(d.tool)} ${d.ok ? "ok" : "failed"}]\n`);
    }
  };
  const constraints: Record<string, unknown> = {};
  if (o.maxTokens !== undefined) constraints.max_tokens = Number(o.maxTokens);
  if (o.deadline !== undefined) constraints.deadline = /^\d+$/.test(o.deadline) ? Number(o.deadline) : o.deadline;
  // Checked by the agent (AGENT_INPUT_INVALID names the field): a number here, whatever it is.
  if (o.priority !== undefined) constraints.priority = Number(o.priority);
  if (o.forUser !== undefined) constraints.user = o.forUser;
  const ask = (follow: boolean) =>
    askAgent(client, agentId, text, {
      ...(o.session ? { sessionId: o.session } : {}),
      ...(o.chat ? { chat: true } : {}),
      ...(Object.keys(constraints).length > 0 ? { constraints } : {}),
      timeoutMs: o.timeout ? Number(o.timeout) : 600_000,
      ...(follow ? { onEvent } : {}),
    });
  let result: AgentResult;
  try {
    result = await ask(true);
  } catch (err) {
    // A user that may ask but not read events (the client role): nothing was sent yet, so
    // ask again without following, and print the answer when it is done.
    if (!isKovaError(err, BusErrorCode.PERMISSION_DENIED)) throw err;
    if (o.verbose) process.stderr.write("[this NATS user may not read events: the answer comes when the run is done]\n");
    result = await ask(false);
  }
  if (o.json) return print(result);
  // Whatever did not stream (a non-streaming model, a hook's output) is printed whole.
  if (!streamed && result.output) stdout.write(result.output);
  if (streamed || result.output) stdout.write("\n");
  const u = result.usage;
  const cost = u.costUsd !== undefined ? `, $${u.costUsd.toFixed(6)}` : "";
  process.stderr.write(`[${result.status} · run ${result.runId} · session ${result.sessionId} · ${u.inputTokens} in / ${u.outputTokens} out${cost}]\n`);
  if (result.status !== "completed") {
    const err = new KovaError(result.error?.code ?? ErrorCode.REMOTE_ERROR, result.error?.message ?? `run ${result.status}`);
    throw err;
  }
}

/** The reply of an agent whose run did not complete (an AgentResult with status failed or cancelled), else undefined. */
export function failedAgentRun(payload: unknown): AgentResult | undefined {
  if (typeof payload !== "object" || payload === null) return undefined;
  const r = payload as Partial<AgentResult>;
  return typeof r.runId === "string" && (r.status === "failed" || r.status === "cancelled") ? (r as AgentResult) : undefined;
}

/** Parses `--profile`. @throws KovaError naming the allowed values */
export function eventProfile(value: string | undefined): EventProfile | undefined {
  if (value === undefined) return undefined;
  if (!isEventProfile(value)) throw new KovaError(ErrorCode.INVALID_ARGUMENT, `--profile ${JSON.stringify(value)}: use chat, debug or metrics`);
  return value;
}

/** An event as a profile shows it, or undefined when the profile leaves it out. */
export function profiled(e: KovaEvent, profile: EventProfile | undefined): KovaEvent | undefined {
  if (profile === undefined) return e;
  return inProfile(e, profile) ? forProfile(e, profile) : undefined;
}

/** `kova agents usage [agent]`: asks each agent's host over the fast path. */
export function registerUsage(
  agents: Command,
  common: (c: Command) => Command,
  withClient: (o: object, fn: (c: KovaClient) => Promise<void>) => Promise<void>,
): void {
  common(agents.command("usage [agent]").description("tokens, cost, model and tool calls per agent (from the hosting node)")).action(
    (agent: string | undefined, o: { json?: boolean }) =>
      withClient(o, async (client) => {
        // An id nobody declared has no host to answer: say so as ask does, not "no responders".
        if (agent) await client.bus.checkAgent(agent);
        const ids = agent ? [agent] : await agentIds(client);
        const rows: Array<AgentInfo | { agentId: string; error: string }> = await Promise.all(
          ids.map((id) =>
            client.request<AgentInfo>(id, "info_request", null, { timeoutMs: 3000 }).catch((err: Error) => ({ agentId: id, error: err.message })),
          ),
        );
        const infos = rows.filter((r): r is AgentInfo => "usage" in r && typeof (r as AgentInfo).usage?.runs === "number");
        if (agent && infos.length === 0)
          throw new KovaError(
            ErrorCode.REMOTE_ERROR,
            `agent ${agent} did not answer with usage: ${(rows[0] as { error?: string }).error ?? "it is not an LLM agent"}`,
          );
        if (o.json) return print(agent ? infos[0] : infos);
        table(
          ["AGENT", "MODEL", "RUNS", "MODEL CALLS", "IN", "OUT", "COST USD", "TOOL CALLS", "TOOL MS"],
          infos.map((i) => [
            i.agentId,
            i.model,
            String(i.usage.runs),
            String(i.usage.modelCalls),
            String(i.usage.inputTokens),
            String(i.usage.outputTokens),
            i.usage.costUsd.toFixed(6),
            String(i.usage.toolCalls),
            String(i.usage.toolMs),
          ]),
        );
        if (agent) {
          for (const [m, u] of Object.entries(infos[0]!.usage.byModel))
            process.stdout.write(`  model ${m}: ${u.calls} calls, ${u.inputTokens} in / ${u.outputTokens} out, $${u.costUsd.toFixed(6)}\n`);
          for (const [t, u] of Object.entries(infos[0]!.usage.byTool)) process.stdout.write(`  tool ${t}: ${u.calls} calls (${u.errors} failed), ${u.ms} ms\n`);
        }
      }),
  );
}

async function agentIds(client: KovaClient): Promise<string[]> {
  return (await readRegistry(client.bus.nc, client.bus.cluster))
    .filter((r) => r.desired !== "killed")
    .map((r) => r.id)
    .sort();
}
