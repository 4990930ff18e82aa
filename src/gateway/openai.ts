import { randomUUID } from "node:crypto";
import type { Request, Response } from "express";
import { Role, TaskState } from "@a2a-js/sdk";
import { INSTANCE_SEPARATOR, isValidId, isValidTemplateName, newId, parseInstanceId, ErrorCode, publicError, ANONYMOUS_PRINCIPAL } from "../core/index.js";
import type { AgentRegistry } from "../cluster/index.js";
import { mayUse, newRunId, resolveAgent } from "./auth.js";
import type { PrincipalQuotas } from "./quotas.js";
import { BusErrorCode } from "../bus/index.js";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";
import { endUserOf, scopedSessionId } from "./sessions.js";
import { MAX_HISTORY_TURNS, type HistoryTurn, type RunUsage } from "../agents/index.js";
import type { RunClient, RunRequest } from "./runs.js";
import { kovaMeta, newTask, textPart, type RunOutcome } from "./task-projection.js";
import type { TaskTracker } from "./task-tracker.js";
import { DIVERGED, SentAnswer } from "./sent-answer.js";

/**
 * The OpenAI-compatible endpoint: every agent is a model. `POST /v1/chat/completions`
 * runs the agent (its tools, memory and budgets stay inside Kova; the client sees the
 * answer) and `GET /v1/models` lists the agents the key may use.
 *
 * Sessions: a request names one with the `X-Kova-Session` header or the `user` field.
 * With a session, the last user message goes to the agent as `agent.chat` with the turns
 * before it, which start the session when the agent has no memory of it (a new session,
 * or a client that kept the conversation before naming it); once it has, its memory holds
 * the earlier turns and the client's copy is not used. Without one, the call is stateless
 * as an OpenAI model's is: the last user message is a `task_delegate` input and the turns
 * before it are its `history`, in their roles, of which the agent keeps nothing.
 *
 * Agent templates: `model = "support--user-42"` talks to that instance (activated on first
 * use); `model = "support"` with a session, when no agent is named `support`, talks to the
 * template's instance of that session, `support--<session>` (see `addressed`).
 */
export interface OpenAiDeps {
  runs: RunClient;
  registry: AgentRegistry;
  tracker: TaskTracker;
  quotas: PrincipalQuotas;
  taskTimeoutMs: number;
}

interface ChatMessage {
  role: string;
  content?: unknown;
}

const SESSION_HEADER = "x-kova-session";

function bad(message: string, param?: string): GatewayHttpError {
  return new GatewayHttpError(400, GatewayErrorCode.BAD_REQUEST, message, { data: param ? { param } : undefined });
}

function contentText(content: unknown, i: number): string {
  if (typeof content === "string") return content;
  if (content === null || content === undefined) return "";
  if (Array.isArray(content)) {
    return content
      .map((p, j) => {
        if (p && typeof p === "object" && (p as { type?: unknown }).type === "text" && typeof (p as { text?: unknown }).text === "string")
          return (p as { text: string }).text;
        throw bad(`messages[${i}].content[${j}]: only text parts are accepted`, `messages[${i}].content`);
      })
      .join("");
  }
  throw bad(`messages[${i}].content must be a string or an array of text parts`, `messages[${i}].content`);
}

/**
 * A token limit of the request, checked before any run starts (an agent given 0 or -1
 * would fail its run only after the gateway had created it).
 * @throws GatewayHttpError 400 naming the field unless it is absent, null or a positive integer
 */
function tokenLimit(body: Record<string, unknown>, field: "max_tokens" | "max_completion_tokens"): number | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) throw bad(`${field} must be a positive integer, not ${JSON.stringify(v)}`, field);
  return v;
}

/**
 * Fields asking for what a Kova agent cannot give. Dropping them silently would hand the
 * client an answer of another shape than it asked for (one choice instead of three, text
 * instead of the JSON it parses, no forced tool call), so they get a 400 naming the field.
 * What only tunes an answer (temperature, top_p, seed, stop, penalties) is left to the
 * agent's own configuration, and a client's `tools` are offered to no model: the agent
 * calls its own tools, and a model may always answer without calling one.
 * @throws GatewayHttpError 400 naming the field
 */
function refuseUnsupported(body: Record<string, unknown>): void {
  const given = (field: string) => body[field] !== undefined && body[field] !== null;
  if (given("n") && body.n !== 1) throw bad(`n must be 1: a Kova agent gives one answer per request, not ${JSON.stringify(body.n)}`, "n");
  const format = body.response_format as { type?: unknown } | undefined;
  if (given("response_format") && format?.type !== "text")
    throw bad(
      `response_format ${JSON.stringify(format?.type ?? format)} is not supported: a Kova agent answers in text; ask for the format in the message or in the agent's system prompt`,
      "response_format",
    );
  const choice = body.tool_choice;
  if (given("tool_choice") && choice !== "auto" && choice !== "none")
    throw bad('tool_choice can only be "auto" or "none": a Kova agent calls its own tools and never returns tool calls to the client', "tool_choice");
  if (body.logprobs === true || given("top_logprobs"))
    throw bad("logprobs are not available: the agent's answer is the run's output, not one model's tokens", "logprobs");
  const modalities = body.modalities;
  if (given("audio") || (Array.isArray(modalities) && modalities.some((m) => m !== "text")))
    throw bad('only text output is supported: drop audio and modalities other than "text"', given("audio") ? "audio" : "modalities");
}

/** The run a chat request stands for, or a 400 naming the field at fault. */
export function chatRun(req: Request, timeoutMs: number): RunRequest & { stream: boolean; includeUsage: boolean; named: boolean } {
  const body = req.body as Record<string, unknown> | undefined;
  if (!body || typeof body !== "object" || Array.isArray(body)) throw bad("the body must be a JSON object (a chat completion request)");
  const model = body.model;
  if (typeof model !== "string" || model.length === 0) throw bad("model is required: the id of the Kova agent to talk to (GET /v1/models lists them)", "model");
  if (!isValidId(model))
    throw new GatewayHttpError(404, "model_not_found", `the model ${JSON.stringify(model)} does not exist: models are Kova agent ids`, {
      data: { param: "model" },
    });
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw bad("messages must be a non-empty array", "messages");
  const turns = (messages as ChatMessage[]).map((m, i) => {
    if (!m || typeof m !== "object" || typeof m.role !== "string") throw bad(`messages[${i}].role is required`, `messages[${i}].role`);
    return { role: m.role, text: contentText(m.content, i) };
  });
  const lastUserAt = turns.findLastIndex((t) => t.role === "user");
  const lastUser = turns[lastUserAt];
  if (!lastUser || lastUser.text.trim() === "") throw bad("messages needs a user message with text", "messages");
  refuseUnsupported(body);
  const named = req.header(SESSION_HEADER) ?? (typeof body.user === "string" && body.user.length > 0 ? body.user : undefined);
  const maxTokens = tokenLimit(body, "max_completion_tokens") ?? tokenLimit(body, "max_tokens");
  const history = historyOf(turns.slice(0, lastUserAt));
  if (!named && history.length > MAX_HISTORY_TURNS)
    throw bad(
      `a stateless conversation may bring at most ${MAX_HISTORY_TURNS} earlier turns, not ${history.length}: name a session (the user field or X-Kova-Session) so the agent keeps them`,
      "messages",
    );
  const runId = newRunId(req.principal);
  const streamOptions = body.stream_options as { include_usage?: unknown } | undefined;
  const run: RunRequest & { stream: boolean; includeUsage: boolean; named: boolean } = {
    agentId: model,
    named: named !== undefined,
    kind: named ? "agent.chat" : "task_delegate",
    input: named ? lastUser.text : statelessInput(turns, lastUserAt),
    ...(named ? { chatHistory: sessionSeed(history) } : { stateless: { history } }),
    // A stateless run's session is its own run (the agent keeps no memory of it).
    sessionId: named ? scopedSessionId(named, req.principal?.sessionScope) : runId,
    runId,
    messageId: newId(),
    timeoutMs,
    stream: body.stream === true,
    includeUsage: streamOptions?.include_usage === true,
  };
  const user = endUserOf(req.principal, typeof body.user === "string" ? body.user : undefined);
  if (maxTokens !== undefined || user !== undefined)
    run.constraints = { ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}), ...(user ? { user } : {}) };
  return run;
}

/**
 * The turns before the last user message, in the roles the agent's model will see them
 * (`developer` is a system message; a turn of another role, such as a tool result of a
 * client's own tool, is kept as a user message naming its role). Empty turns are left out.
 */
function historyOf(turns: ReadonlyArray<{ role: string; text: string }>): HistoryTurn[] {
  return turns
    .filter((t) => t.text !== "")
    .map((t) =>
      t.role === "user" || t.role === "assistant" || t.role === "system"
        ? { role: t.role, content: t.text }
        : t.role === "developer"
          ? { role: "system", content: t.text }
          : { role: "user", content: `(${t.role}) ${t.text}` },
    );
}

/**
 * Content bytes of the earlier turns a named session's message brings: they only start a
 * session the agent has no memory of, so a long conversation (which its memory holds) must
 * not make the message too large for the bus (1 MiB by default) where the new message alone fits.
 */
const SESSION_SEED_BYTES = 256 * 1024;

/**
 * The earlier turns a named session's chat brings: the newest ones, at most as many as an
 * agent takes and SESSION_SEED_BYTES of content; older ones are left out, as the agent's
 * memory policy would evict them first.
 */
function sessionSeed(history: HistoryTurn[]): HistoryTurn[] {
  let bytes = 0;
  let from = history.length;
  while (from > 0 && history.length - from < MAX_HISTORY_TURNS) {
    bytes += Buffer.byteLength(history[from - 1]!.content);
    if (bytes > SESSION_SEED_BYTES) break;
    from--;
  }
  return history.slice(from);
}

/** The last user message, with any turns after it (rare: a prefilled answer) appended in order. */
function statelessInput(turns: ReadonlyArray<{ role: string; text: string }>, lastUserAt: number): string {
  const after = turns.slice(lastUserAt + 1).filter((t) => t.text !== "");
  return [turns[lastUserAt]!.text, ...after.map((t) => `${t.role}: ${t.text}`)].join("\n\n");
}

function usageBody(u: RunUsage) {
  return {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    total_tokens: u.inputTokens + u.outputTokens,
    ...(u.costUsd !== undefined ? { cost_usd: u.costUsd } : {}),
  };
}

/**
 * The agent the request reaches (addressed, as the caller's own: auth.ts resolveAgent),
 * admitted under the caller's quotas: a new instance within `max_instances`, the run
 * within `max_concurrent_runs` and `tokens_per_minute`.
 * @throws GatewayHttpError 404 model_not_found for an agent the key may not use (as for one that does not exist); 429 QUOTA_EXCEEDED
 */
function admitted(deps: OpenAiDeps, req: Request, run: RunRequest & { named: boolean }) {
  try {
    run.agentId = resolveAgent(req.principal, addressed(deps, run), deps.runs.cluster);
  } catch (err) {
    throw new GatewayHttpError(404, "model_not_found", (err as Error).message, { data: { param: "model" } });
  }
  deps.quotas.admitInstance(req.principal, run.agentId);
  return deps.quotas.startRun(req.principal);
}

export function listModels(deps: Pick<OpenAiDeps, "registry">, req: Request, res: Response): void {
  const data = deps.registry
    .list()
    .filter((r) => r.desired !== "killed" && mayUse(req.principal, r.id))
    .sort((a, b) => a.id.localeCompare(b.id))
    .map((r) => ({
      id: r.id,
      object: "model",
      created: Math.floor(r.updatedAt / 1000),
      owned_by: "kova",
      kova: { type: r.type, capabilities: r.capabilities, state: r.state, node: r.node },
    }));
  res.json({ object: "list", data });
}

/**
 * Which agent a chat request reaches: `model` as given (an agent, or a template instance
 * `support--user-42`, activated if need be), or, for a `model` that names no agent but a
 * template, with a session named (`user` or `X-Kova-Session`), that template's instance
 * for the session: `support` + `user = "user-42"` → `support--user-42`.
 */
function addressed(deps: Pick<OpenAiDeps, "registry">, run: RunRequest & { named: boolean }): string {
  const record = deps.registry.get(run.agentId);
  if ((record && record.desired !== "killed") || !run.named || parseInstanceId(run.agentId) !== undefined || !isValidTemplateName(run.agentId))
    return run.agentId;
  const key = `${run.agentId}${INSTANCE_SEPARATOR}${run.sessionId}`;
  return isValidId(key) ? key : run.agentId;
}

/**
 * The HTTP error of a chat completion whose run did not complete. Its message names the
 * agent, the code and what to do; the run's error text has its internals taken out
 * (core/public-error.ts): the caller is an end user, the node's log and the run's events
 * keep the whole error. A run past task_timeout_ms is the gateway's timeout (the run was
 * interrupted): 504; a conversation too large for one bus message never started a run: 413.
 */
export function runFailure(
  run: { agentId: string; runId: string; named: boolean },
  outcome: Pick<RunOutcome, "status"> & { error?: RunOutcome["error"] },
): GatewayHttpError {
  const error = outcome.error && publicError(outcome.error, { code: GatewayErrorCode.RUN_FAILED, message: "the run failed" });
  const code = error?.code;
  if (code === BusErrorCode.PAYLOAD_TOO_LARGE)
    return new GatewayHttpError(
      413,
      code,
      run.named
        ? `the message is too large for one message to agent ${run.agentId} (${error!.message}): send a shorter one`
        : `the conversation is too large for one message to agent ${run.agentId} (${error!.message}): name a session (the user field or X-Kova-Session) so the agent keeps the earlier turns, and send only the new message`,
      { data: { runId: run.runId } },
    );
  return new GatewayHttpError(
    code === ErrorCode.TIMEOUT ? 504 : 502,
    code ?? (outcome.status === "cancelled" ? "RUN_CANCELLED" : GatewayErrorCode.RUN_FAILED),
    `agent ${run.agentId}: the run ended ${outcome.status}${error ? `: ${error.message}` : ""}`,
    { data: { runId: run.runId } },
  );
}

/** The error event that ends a streamed chat completion whose run did not complete (see runFailure). */
export function streamFailure(agentId: string, err: { code?: string; message?: string } | undefined, fallback: string): string {
  const e = publicError(err, { code: GatewayErrorCode.RUN_FAILED, message: fallback });
  return `data: ${JSON.stringify({ error: { message: `agent ${agentId}: ${e.message}`, type: "server_error", code: e.code } })}\n\n`;
}

export async function chatCompletions(deps: OpenAiDeps, req: Request, res: Response): Promise<void> {
  const run = chatRun(req, deps.taskTimeoutMs);
  const ticket = admitted(deps, req, run);
  run.quota = ticket;
  try {
    await deps.runs.ready(run.agentId);
  } catch (err) {
    ticket.end();
    if (err instanceof GatewayHttpError && err.status === 404) throw new GatewayHttpError(404, "model_not_found", err.message, { data: { param: "model" } });
    throw err;
  }
  const id = `chatcmpl-${run.runId}`;
  const created = Math.floor(Date.now() / 1000);
  res.setHeader("X-Kova-Run-Id", run.runId);
  res.setHeader("X-Kova-Session-Id", run.sessionId);
  if (!run.stream) {
    const outcome = await deps.runs.run(run);
    if (outcome.status !== "completed") throw runFailure(run, outcome);
    res.json({
      id,
      object: "chat.completion",
      created,
      model: run.agentId,
      choices: [{ index: 0, message: { role: "assistant", content: outcome.output, refusal: null }, logprobs: null, finish_reason: "stop" }],
      usage: usageBody(outcome.usage),
    });
    return;
  }
  await streamChat(deps, run, { id, created }, req, res);
}

async function streamChat(
  deps: OpenAiDeps,
  run: RunRequest & { includeUsage: boolean },
  ids: { id: string; created: number },
  req: Request,
  res: Response,
): Promise<void> {
  const task = newTask({
    taskId: run.runId,
    contextId: run.sessionId,
    message: {
      messageId: randomUUID(),
      contextId: run.sessionId,
      taskId: run.runId,
      role: Role.ROLE_USER,
      parts: [textPart(run.input)],
      metadata: {},
      extensions: [],
      referenceTaskIds: [],
    },
    meta: { agentId: run.agentId, sessionId: run.sessionId, runId: run.runId, owner: req.principal?.id ?? ANONYMOUS_PRINCIPAL, messageId: run.messageId },
  });
  const live = deps.tracker.start(task, run, { persist: false });
  // An approval wait is part of the run here: the stream goes on until the answer.
  const updates = live.updates("terminal");
  res.status(200);
  res.setHeader("Content-Type", "text/event-stream");
  res.setHeader("Cache-Control", "no-cache");
  res.setHeader("X-Accel-Buffering", "no");
  res.flushHeaders();
  const chunk = (delta: Record<string, unknown>, finish: string | null, extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id: ids.id, object: "chat.completion.chunk", created: ids.created, model: run.agentId, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra })}\n\n`;
  let closed = false;
  res.on("close", () => {
    closed = true;
    void updates.return(undefined);
  });
  res.write(chunk({ role: "assistant", content: "" }, null));
  const sent = new SentAnswer();
  for await (const u of updates) {
    if (closed) break;
    const p = u.payload;
    if (p?.$case !== "artifactUpdate") continue;
    const text = p.value.artifact?.parts.map((x) => (x.content?.$case === "text" ? x.content.value : "")).join("") ?? "";
    const delta = sent.next({ text, append: p.value.append, lastChunk: p.value.lastChunk });
    // Leaving the loop stops the updates too.
    if (delta === DIVERGED) return endDiverged(deps, run, res);
    if (delta.length > 0) res.write(chunk({ content: delta }, null));
  }
  if (closed) return;
  const state = live.projection;
  const meta = kovaMeta(state.task);
  if (!state.terminal || state.task.status?.state !== TaskState.TASK_STATE_COMPLETED) {
    res.write(streamFailure(run.agentId, meta.error, state.terminal ? "the run did not complete" : "the run stopped without an answer"));
  } else {
    res.write(chunk({}, "stop"));
    if (run.includeUsage) {
      res.write(
        `data: ${JSON.stringify({ id: ids.id, object: "chat.completion.chunk", created: ids.created, model: run.agentId, choices: [], usage: usageBody(meta.usage ?? { inputTokens: 0, outputTokens: 0 }) })}\n\n`,
      );
    }
  }
  res.write("data: [DONE]\n\n");
  res.end();
}

/**
 * A model stream was cut, and its retry answered otherwise than the text this stream has
 * sent, which an SSE stream cannot take back: the client gets an error (the OpenAI SDKs
 * raise it) rather than a garbled answer, and the run is interrupted, since nobody reads its
 * answer (in a named session, the agent then keeps no half-seen turn). Asking again works.
 */
function endDiverged(deps: OpenAiDeps, run: RunRequest, res: Response): void {
  const error = {
    message: `agent ${run.agentId}: the model's stream was cut and retried, and the retry answered differently from the text already streamed, which cannot be taken back; the run was stopped: send the request again`,
    type: "server_error",
    code: GatewayErrorCode.STREAM_DIVERGED,
  };
  res.write(`data: ${JSON.stringify({ error })}\n\n`);
  res.write("data: [DONE]\n\n");
  res.end();
  deps.runs.abandon(run, "whose streamed answer diverged on a retried model stream");
}
