import { describe, expect, it } from "vitest";
import { DeltaBatch } from "../../src/agents/model-turn.js";

const nextTurn = () => new Promise((r) => setImmediate(r));

describe("model_delta batching", () => {
  it("deltas - tokens that arrive together go out as one delta, a token arriving alone goes out on its own, and flush sends what is left at once", async () => {
    const sent: string[] = [];
    const batch = new DeltaBatch((text) => sent.push(text));
    for (const t of ["The ", "answer ", "is "]) batch.add(t);
    expect(sent).toEqual([]);
    await nextTurn();
    expect(sent).toEqual(["The answer is "]);
    batch.add("4");
    await nextTurn();
    batch.add("2");
    batch.flush();
    expect(sent).toEqual(["The answer is ", "4", "2"]);
    await nextTurn();
    batch.flush();
    expect(sent.join("")).toBe("The answer is 42");
    expect(sent).toHaveLength(3);
  });
});
