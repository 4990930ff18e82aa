import type { MemoryPolicy } from "../definition.js";
import type { ChatMessage } from "../model/types.js";
import { toUnits } from "./units.js";

export const DEFAULT_KEEP_LAST = 20;
export const DEFAULT_WINDOW = 40;
/** What the summary message starts with; a later summary folds the earlier one in. */
export const SUMMARY_PREFIX = "Summary of the earlier conversation:\n";

/** Counts a message's tokens (TokenCounter.countMessage; tests pass a simple count). */
export type CountMessage = (m: ChatMessage) => number;

export interface FitResult {
  /** The conversation to send (and keep), oldest first. */
  kept: ChatMessage[];
  /** Messages that left the context, oldest first. */
  evicted: ChatMessage[];
  /**
   * `summary_first` only: older messages the model should summarize. The caller asks the
   * model, then calls `withSummary(summary, kept)`.
   */
  summarize?: ChatMessage[];
}

/**
 * Fits a session's conversation (without the agent's system prompt) into `budgetTokens`
 * by the agent's policy. Whole units are evicted (an assistant message with its tool
 * results); the newest unit is always kept, even alone over budget (the provider then
 * says so, rather than the agent silently answering a truncated question).
 */
export function fitContext(history: readonly ChatMessage[], policy: MemoryPolicy, budgetTokens: number, count: CountMessage): FitResult {
  const units = toUnits(history);
  const evicted: ChatMessage[] = [];
  const orphans = history.length - units.reduce((n, u) => n + u.length, 0);
  if (orphans > 0) {
    const inUnits = new Set(units.flat());
    for (const m of history) if (!inUnits.has(m)) evicted.push(m);
  }
  let start = 0;
  if (policy.policy === "sliding_window") {
    const window = policy.window ?? DEFAULT_WINDOW;
    let msgs = 0;
    start = units.length;
    while (start > 0 && (start === units.length || msgs + units[start - 1]!.length <= window)) msgs += units[--start]!.length;
  }
  const tokens = units.map((u) => u.reduce((n, m) => n + count(m), 0));
  let total = tokens.slice(start).reduce((a, b) => a + b, 0);
  if (policy.policy === "summary_first" && total > budgetTokens && units.length - start > 1) {
    // Keep the last `keepLast` messages (whole units), summarize everything before them.
    const keepLast = policy.keepLast ?? DEFAULT_KEEP_LAST;
    let cut = units.length;
    let msgs = 0;
    while (cut > start + 1 && (cut === units.length || msgs + units[cut - 1]!.length <= keepLast)) msgs += units[--cut]!.length;
    const summarize = units.slice(start, cut).flat();
    if (summarize.length > 0) {
      for (let i = 0; i < start; i++) evicted.push(...units[i]!);
      return { kept: units.slice(cut).flat(), evicted, summarize };
    }
  }
  while (total > budgetTokens && units.length - start > 1) total -= tokens[start++]!;
  for (let i = 0; i < start; i++) evicted.push(...units[i]!);
  return { kept: units.slice(start).flat(), evicted };
}

/** The conversation after a summary: the summary as a system message, then what was kept. */
export function withSummary(summary: string, kept: readonly ChatMessage[]): ChatMessage[] {
  return [{ role: "system", content: `${SUMMARY_PREFIX}${summary}` }, ...kept];
}

/** The request that asks the model to summarize `messages`. */
export function summaryRequest(messages: readonly ChatMessage[]): ChatMessage[] {
  const lines = messages.map((m) => {
    if (m.role === "tool") return `tool result (${m.toolCallId}): ${m.content}`;
    if (m.role === "assistant") {
      const calls = m.toolCalls?.map((c) => `${c.name}(${c.arguments})`).join(", ");
      return `assistant: ${m.content ?? ""}${calls ? ` [called ${calls}]` : ""}`;
    }
    return `${m.role}: ${m.content}`;
  });
  return [
    {
      role: "system",
      content:
        "Summarize the conversation below for your own later use: keep facts, decisions, names, numbers and open questions; drop pleasantries. Answer with the summary only.",
    },
    { role: "user", content: lines.join("\n") },
  ];
}
