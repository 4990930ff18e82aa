import { sleep, timedPhase } from "../core/index.js";
import { checkBudgets } from "./budget.js";
import { RunEventType } from "./events.js";
import { costOf } from "./model/cost.js";
import type { AssistantMessage, ChatMessage, ModelClient, ModelRequest, Usage } from "./model/types.js";
import { fitContext, summaryRequest, withSummary } from "./memory/policy.js";
import { toUnits } from "./memory/units.js";
import { publish, publishStarted, stream, type RunScope } from "./run-scope.js";

/**
 * One model call of a run, as its journaled step records it. The step also fits the
 * context (and may ask the model for a summary first), so a replay rebuilds the same
 * conversation from `dropFirst` and `summary` without calling anything.
 */
export interface ModelTurnRecord {
  model: string;
  message: AssistantMessage;
  finishReason: string;
  usage: Usage;
  /** True when the provider sent no usage and it was counted here. */
  usageEstimated?: boolean;
  costUsd?: number;
  /** Messages evicted from the front of the history before this call. */
  dropFirst: number;
  /** The summary that replaced older messages (summary_first). */
  summary?: { text: string; model: string; usage: Usage; costUsd?: number };
  attempts: number;
}

/**
 * The step of model call `turn`: select the model, check budgets (waiting for the token
 * bucket), fit the context, call the provider (streaming tokens), charge budgets, publish
 * `model_response`. Idempotent: after a crash mid-call the call is made again.
 */
export function modelTurn(s: RunScope, turn: number): Promise<ModelTurnRecord> {
  return s.ctx.step(`model:${turn}`, ({ key }) => callModel(s, turn, key), { idempotent: true });
}

/** Applies a recorded turn's eviction to the history (the same on first run and on replay). */
export function applyFit(history: readonly ChatMessage[], rec: Pick<ModelTurnRecord, "dropFirst" | "summary">): ChatMessage[] {
  const kept = toUnits(history.slice(rec.dropFirst)).flat();
  return rec.summary ? withSummary(rec.summary.text, kept) : kept;
}

async function callModel(s: RunScope, turn: number, stepKey: string): Promise<ModelTurnRecord> {
  // `run_started` is stored while the model is chosen and called, one JetStream round trip
  // off the run's path: it is published before any later event of the run (one connection
  // keeps their order) and its ack is awaited before the step ends.
  const started = turn === 0 && s.startedInStep === "model" ? publishStarted(s, stepKey) : undefined;
  try {
    const rec = await chooseAndCall(s, turn);
    await started;
    return rec;
  } catch (err) {
    await started?.catch(() => undefined);
    throw err;
  }
}

async function chooseAndCall(s: RunScope, turn: number): Promise<ModelTurnRecord> {
  const { def, runtime, agentId } = s;
  const name = await runtime.currentModel(agentId, def, turn === 0);
  const config = runtime.modelConfig(name, `agent ${agentId}`);
  await waitForBucket(s);
  const used = s.tally.inputTokens + s.tally.outputTokens;
  const ledger = await runtime.ledger();
  await timedPhase("budget.check", agentId, () =>
    checkBudgets(
      def.budget,
      { run: used, agentTotal: s.ctx.state.usage.inputTokens + s.ctx.state.usage.outputTokens + used },
      s.request.maxTokens,
      s.groups,
      ledger,
    ),
  );

  const client = await runtime.model(name);
  const counter = await runtime.counter(name);
  const system: ChatMessage[] = def.system ? [{ role: "system", content: def.system }] : [];
  const tools = s.tools.modelTools().map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters }));
  const window = Math.min(def.memory.maxTokens, (config.contextWindow ?? Number.POSITIVE_INFINITY) - (def.maxOutputTokens ?? 0));
  const budget = Math.max(1, window - counter.countRequest(system, tools));
  const fit = fitContext(s.history, def.memory, budget, (m) => counter.countMessage(m));
  const dropFirst = fit.kept.length === 0 ? s.history.length : s.history.indexOf(fit.kept[0]!);
  let summary: ModelTurnRecord["summary"];
  if (fit.summarize) {
    const r = await complete(s, client, name, { messages: summaryRequest(fit.summarize) }, false);
    const usage = r.usage ?? { inputTokens: counter.countRequest(summaryRequest(fit.summarize)), outputTokens: counter.countText(r.message.content ?? "") };
    summary = { text: r.message.content ?? "", model: name, usage, ...(config.price ? { costUsd: costOf(usage, config.price).total } : {}) };
    await charge(s, usage.inputTokens + usage.outputTokens);
  }
  const context = applyFit(s.history, { dropFirst, ...(summary ? { summary } : {}) });
  const messages = [...system, ...context];
  stream(s, RunEventType.modelRequest, { agentId, model: name, turn, messages: messages.length, tools: tools.length });
  const res = await complete(
    s,
    client,
    name,
    {
      messages,
      ...(tools.length > 0 ? { tools } : {}),
      ...(def.maxOutputTokens !== undefined ? { maxTokens: def.maxOutputTokens } : {}),
      ...(def.temperature !== undefined ? { temperature: def.temperature } : {}),
    },
    true,
  );
  const usage = res.usage ?? { inputTokens: counter.countRequest(messages, tools), outputTokens: counter.countMessage(res.message) };
  const costUsd = config.price ? costOf(usage, config.price).total : undefined;
  await charge(s, usage.inputTokens + usage.outputTokens);
  // A new id each time (no step key): a step run again after a crash made a second, paid
  // call, and its own `model_response` is what usage accounting reads.
  await publish(s, RunEventType.modelResponse, {
    agentId,
    model: name,
    turn,
    usage,
    ...(costUsd !== undefined ? { costUsd } : {}),
    finishReason: res.finishReason,
    attempts: res.attempts,
    toolCalls: res.message.toolCalls?.length ?? 0,
  });
  return {
    model: name,
    message: res.message,
    finishReason: res.finishReason,
    usage,
    ...(res.usage ? {} : { usageEstimated: true }),
    ...(costUsd !== undefined ? { costUsd } : {}),
    dropFirst,
    ...(summary ? { summary } : {}),
    attempts: res.attempts,
  };
}

async function complete(s: RunScope, client: ModelClient, model: string, req: Omit<ModelRequest, "signal" | "acquireSlot">, streamTokens: boolean) {
  const { runtime, agentId, ctx } = s;
  // The task's priority overrides the agent's (docs/models.md, "What an agent's call asks for").
  const priority = s.request.priority ?? s.def.priority;
  const deltas = new DeltaBatch((text) => stream(s, RunEventType.modelDelta, { text }));
  try {
    return await timedPhase("model.call", agentId, () => call());
  } finally {
    // The last tokens go out before anything the run publishes after the call.
    deltas.flush();
  }

  function call() {
    return client.complete({
      ...req,
      signal: ctx.signal,
      acquireSlot: runtime.scheduler.slotFor({
        model,
        agentId,
        signal: ctx.signal,
        shareKey: s.shareKey,
        ...(priority !== undefined ? { priority } : {}),
        ...(s.request.deadline !== undefined ? { deadline: s.request.deadline } : {}),
        // Live only (not awaited): a dashboard sees a run stuck behind a full model, per policy class.
        onQueued: (q) =>
          stream(s, RunEventType.scheduleBlocked, { agentId, model, policy: q.policy, statsClass: q.statsClass, queued: q.queued, inFlight: q.inFlight }),
      }),
      headers: { "x-kova-agent": agentId, "x-kova-run": s.runId },
      onDelta: (d) => {
        ctx.working();
        if (!streamTokens) return;
        if (d.type === "text") deltas.add(d.text);
        else if (d.type === "restart") {
          deltas.flush();
          stream(s, RunEventType.modelDelta, { text: "", restart: d.attempt });
        }
      },
      onRetry: (info) => {
        runtime.log.warn({ agentId, runId: s.runId, model, ...info }, "model call failed; retrying");
        if (info.reason === "rate_limited") {
          stream(s, RunEventType.rateLimited, {
            agentId,
            model,
            attempt: info.attempt,
            delayMs: info.delayMs,
            ...(info.status !== undefined ? { status: info.status } : {}),
            ...(info.retryAfterMs !== undefined ? { retryAfterMs: info.retryAfterMs } : {}),
          });
        }
      },
    });
  }
}

/**
 * The text deltas of one model call that arrive together (one network read of the stream,
 * often many tokens when the provider is fast) go out as one `model_delta`: a publish per
 * I/O turn instead of one per token. Their text is the same, in the same order; a token
 * that arrives alone still goes out at once, after the I/O callbacks at hand.
 */
export class DeltaBatch {
  #text = "";
  #scheduled: NodeJS.Immediate | undefined;

  constructor(private readonly send: (text: string) => void) {}

  add(text: string): void {
    this.#text += text;
    this.#scheduled ??= setImmediate(() => this.flush());
  }

  flush(): void {
    if (this.#scheduled) clearImmediate(this.#scheduled);
    this.#scheduled = undefined;
    if (this.#text === "") return;
    const text = this.#text;
    this.#text = "";
    this.send(text);
  }
}

async function waitForBucket(s: RunScope): Promise<void> {
  const tpm = s.def.budget.tokensPerMinute;
  if (tpm === undefined) return;
  const bucket = s.runtime.bucket(s.agentId, tpm);
  const waitMs = bucket.waitMs(Date.now());
  if (waitMs <= 0) return;
  await publish(s, RunEventType.budgetWait, { agentId: s.agentId, budget: "tokens_per_minute", waitMs });
  await sleep(waitMs, s.ctx.signal);
}

async function charge(s: RunScope, tokens: number): Promise<void> {
  const tpm = s.def.budget.tokensPerMinute;
  if (tpm !== undefined) s.runtime.bucket(s.agentId, tpm).charge(tokens, Date.now());
  if (s.groups.length === 0) return;
  const ledger = await s.runtime.ledger();
  await Promise.all(s.groups.map((g) => ledger.charge(g.key, tokens)));
}
