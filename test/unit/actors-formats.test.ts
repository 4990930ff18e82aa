import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { TurnJournal, type JournalIo } from "../../src/actors/turn-journal.js";
import { parseTurnRecord, TURN_RECORD_VERSION } from "../../src/actors/turn-record.js";
import { ActorMemory } from "../../src/actors/memory.js";
import { CHECKPOINT_VERSION, type Checkpoint } from "../../src/actors/checkpoint-store.js";
import { ActorErrorCode } from "../../src/actors/errors.js";

const fixture = (name: string): unknown => JSON.parse(readFileSync(join(import.meta.dirname, "../fixtures/actors", name), "utf8"));

const io: JournalIo = {
  persist: async () => {},
  fence: async () => {},
  gate: async () => {},
  now: () => 0,
  random: () => 0.99,
  newId: () => "fresh",
};

describe("persisted formats (golden files)", () => {
  it("formats - a version 1 turn record still loads and replays: results, errors, values and the unknown outcome", async () => {
    expect(TURN_RECORD_VERSION).toBe(1);
    const record = parseTurnRecord(fixture("turn-record-v1.json"))!;
    expect(record).toMatchObject({ v: 1, actorId: "agent-7", attempt: 2, envelope: { id: "m-0001" } });
    const j = new TurnJournal("agent-7", record, io);
    expect([j.now(), j.random(), j.newId()]).toEqual([1764450000000, 0.25, "4b7c1a52-0000-4000-8000-000000000001"]);
    expect(await j.step("llm", async () => ({ text: "new" }))).toEqual({ text: "use web_search" });
    const failed = await j.step("tool:web_search", async () => "ran", { idempotent: true }).catch((e: unknown) => e);
    expect(isKovaError(failed, ErrorCode.TIMEOUT)).toBe(true);
    expect(await j.step("llm", async () => ({ text: "new" }))).toEqual({ text: "answer from memory" });
    const unknown = await j.step("send:result_notify:coordinator", async () => "sent").catch((e: unknown) => e);
    expect(isKovaError(unknown, ActorErrorCode.STEP_OUTCOME_UNKNOWN)).toBe(true);
  });

  it("formats - a version 1 checkpoint still loads as the actor's memory", () => {
    expect(CHECKPOINT_VERSION).toBe(1);
    const cp = fixture("checkpoint-v1.json") as Checkpoint;
    const mem = ActorMemory.from(cp, undefined, () => ({ count: 0, ids: [] }));
    expect(mem.state).toEqual({ count: 2, ids: ["a", "b"] });
    expect([mem.revision, mem.has("a"), mem.has("c")]).toEqual([2, true, false]);
  });
});
