import { describe, expect, it } from "vitest";
import { counterActor, defineActor, type StepRecord, type TurnRecord } from "../../src/actors/index.js";
import { describeReplay, replayTurn } from "../../src/testing/index.js";

/** A turn record as the WAL holds it: the message, the steps and values the turn recorded. */
function recorded(steps: StepRecord[], values: Partial<Pick<TurnRecord, "clock" | "random" | "ids">> = {}, type = "counter"): TurnRecord {
  return {
    v: 2,
    actorId: "c1",
    type,
    envelope: { id: "m1", from: "tester", to: "c1", type: "task_delegate", payload: {} },
    attempt: 1,
    steps,
    clock: values.clock ?? [],
    random: values.random ?? [],
    ids: values.ids ?? [],
  };
}
const done = (name: string, result: unknown, idempotent = true): StepRecord => ({ name, status: "done", idempotent, result });

describe("replay as a tool", () => {
  it("replay - a turn whose code still takes the recorded steps matches, and its state is the handler's", async () => {
    const r = await replayTurn(counterActor, recorded([done("count", "m1")]), { complete: true });
    expect(r).toMatchObject({ outcome: "matched", matchedSteps: 1, recordedSteps: 1, result: { count: 1 }, state: { count: 1, ids: ["m1"] } });
    expect(describeReplay(r)).toBe("c1 task_delegate m1: matched (1 of 1 recorded steps)");
  });

  it("replay - today's code asking for another step than recorded diverges at that step's index, naming both", async () => {
    const renamed = defineActor({
      type: "counter",
      initialState: () => ({}),
      handlers: { task_delegate: async (ctx) => ctx.step("tally", () => 1, { idempotent: true }) },
    });
    const r = await replayTurn(renamed, recorded([done("count", "m1")]));
    expect(r).toMatchObject({ outcome: "diverged", matchedSteps: 0, divergence: { kind: "step", index: 0, recorded: "count", replayed: "tally" } });
    expect(describeReplay(r)).toBe('c1 task_delegate m1: diverged at step #0: recorded "count", today\'s code asks for "tally"');
  });

  it("replay - today's code ending before the recorded steps diverges where it stopped", async () => {
    const r = await replayTurn(counterActor, recorded([done("count", "m1"), done("notify", null)]));
    expect(r).toMatchObject({ outcome: "diverged", matchedSteps: 1, divergence: { kind: "fewer-steps", index: 1, recorded: "notify" } });
  });

  it("replay - today's code drawing fewer clock readings than recorded diverges, naming the value list", async () => {
    const r = await replayTurn(counterActor, recorded([done("count", "m1")], { clock: [1_700_000_000_000] }));
    expect(r).toMatchObject({ outcome: "diverged", divergence: { kind: "fewer-values", value: "now", replayed: 0, recorded: 1 } });
  });

  it("replay - recorded values come back as recorded, in order", async () => {
    const seen: unknown[] = [];
    const def = defineActor({
      type: "counter",
      initialState: () => ({}),
      handlers: {
        task_delegate: async (ctx) => {
          seen.push(ctx.now(), ctx.random(), ctx.newId(), ctx.now());
          return null;
        },
      },
    });
    const r = await replayTurn(def, recorded([], { clock: [10, 20], random: [0.5], ids: ["id-1"] }));
    expect(r.outcome).toBe("matched");
    expect(seen).toEqual([10, 0.5, "id-1", 20]);
  });

  it("replay - a turn cut short ends where the record ends: the next step is named and never run", async () => {
    let ran = false;
    const def = defineActor({
      type: "counter",
      initialState: () => ({}),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("first", () => 1, { idempotent: true });
          return ctx.step("second", () => {
            ran = true;
            return 2;
          });
        },
      },
    });
    const cut = await replayTurn(def, recorded([done("first", 1)]));
    expect(cut).toMatchObject({ outcome: "record-ended", matchedSteps: 1, next: 'step #1 "second"' });
    expect(ran).toBe(false);
    // The same record of a turn that ran to its end: today's code wants more than there was.
    const finished = await replayTurn(def, recorded([done("first", 1)]), { complete: true });
    expect(finished).toMatchObject({ outcome: "diverged", divergence: { kind: "past-record", next: 'step #1 "second"' } });
  });

  it("replay - a value past the record stops the replay there too", async () => {
    const def = defineActor({ type: "counter", initialState: () => ({}), handlers: { task_delegate: async (ctx) => [ctx.now(), ctx.now()] } });
    expect(await replayTurn(def, recorded([], { clock: [10] }))).toMatchObject({ outcome: "record-ended", next: "now() #2" });
  });

  it("replay - a handler that catches the stop and goes on is still reported where the record ended", async () => {
    const def = defineActor({
      type: "counter",
      initialState: () => ({}),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("risky", () => 1).catch(() => undefined);
          return "carried on";
        },
      },
    });
    expect(await replayTurn(def, recorded([]))).toMatchObject({ outcome: "record-ended", next: 'step #0 "risky"' });
  });

  it("replay - a recorded send returns its recorded id and publishes nothing; a recorded failure is thrown again", async () => {
    const def = defineActor({
      type: "counter",
      initialState: () => ({}),
      handlers: {
        task_delegate: async (ctx) => {
          const id = await ctx.send({ to: "b", type: "task_delegate", payload: {} });
          await ctx.step("charge", () => 1);
          return id;
        },
      },
    });
    const record = recorded([
      done("send:task_delegate:b", "sent-id"),
      { name: "charge", status: "failed", idempotent: false, error: { code: "CARD_DECLINED", message: "declined", retryable: false } },
    ]);
    const before = structuredClone(record);
    const r = await replayTurn(def, record);
    // The replay reaches no bus (its host has none): the send came from the record.
    expect(r).toMatchObject({ outcome: "matched", matchedSteps: 2, error: { code: "CARD_DECLINED" } });
    // A recovery marks steps in the record it replays; a replay leaves the given record alone.
    expect(record).toEqual(before);
  });

  it("replay - a step that started and recorded nothing is outcome unknown, as in a recovery", async () => {
    const def = defineActor({ type: "counter", initialState: () => ({}), handlers: { task_delegate: async (ctx) => ctx.step("pay", () => 1) } });
    const r = await replayTurn(def, recorded([{ name: "pay", status: "started", idempotent: false }]));
    expect(r).toMatchObject({ outcome: "matched", error: { code: "STEP_OUTCOME_UNKNOWN" } });
  });

  it("replay - a type without a handler for the recorded message is refused, naming both", async () => {
    const def = defineActor({ type: "other", initialState: () => ({}), handlers: {} });
    await expect(replayTurn(def, recorded([]))).rejects.toThrow(/type other has no handler for task_delegate/);
  });
});
