import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { TurnJournal, type JournalIo } from "../../src/actors/turn-journal.js";
import { parseTurnRecord, TURN_RECORD_VERSION } from "../../src/actors/turn-record.js";
import { ActorMemory } from "../../src/actors/memory.js";
import { CHECKPOINT_VERSION, type Checkpoint } from "../../src/actors/checkpoint-store.js";
import { ActorErrorCode } from "../../src/actors/errors.js";
import { readCheckpoint } from "../../src/actors/checkpoint-store.js";
import { readAgentRecord, AGENT_RECORD_VERSION } from "../../src/node/registry.js";
import { readLeaseRecord, LEASE_RECORD_VERSION } from "../../src/node/lease.js";
import { UnsupportedFormatError } from "../../src/core/format-version.js";

const fixture = (name: string, dir = "actors"): unknown => JSON.parse(readFileSync(join(import.meta.dirname, "../fixtures", dir, name), "utf8"));

function refused(read: () => unknown): UnsupportedFormatError {
  try {
    read();
  } catch (err) {
    if (err instanceof UnsupportedFormatError) return err;
    throw err;
  }
  throw new Error("expected UnsupportedFormatError");
}

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

  it("formats - version 1 registry and lease values (written before versioning, without v) still load", () => {
    expect([AGENT_RECORD_VERSION, LEASE_RECORD_VERSION]).toEqual([1, 1]);
    expect(readAgentRecord("researcher", fixture("agent-record-v1.json", "node"))).toMatchObject({ id: "researcher", node: "kova-2", desired: "running", capabilities: ["research", "cite"] });
    expect(readLeaseRecord("researcher", fixture("lease-record-v1.json", "node"))).toMatchObject({ node: "kova-2", at: 1764450000000 });
  });

  it("formats - a record of an unknown version is refused with an error naming the record and the versions this build reads", () => {
    const cases: Array<[string, () => unknown]> = [
      ["turn record of actor agent-7", () => parseTurnRecord({ ...(fixture("turn-record-v1.json") as object), v: 2 })],
      ["checkpoint of actor c1", () => readCheckpoint("checkpoint of actor c1", { ...(fixture("checkpoint-v1.json") as Checkpoint), v: 2 })],
      ["registry record of agent researcher", () => readAgentRecord("researcher", { ...(fixture("agent-record-v1.json", "node") as object), v: 2 })],
      ["lease of actor researcher", () => readLeaseRecord("researcher", { ...(fixture("lease-record-v1.json", "node") as object), v: "2" })],
    ];
    for (const [record, read] of cases) {
      const err = refused(read);
      expect(err.code).toBe("UNSUPPORTED_FORMAT");
      expect(err.message).toContain(record);
      expect(err.message).toContain("reads only version 1");
      expect(err.data).toMatchObject({ record, readable: [1] });
    }
  });
});
