import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { TurnJournal, type JournalIo } from "../../src/actors/turn-journal.js";
import { derivedId, parseTurnRecord, TURN_RECORD_VERSION } from "../../src/actors/turn-record.js";
import { makeContext } from "../../src/actors/actor-context.js";
import type { HostDeps } from "../../src/actors/ports.js";
import type { A2AEnvelope } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { ActorMemory, localCheckpointKey } from "../../src/actors/memory.js";
import { Wal } from "../../src/wal/index.js";
import { tempDir } from "../fixtures/disposable.js";
import { CHECKPOINT_VERSION, checkpointJson, localCheckpoint, type Checkpoint } from "../../src/actors/checkpoint-store.js";
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
    expect(TURN_RECORD_VERSION).toBe(2);
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

  it("formats - a send replayed from a version 1 record takes its id from the recorded ids, from version 2 on it is derived from the turn and the step", async () => {
    const sent: A2AEnvelope[] = [];
    const deps = { nodeId: "n1", bus: { send: async (e: A2AEnvelope) => void sent.push(e) } } as unknown as HostDeps;
    const actor = { id: "agent-7", def: { type: "researcher" }, deps, log: createLogger({ level: "silent" }) };
    const replay = async (name: string) => {
      const record = parseTurnRecord(fixture(name))!;
      const j = new TurnJournal("agent-7", record, io);
      const ctx = makeContext(actor, record.envelope, j, 1, {}, undefined, new AbortController().signal);
      await j.step("llm", async () => ({ text: "new" }));
      return { record, id: await ctx.send({ to: "coordinator", type: "result_notify", payload: "x" }) };
    };
    const v1 = parseTurnRecord({ ...(fixture("turn-record-v1.json") as object), steps: [{ name: "llm", status: "done", idempotent: false, result: {} }] })!;
    expect(v1.v).toBe(1);
    const j1 = new TurnJournal("agent-7", v1, io);
    const ctx1 = makeContext(actor, v1.envelope, j1, 1, {}, undefined, new AbortController().signal);
    await j1.step("llm", async () => ({}));
    expect(await ctx1.send({ to: "coordinator", type: "result_notify", payload: "x" })).toBe("4b7c1a52-0000-4000-8000-000000000001");

    const { record, id } = await replay("turn-record-v2.json");
    expect(record).toMatchObject({ v: 2, streamSeq: 42 });
    expect(id).toBe(derivedId("agent-7", "m-0002", "send:1"));
    expect(id).toBe((await replay("turn-record-v2.json")).id);
    expect(sent.map((e) => e.id)).toEqual(["4b7c1a52-0000-4000-8000-000000000001", id, id]);
  });

  it("formats - a version 1 checkpoint still loads as the actor's memory", () => {
    const cp = readCheckpoint("checkpoint of actor c1", fixture("checkpoint-v1.json") as Checkpoint);
    const mem = ActorMemory.from(cp, undefined, () => ({ count: 0, ids: [] }));
    expect(mem.state).toEqual({ count: 2, ids: ["a", "b"] });
    expect([mem.revision, mem.has("a"), mem.has("c")]).toEqual([2, true, false]);
    // Saved again, it is written as the current version, its ids packed.
    expect(JSON.parse(checkpointJson(cp))).toMatchObject({ v: 2, processed: Buffer.from([1, 97, 1, 98]).toString("base64") });
  });

  it("formats - a version 2 checkpoint (processed ids packed, base64 in JSON, bytes in the WAL) loads as the actor's memory", async () => {
    expect(CHECKPOINT_VERSION).toBe(2);
    const raw = fixture("checkpoint-v2.json") as Checkpoint;
    const ids = ["3f2c9a1e-8b7d-4c6e-9f01-23456789abcd", "client-id_7"];
    const cp = readCheckpoint("checkpoint of actor c1", raw);
    expect(cp.processed).toEqual(ids);
    expect(JSON.parse(checkpointJson(cp))).toEqual(raw);
    const local = localCheckpoint(cp);
    expect(Buffer.from(local.processed).toString("base64")).toBe(raw.processed);
    const back = readCheckpoint("local checkpoint of actor c1", local as unknown as Checkpoint);
    const mem = ActorMemory.from(undefined, back, () => ({ count: 0, ids: [] }));
    expect([mem.revision, mem.has(ids[0]!), mem.has(ids[1]!), mem.has("3f2c9a1e")]).toEqual([2, true, true, false]);
    // Through a real WAL's side table (msgpack, reopened): the bytes come back as bytes.
    await using dir = await tempDir("cp-v2");
    let wal = await Wal.open({ dir: dir.path, sync: "full", ringBits: 8 });
    const seq = await wal.append("t", { n: 1 }, { owner: "c1" });
    await wal.complete(seq, { kv: [{ key: localCheckpointKey("c1"), value: local }] });
    await wal.close();
    wal = await Wal.open({ dir: dir.path, sync: "full", ringBits: 8 });
    const reread = readCheckpoint("local checkpoint of actor c1", wal.getKv<Checkpoint>(localCheckpointKey("c1"))!);
    await wal.close();
    expect(reread.processed).toEqual(ids);
    // Base64 that is not packed ids, or no ids at all, is a damaged checkpoint, not an empty window.
    for (const processed of ["AAEC", undefined, 7, ["a"]]) {
      expect(() => readCheckpoint("checkpoint of actor c1", { ...raw, processed } as unknown as Checkpoint)).toThrow(
        /checkpoint of actor c1: its processed ids cannot be read/,
      );
    }
  });

  it("formats - version 1 registry and lease values (written before versioning, without v) still load", () => {
    expect([AGENT_RECORD_VERSION, LEASE_RECORD_VERSION]).toEqual([1, 1]);
    expect(readAgentRecord("researcher", fixture("agent-record-v1.json", "node"))).toMatchObject({
      id: "researcher",
      node: "kova-2",
      desired: "running",
      capabilities: ["research", "cite"],
    });
    expect(readLeaseRecord("researcher", fixture("lease-record-v1.json", "node"))).toMatchObject({ node: "kova-2", at: 1764450000000 });
  });

  it("formats - a record of an unknown version is refused with an error naming the record and the versions this build reads", () => {
    const turn = refused(() => parseTurnRecord({ ...(fixture("turn-record-v1.json") as object), v: 3 }));
    expect(turn.message).toContain("turn record of actor agent-7");
    expect(turn.data).toMatchObject({ readable: [1, 2] });
    const checkpoint = refused(() => readCheckpoint("checkpoint of actor c1", { ...(fixture("checkpoint-v2.json") as Checkpoint), v: 3 }));
    expect(checkpoint.message).toContain("checkpoint of actor c1");
    expect(checkpoint.data).toMatchObject({ readable: [1, 2] });
    const cases: Array<[string, () => unknown]> = [
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
