import { describe, expect, it } from "vitest";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { TurnJournal, type JournalIo } from "../../src/actors/turn-journal.js";
import { derivedId } from "../../src/core/ids.js";
import { markCommitted, newTurnRecord, parseTurnRecord, TURN_RECORD_VERSION } from "../../src/actors/turn-record.js";
import { makeContext } from "../../src/actors/actor-context.js";
import type { HostDeps } from "../../src/actors/ports.js";
import { type A2AEnvelope, encodeValue } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { ActorMemory, localCheckpointKey, localWindowKey } from "../../src/actors/memory.js";
import { Wal } from "../../src/wal/index.js";
import { tempDir } from "../fixtures/disposable.js";
import {
  CHECKPOINT_VERSION,
  checkpointJson,
  isSplit,
  localCheckpoint,
  localWindow,
  readWindow,
  WINDOW_VERSION,
  windowJson,
  type Checkpoint,
  type StoredCheckpoint,
  readCheckpoint,
} from "../../src/actors/checkpoint-store.js";
import { ActorErrorCode } from "../../src/actors/errors.js";
import { AGENT_RECORD_FORMAT, AGENT_RECORD_VERSION } from "../../src/cluster/registry.js";
import { LEASE_RECORD_FORMAT, LEASE_RECORD_VERSION } from "../../src/cluster/lease.js";
import { NODE_RECORD_FORMAT, NODE_RECORD_VERSION } from "../../src/cluster/membership.js";
import { JOURNAL_ENTRY_VERSION, readJournalEntry } from "../../src/actors/step-journal.js";
import { expectRefused, goldenBytes, goldenJson, refused } from "../fixtures/formats.js";

const fixture = (name: string, dir = "actors"): unknown => goldenJson(dir, name);

const io: JournalIo = {
  persist: async () => {},
  fence: async () => {},
  gate: async () => {},
  signal: new AbortController().signal,
  now: () => 0,
  random: () => 0.99,
  newId: () => "fresh",
};

describe("persisted formats (golden files)", () => {
  it("formats - a version 1 turn record still loads and replays: results, errors, values and the unknown outcome", async () => {
    expect(TURN_RECORD_VERSION).toBe(3);
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
    expect(id).toBe(derivedId("uuid", "agent-7", "m-0002", "send:1"));
    expect(id).toBe((await replay("turn-record-v2.json")).id);
    expect(sent.map((e) => e.id)).toEqual(["4b7c1a52-0000-4000-8000-000000000001", id, id]);
  });

  it("formats - a version 3 turn record keeps a parked turn's commit and saved reply; older versions load without them", () => {
    const v3 = parseTurnRecord(fixture("turn-record-v3.json"))!;
    expect(v3).toMatchObject({ v: 3, streamSeq: 43, committed: true, reply: { for: "m-0003", result: "high tide at 6" } });
    expect(v3.steps).toEqual([{ name: "llm", status: "done", idempotent: false, result: { text: "high tide at 6" } }]);
    for (const name of ["turn-record-v1.json", "turn-record-v2.json"]) {
      const old = parseTurnRecord(fixture(name))!;
      expect([old.committed, old.reply]).toEqual([undefined, undefined]);
    }
    // A mark that is not `true`, or a reply without the id it answers, is not taken as a commit.
    const odd = parseTurnRecord({ ...(fixture("turn-record-v3.json") as object), committed: "yes", reply: { result: "x" } })!;
    expect([odd.committed, odd.reply]).toEqual([undefined, undefined]);
    // Only a parked committed record is written as 3: an ordinary one stays readable by a build that reads 1 and 2.
    const fresh = newTurnRecord("agent-7", "t", { id: "m-9", from: "x", to: "agent-7", type: "task_delegate", payload: null });
    expect(fresh.v).toBe(2);
    markCommitted(fresh, { for: "m-9", result: 1 });
    expect(fresh).toMatchObject({ v: 3, committed: true, reply: { for: "m-9", result: 1 } });
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
    const raw = fixture("checkpoint-v2.json") as Checkpoint;
    const ids = ["3f2c9a1e-8b7d-4c6e-9f01-23456789abcd", "client-id_7"];
    const cp = readCheckpoint("checkpoint of actor c1", raw);
    expect(cp.processed).toEqual(ids);
    expect(JSON.parse(checkpointJson(cp))).toEqual(raw);
    const local = localCheckpoint(cp);
    expect(Buffer.from(local.processed as Uint8Array).toString("base64")).toBe(raw.processed);
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

  it("formats - a version 3 checkpoint keeps the replies the actor owes, past the processed window; only a checkpoint that owes one is written as 3", () => {
    const raw = fixture("checkpoint-v3.json") as Checkpoint;
    const cp = readCheckpoint("checkpoint of actor c1", raw);
    expect(JSON.parse(checkpointJson(cp))).toEqual(raw);
    const mem = ActorMemory.from(cp, undefined, () => ({ count: 0, ids: [] }), 2);
    // With its asker's address, so that any host can send it, even with the message gone.
    expect(mem.owed()).toEqual([raw.owed![0]]);
    const meta = { type: "tide", nodeId: "n2", ts: 1 };
    for (const id of ["m-0004", "m-0005"]) mem.apply(mem.next({ count: 3, ids: [] }, id, meta));
    // Out of the window of 2, still a committed turn with its reply, in every checkpoint until it is sent.
    expect([mem.has("m-0003"), mem.replyFor("m-0003")?.result]).toEqual([true, "high tide at 6"]);
    expect(mem.next({ count: 3, ids: [] }, "m-0006", meta)).toMatchObject({ v: 3, owed: [{ for: "m-0003" }] });
    mem.replied("m-0003");
    expect(mem.has("m-0003")).toBe(false);
    const paid = mem.next({ count: 3, ids: [] }, "m-0006", meta);
    expect([paid.v, paid.owed, JSON.parse(checkpointJson(paid)).v]).toEqual([2, undefined, 2]);
    // Older versions owe nothing; an entry without the id it answers or an inbox is not taken.
    expect(readCheckpoint("checkpoint of actor c1", fixture("checkpoint-v2.json") as Checkpoint).owed).toBeUndefined();
    const odd = {
      ...raw,
      owed: [
        { for: "m-0003", result: 1 },
        { for: "m-0003", asked: { id: "m-0003" } },
      ],
    } as unknown as Checkpoint;
    expect(readCheckpoint("checkpoint of actor c1", odd).owed).toBeUndefined();
  });

  it("formats - a version 4 checkpoint (its window split: the ids after `base` in it, the window of `base` stored apart, version 1) loads as the actor's memory, from NATS and from the WAL; version 5 is refused", async () => {
    expect([CHECKPOINT_VERSION, WINDOW_VERSION]).toEqual([4, 1]);
    const raw = fixture("checkpoint-v4.json") as StoredCheckpoint;
    const window = readWindow("processed-ids window of actor c1", fixture("window-v1.json"));
    const ids = ["3f2c9a1e-8b7d-4c6e-9f01-23456789abcd", "client-id_7", "m-0003", "m-0004"];
    expect(isSplit(raw)).toBe(true);
    const cp = readCheckpoint("checkpoint of actor c1", raw, window);
    expect([cp.processed, cp.revision]).toEqual([ids, 4]);
    // Written again as it was, given the same split.
    expect(JSON.parse(checkpointJson({ ...cp, split: { base: 2 } }))).toEqual(raw);
    expect(JSON.parse(windowJson(2, ids.slice(0, 2)))).toEqual(fixture("window-v1.json"));
    const mem = ActorMemory.from(cp, undefined, () => ({ count: 0, ids: [] }));
    expect([mem.revision, ...ids.map((id) => mem.has(id)), mem.has("m-0005")]).toEqual([4, true, true, true, true, false]);
    // Through a real WAL's side table: the checkpoint and its window, bytes in msgpack.
    await using dir = await tempDir("cp-v4");
    let wal = await Wal.open({ dir: dir.path, sync: "full", ringBits: 8 });
    const seq = await wal.append("t", { n: 1 }, { owner: "c1" });
    const split = { ...cp, split: { base: 2, ids: ids.slice(0, 2) } };
    await wal.complete(seq, {
      kv: [
        { key: localCheckpointKey("c1"), value: localCheckpoint(split) },
        { key: localWindowKey("c1"), value: localWindow(2, ids.slice(0, 2)) },
      ],
    });
    await wal.close();
    wal = await Wal.open({ dir: dir.path, sync: "full", ringBits: 8 });
    const stored = wal.getKv<StoredCheckpoint>(localCheckpointKey("c1"))!;
    const reread = readCheckpoint("local checkpoint of actor c1", stored, readWindow("w", wal.getKv(localWindowKey("c1"))));
    await wal.close();
    expect([stored.v, reread.processed]).toEqual([4, ids]);
    expectRefused(() => readCheckpoint("checkpoint of actor c1", { ...raw, v: 5 }, window), "checkpoint of actor c1", [1, 2, 3, 4]);
    expectRefused(
      () => readWindow("processed-ids window of actor c1", { ...(fixture("window-v1.json") as object), v: 2 }),
      "processed-ids window of actor c1",
      [1],
    );
  });

  it("formats - version 1 registry, lease and heartbeat values load, as written today (v: 1) and before versioning (no v)", () => {
    expect([AGENT_RECORD_VERSION, LEASE_RECORD_VERSION, NODE_RECORD_VERSION]).toEqual([1, 1, 1]);
    // test/integration/node-formats.test.ts checks that a running node writes the -tagged shapes.
    for (const name of ["agent-record-v1.json", "agent-record-v1-tagged.json"]) {
      expect(AGENT_RECORD_FORMAT.decode("researcher", fixture(name, "node")), name).toMatchObject({
        id: "researcher",
        node: "kova-2",
        desired: "running",
        capabilities: ["research", "cite"],
      });
    }
    for (const name of ["lease-record-v1.json", "lease-record-v1-tagged.json"]) {
      expect(LEASE_RECORD_FORMAT.decode("researcher", fixture(name, "node")), name).toMatchObject({ node: "kova-2", at: 1764450000000 });
    }
    for (const name of ["node-record-v1.json", "node-record-v1-tagged.json"]) {
      expect(NODE_RECORD_FORMAT.decode("kova-2", fixture(name, "node")), name).toMatchObject({
        id: "kova-2",
        state: "up",
        heartbeatAt: 1764450000000,
        types: ["counter", "llm-agent"],
      });
    }
  });

  it("formats - a record of an unknown version is refused with an error naming the record and the versions this build reads", () => {
    const turn = refused(() => parseTurnRecord({ ...(fixture("turn-record-v1.json") as object), v: 4 }));
    expect(turn.message).toContain("turn record of actor agent-7");
    expect(turn.data).toMatchObject({ readable: [1, 2, 3] });
    const checkpoint = refused(() => readCheckpoint("checkpoint of actor c1", { ...(fixture("checkpoint-v2.json") as Checkpoint), v: 5 }));
    expect(checkpoint.message).toContain("checkpoint of actor c1");
    expect(checkpoint.data).toMatchObject({ readable: [1, 2, 3, 4] });
    const cases: Array<[string, () => unknown]> = [
      ["registry record of agent researcher", () => AGENT_RECORD_FORMAT.decode("researcher", { ...(fixture("agent-record-v1.json", "node") as object), v: 2 })],
      ["lease of actor researcher", () => LEASE_RECORD_FORMAT.decode("researcher", { ...(fixture("lease-record-v1.json", "node") as object), v: "2" })],
      ["heartbeat of node kova-2", () => NODE_RECORD_FORMAT.decode("kova-2", { ...(fixture("node-record-v1-tagged.json", "node") as object), v: 2 })],
    ];
    for (const [record, read] of cases) {
      const err = refused(read);
      expect(err.code).toBe("UNSUPPORTED_FORMAT");
      expect(err.message).toContain(record);
      expect(err.message).toContain("reads only version 1");
      expect(err.data).toMatchObject({ record, readable: [1] });
    }
  });

  it("formats - version 1 step-journal entries (msgpack golden files) load; an entry of a newer version is refused naming it", () => {
    expect(JOURNAL_ENTRY_VERSION).toBe(1);
    // test/integration/actors-journal-formats.test.ts takes a turn over from the same files on NATS.
    const dir = "actors/journal-entry-v1";
    const kinds = ["1-claim", "2-result", "3-intent", "4-yield", "5-claim", "turn-done"].map(
      (n, i) => readJournalEntry("agent-7", i + 1, goldenBytes(dir, `${n}.msgpack`)).k,
    );
    expect(kinds).toEqual(["claim", "result", "intent", "yield", "claim", "turn_done"]);
    expect(readJournalEntry("agent-7", 2, goldenBytes(dir, "2-result.msgpack"))).toEqual({
      v: 1,
      k: "result",
      node: "kova-1",
      turn: "m-0001",
      attempt: 1,
      i: 0,
      step: { name: "llm", status: "done", idempotent: false, result: { text: "use shell_exec" } },
      vals: { at: [0, 0, 0], clock: [1764450000000], random: [0.25], ids: ["4b7c1a52-0000-4000-8000-000000000001"] },
    });
    const newer = encodeValue({ ...(readJournalEntry("agent-7", 3, goldenBytes(dir, "3-intent.msgpack")) as object), v: 2 });
    expectRefused(() => readJournalEntry("agent-7", 3, newer), "step-journal entry #3 of actor agent-7", [1]);
  });
});
