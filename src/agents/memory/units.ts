import type { ChatMessage } from "../model/types.js";

/**
 * A conversation as eviction sees it: units that leave the context together. An assistant
 * message that called tools and the tool results answering it are one unit, so evicting
 * the assistant message evicts its results too: a provider refuses a `tool` message whose
 * call it has not seen, and a model reading one would reason about nothing.
 */
export function toUnits(history: readonly ChatMessage[]): ChatMessage[][] {
  const units: ChatMessage[][] = [];
  let open: { unit: ChatMessage[]; ids: Set<string> } | undefined;
  for (const m of history) {
    if (m.role === "tool") {
      // A result whose call is not in the unit just before it is an orphan: it is dropped.
      if (open?.ids.has(m.toolCallId)) open.unit.push(m);
      continue;
    }
    open = undefined;
    const unit = [m];
    units.push(unit);
    if (m.role === "assistant" && m.toolCalls && m.toolCalls.length > 0) open = { unit, ids: new Set(m.toolCalls.map((c) => c.id)) };
  }
  return units;
}

/**
 * True when every `tool` message follows the assistant message that called it (with only
 * other results of that message between): what every request must satisfy.
 */
export function hasNoOrphans(messages: readonly ChatMessage[]): boolean {
  let ids: Set<string> | undefined;
  for (const m of messages) {
    if (m.role === "tool") {
      if (!ids?.has(m.toolCallId)) return false;
    } else {
      ids = m.role === "assistant" && m.toolCalls ? new Set(m.toolCalls.map((c) => c.id)) : undefined;
    }
  }
  return true;
}
