import { ConfigError, isKovaError, toWire } from "../core/index.js";
import type { KovaEvent } from "../bus/index.js";
import { TurnInterruptedError, type ActorContext } from "../actors/index.js";
import { costOf, parseModelsConfig, parseRunRequest, readUsage, type AgentResult, type ModelClient, type ModelConfig, type RunUsage } from "../agents/index.js";
import type { Bus } from "../bus/index.js";
import { checkEndpoint } from "./endpoint-guard.js";
import { ExternalSubjectError, SubjectUnavailableError } from "./errors.js";
import { trustedEnvValue, type EvalTrust } from "./node-trust.js";
import type { A2aSubject, OpenAiSubject } from "./spec.js";

/**
 * Subjects outside Kova (docs/evals.md, "Subjects"): an OpenAI-compatible endpoint or an A2A
 * agent, called from an `eval-subject` instance's turn. The call is one journaled step (a
 * replayed turn reuses its answer), and the run publishes the agent protocol's events
 * (`run_started`, `run_completed` / `run_failed`, `run_stream_end`) under the run id the
 * experiment chose, so the run tree shows it like an agent's run.
 */

/** What the call step records: the answer or the failure, with the usage. */
type CallOutcome =
  | { ok: true; output: string; usage: RunUsage; model?: string }
  | { ok: false; error: { code: string; message: string; retryable: boolean }; usage: RunUsage };

export interface ExternalDeps {
  bus: Bus;
  /** What this node lets experiments read of its environment (kova.toml `[eval]`). */
  trust: EvalTrust;
  /** The subject as the spec names it (`subjects[2]`), for errors. */
  key?: string;
  /** The model client of an OpenAI-compatible subject (built once per experiment and subject). */
  modelClient: (config: ModelConfig) => Promise<ModelClient>;
}

/** Runs one task against an external subject and answers as an agent would. */
export async function runExternalSubject(
  ctx: ActorContext<unknown>,
  subject: OpenAiSubject | A2aSubject,
  deps: ExternalDeps,
): Promise<AgentResult & { at?: number }> {
  const req = parseRunRequest(ctx.message.type, ctx.message.payload, ctx.now());
  const runId = req.runId ?? ctx.newId();
  const sessionId = req.sessionId ?? runId;
  const publish = (type: string, data: unknown) => {
    const e: KovaEvent = { type, sessionId, runId, ts: ctx.now(), data };
    if (req.parentRunId) e.parentRunId = req.parentRunId;
    return deps.bus.publishEvent(e, { msgId: `${runId}-${type}` });
  };
  let outcome: CallOutcome & { at?: number };
  try {
    outcome = await ctx.step(
      "call",
      async () => {
        await publish("run_started", { agentId: ctx.actorId, subject: subject.id, input: req.input });
        const outcome = await (subject.kind === "openai" ? callOpenAi(ctx, subject, req.input, runId, deps) : callA2a(ctx, subject, req.input, runId, deps));
        return { ...outcome, at: ctx.now() };
      },
      { idempotent: true },
    );
  } catch (err) {
    const reason: unknown = ctx.signal.aborted ? ctx.signal.reason : err;
    // Interrupted (the experiment's timeout, a cancel): the run ends cancelled; anything else is the node's to handle.
    if (!(reason instanceof TurnInterruptedError) || reason.by !== "interrupt") throw reason;
    await publish("run_cancelled", { agentId: ctx.actorId }).catch(() => undefined);
    await publish("run_stream_end", { status: "cancelled" }).catch(() => undefined);
    return {
      output: "",
      usage: { inputTokens: 0, outputTokens: 0 },
      runId,
      sessionId,
      status: "cancelled",
      error: { code: reason.code, message: "the run was interrupted" },
      node: ctx.nodeId,
    };
  }
  await ctx.step(
    "run:end",
    async () => {
      if (outcome.ok) await publish("run_completed", { agentId: ctx.actorId, output: outcome.output, usage: outcome.usage });
      else await publish("run_failed", { agentId: ctx.actorId, error: outcome.error, usage: outcome.usage });
      await publish("run_stream_end", { status: outcome.ok ? "completed" : "failed" });
      return true;
    },
    { idempotent: true, record: false },
  );
  const at = outcome.at === undefined ? {} : { at: outcome.at };
  return outcome.ok
    ? { output: outcome.output, usage: outcome.usage, runId, sessionId, status: "completed", node: ctx.nodeId, ...at }
    : { output: "", usage: outcome.usage, runId, sessionId, status: "failed", error: outcome.error, node: ctx.nodeId, ...at };
}

/**
 * The subject's `openai` table as a model config, read on this node: its API key from this
 * node's environment, and only from a variable `[eval.env]` lets go to the subject's
 * `base_url` (a spec is not the node's config: whoever starts experiments writes it). A key
 * file (`api_key_file`) is never read for a spec.
 * @param key the subject as the spec names it (`subjects[2]`), for errors
 * @throws ConfigError naming the spec's field and the fix: a key file, a variable or an
 *   endpoint the node does not allow, a variable not set here, a bad `[models]`-style key
 */
export function openAiConfig(subject: OpenAiSubject, trust: EvalTrust, key = `subject ${subject.id}`): ModelConfig {
  const table = subject.openai;
  const at = `${key}.openai`;
  if (table.api_key_file !== undefined) {
    throw new ConfigError(
      `${at}.api_key_file`,
      "a spec may not name a file of the node (its key would go to the spec's endpoint): use api_key_env, with a variable [eval.env] allows",
    );
  }
  const parse = (env: NodeJS.ProcessEnv) => parseModelsConfig({ [subject.id]: table }, { env }).get(subject.id)!;
  try {
    // First with no variable of the node in view (its endpoint, the default one included),
    // then with the one variable the node lets go to that endpoint, if it names one.
    const config = parse(new Proxy({}, { get: () => "unread" }) as NodeJS.ProcessEnv);
    const name = table.api_key_env;
    if (typeof name !== "string") return table.api_key_env === undefined ? config : parse({});
    return parse({ [name]: trustedEnvValue(trust, name, config.baseUrl, `${at}.api_key_env`, `${at}.base_url`) });
  } catch (err) {
    // parseModelsConfig names its keys as kova.toml's (`models.<id>.base_url`): name the spec's.
    const own = `models.${subject.id}`;
    if (err instanceof ConfigError && err.key.startsWith(own)) {
      throw new ConfigError(`${at}${err.key.slice(own.length)}`, err.message.slice(err.key.length + 2), { cause: err });
    }
    throw err;
  }
}

async function callOpenAi(ctx: ActorContext<unknown>, subject: OpenAiSubject, input: string, runId: string, deps: ExternalDeps): Promise<CallOutcome> {
  const zero = { inputTokens: 0, outputTokens: 0 };
  let config: ModelConfig;
  try {
    config = openAiConfig(subject, deps.trust, deps.key);
    // Again here, not only at start: the name may resolve to another address by now.
    await checkEndpoint(config.baseUrl, deps.trust, `${deps.key ?? `subject ${subject.id}`}.openai.base_url`);
  } catch (err) {
    const why = err instanceof ConfigError ? new SubjectUnavailableError(subject.id, `on this node: ${err.message}`) : err;
    return { ok: false, error: { ...failure(why), retryable: false }, usage: zero };
  }
  const model = await deps.modelClient(config);
  try {
    const r = await model.complete({
      messages: [...(subject.system ? [{ role: "system" as const, content: subject.system }] : []), { role: "user" as const, content: input }],
      ...(subject.temperature === undefined ? {} : { temperature: subject.temperature }),
      ...(subject.maxOutputTokens === undefined ? {} : { maxTokens: subject.maxOutputTokens }),
      signal: ctx.signal,
      headers: { "x-kova-agent": ctx.actorId, "x-kova-run": runId },
    });
    const usage: RunUsage = { inputTokens: r.usage?.inputTokens ?? 0, outputTokens: r.usage?.outputTokens ?? 0 };
    if (config.price) usage.costUsd = costOf(usage, config.price).total;
    return { ok: true, output: r.message.content ?? "", usage, model: r.model };
  } catch (err) {
    if (ctx.signal.aborted) throw err;
    return { ok: false, error: failure(err), usage: zero };
  }
}

function failure(err: unknown): { code: string; message: string; retryable: boolean } {
  const w = toWire(err);
  return { code: w.code, message: w.message, retryable: isKovaError(err) ? err.retryable : true };
}

const TERMINAL = new Set(["completed", "failed", "canceled", "rejected", "auth-required", "input-required", "unknown"]);

/** One JSON-RPC call to an A2A endpoint. @throws ExternalSubjectError (retryable for 5xx, 429 and the network) */
async function rpc(
  subject: A2aSubject,
  method: string,
  params: unknown,
  id: string,
  signal: AbortSignal,
  auth: Record<string, string>,
): Promise<Record<string, unknown>> {
  const headers: Record<string, string> = { "content-type": "application/json", ...auth };
  let res: Response;
  try {
    // A redirect is not followed: it could lead to an address the guard refuses.
    res = await fetch(subject.url, { method: "POST", headers, body: JSON.stringify({ jsonrpc: "2.0", id, method, params }), signal, redirect: "manual" });
  } catch (err) {
    if (signal.aborted) throw err;
    throw new ExternalSubjectError(subject.id, `${method} to ${subject.url} failed: ${(err as Error).message}`, true);
  }
  const text = await res.text();
  if (!res.ok)
    throw new ExternalSubjectError(subject.id, `${method}: HTTP ${res.status} ${text.slice(0, 200)}`, res.status >= 500 || res.status === 429, res.status);
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new ExternalSubjectError(subject.id, `${method}: the answer is not JSON: ${text.slice(0, 200)}`, false);
  }
  if (body.error) {
    const e = body.error as { code?: number; message?: string };
    throw new ExternalSubjectError(subject.id, `${method}: JSON-RPC error ${e.code ?? "?"}: ${e.message ?? ""}`, false);
  }
  if (typeof body.result !== "object" || body.result === null) throw new ExternalSubjectError(subject.id, `${method}: the answer has no result`, false);
  return body.result as Record<string, unknown>;
}

/**
 * An A2A subject's `headers_env`, read on this node: each variable only if `[eval.env]` lets
 * it go to the subject's URL.
 * @param key the subject as the spec names it (`subjects[3]`), for errors
 * @throws ConfigError naming the spec's field and the fix
 */
export function a2aHeaders(subject: A2aSubject, trust: EvalTrust, key = `subject ${subject.id}`): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, env] of Object.entries(subject.headersEnv ?? {})) {
    headers[name] = trustedEnvValue(trust, env, subject.url, `${key}.headers_env.${name}`, `${key}.a2a`);
  }
  return headers;
}

function textOf(parts: unknown): string {
  if (!Array.isArray(parts)) return "";
  return parts
    .map((p: Record<string, unknown>) => (typeof p.text === "string" ? p.text : p.kind === "data" || p.data !== undefined ? JSON.stringify(p.data) : ""))
    .filter((t) => t !== "")
    .join("\n");
}

/**
 * Sends the task with `message/send` (A2A's JSON-RPC, the v0.3 method names every server
 * speaks) and reads the answer's text: a message's parts, or a task's artifacts (its status
 * message when it has none). A task not finished yet is polled with `tasks/get`.
 */
async function callA2a(ctx: ActorContext<unknown>, subject: A2aSubject, input: string, runId: string, deps: ExternalDeps): Promise<CallOutcome> {
  const zero = { inputTokens: 0, outputTokens: 0 };
  let auth: Record<string, string>;
  try {
    auth = a2aHeaders(subject, deps.trust, deps.key);
    // Again here, not only at start: the name may resolve to another address by now.
    await checkEndpoint(subject.url, deps.trust, `${deps.key ?? `subject ${subject.id}`}.a2a`);
  } catch (err) {
    const why = err instanceof ConfigError ? new SubjectUnavailableError(subject.id, `on this node: ${err.message}`) : err;
    return { ok: false, error: { ...failure(why), retryable: false }, usage: zero };
  }
  try {
    let r = await rpc(
      subject,
      "message/send",
      { message: { kind: "message", messageId: runId, role: "user", parts: [{ kind: "text", text: input }] } },
      runId,
      ctx.signal,
      auth,
    );
    if (r.kind === "message") return { ok: true, output: textOf(r.parts), usage: zero };
    for (let polls = 0; !TERMINAL.has(String((r.status as { state?: string } | undefined)?.state)); polls++) {
      await new Promise((res) => setTimeout(res, Math.min(2000, 100 * 2 ** Math.min(polls, 4))));
      if (ctx.signal.aborted) throw ctx.signal.reason;
      r = await rpc(subject, "tasks/get", { id: r.id }, `${runId}-get${polls}`, ctx.signal, auth);
    }
    const status = r.status as { state: string; message?: { parts?: unknown } };
    const usage = readUsage(((r.metadata as Record<string, unknown> | undefined)?.kova as Record<string, unknown> | undefined)?.usage);
    const artifacts = Array.isArray(r.artifacts) ? (r.artifacts as Array<{ parts?: unknown }>) : [];
    const text = artifacts.map((a) => textOf(a.parts)).join("\n") || textOf(status.message?.parts);
    if (status.state === "completed") return { ok: true, output: text, usage };
    return {
      ok: false,
      error: {
        code: "EVAL_EXTERNAL_REJECTED",
        message: `subject ${subject.id}: the task ended ${status.state}${text ? `: ${text.slice(0, 200)}` : ""}`,
        retryable: false,
      },
      usage,
    };
  } catch (err) {
    if (ctx.signal.aborted) throw err;
    return { ok: false, error: failure(err), usage: zero };
  }
}
