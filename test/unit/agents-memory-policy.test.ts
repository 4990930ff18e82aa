import { describe, expect, it } from "vitest";
import { fitContext, hasNoOrphans, toUnits, withSummary, SUMMARY_PREFIX, type ChatMessage } from "../../src/agents/index.js";

const user = (n: number): ChatMessage => ({ role: "user", content: `u${n}` });
const answer = (n: number): ChatMessage => ({ role: "assistant", content: `a${n}` });
const calls = (ids: string[]): ChatMessage => ({ role: "assistant", content: null, toolCalls: ids.map((id) => ({ id, name: "t", arguments: "{}" })) });
const result = (id: string): ChatMessage => ({ role: "tool", toolCallId: id, content: `r-${id}` });
/** Every message costs 10 tokens: budgets below read as message counts × 10. */
const ten = () => 10;

function conversation(turns: number): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (let i = 0; i < turns; i++) out.push(user(i), calls([`c${i}a`, `c${i}b`]), result(`c${i}a`), result(`c${i}b`), answer(i));
  return out;
}

describe("memory policies (pure)", () => {
  it("units - an assistant message and its tool results form one unit; an orphaned result is dropped", () => {
    const units = toUnits([user(0), calls(["x", "y"]), result("x"), result("y"), answer(0), result("ghost")]);
    expect(units.map((u) => u.length)).toEqual([1, 3, 1]);
    expect(hasNoOrphans(units.flat())).toBe(true);
    expect(hasNoOrphans([user(0), result("x")])).toBe(false);
    expect(hasNoOrphans([calls(["x"]), user(1), result("x")])).toBe(false);
  });

  it("fifo - drops whole units from the front until the rest fits, never leaving an orphaned tool result", () => {
    const history = conversation(4); // 20 messages, 200 tokens
    for (let budget = 10; budget <= 220; budget += 10) {
      const fit = fitContext(history, { policy: "fifo", maxTokens: 1000 }, budget, ten);
      expect(hasNoOrphans(fit.kept)).toBe(true);
      expect(fit.kept.length * 10).toBeLessThanOrEqual(Math.max(budget, 10));
      expect([...fit.evicted, ...fit.kept]).toEqual(history);
      expect(fit.kept.at(-1)).toEqual(answer(3));
    }
    // The newest unit stays even when it alone is over budget.
    const big = fitContext([user(0), calls(["a", "b", "c"]), result("a"), result("b"), result("c")], { policy: "fifo", maxTokens: 1000 }, 5, ten);
    expect(big.kept).toHaveLength(4);
  });

  it("sliding_window - keeps at most `window` messages (whole units), then fits the token budget", () => {
    const history = conversation(4);
    const fit = fitContext(history, { policy: "sliding_window", maxTokens: 1000, window: 6 }, 1000, ten);
    expect(fit.kept).toEqual([answer(2), user(3), calls(["c3a", "c3b"]), result("c3a"), result("c3b"), answer(3)]);
    expect(hasNoOrphans(fit.kept)).toBe(true);
    const tight = fitContext(history, { policy: "sliding_window", maxTokens: 1000, window: 6 }, 30, ten);
    expect(tight.kept).toEqual([answer(3)]);
  });

  it("summary_first - over budget, keeps the last keep_last messages and hands the older ones to be summarized", () => {
    const history = conversation(3); // 15 messages
    const under = fitContext(history, { policy: "summary_first", maxTokens: 1000, keepLast: 4 }, 1000, ten);
    expect(under.summarize).toBeUndefined();
    expect(under.kept).toEqual(history);
    const fit = fitContext(history, { policy: "summary_first", maxTokens: 1000, keepLast: 4 }, 100, ten);
    expect(fit.kept).toEqual([calls(["c2a", "c2b"]), result("c2a"), result("c2b"), answer(2)]);
    expect(fit.summarize).toEqual(history.slice(0, 11));
    const next = withSummary("they talked", fit.kept);
    expect(next[0]).toEqual({ role: "system", content: `${SUMMARY_PREFIX}they talked` });
    expect(hasNoOrphans(next)).toBe(true);
    // keep_last smaller than the newest unit still keeps that unit whole.
    const one = fitContext(history, { policy: "summary_first", maxTokens: 1000, keepLast: 1 }, 100, ten);
    expect(one.kept).toEqual([answer(2)]);
    expect(hasNoOrphans(one.kept)).toBe(true);
  });
});
