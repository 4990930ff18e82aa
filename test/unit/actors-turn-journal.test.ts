import { describe, expect, it } from "vitest";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { TurnJournal, type JournalIo } from "../../src/actors/turn-journal.js";
import { mergeTurn, newTurnRecord, parseTurnRecord, type TurnRecord } from "../../src/actors/turn-record.js";
import { ActorErrorCode } from "../../src/actors/errors.js";

const env = { id: "m1", from: "t", to: "a", type: "task_delegate" as const, payload: { n: 1 } };

/** A journal whose durable writes are copies kept in memory: what a crash would leave. */
function harness(seed = 0) {
  const writes: TurnRecord[] = [];
  const turn = new AbortController();
  let clock = 1_000 + seed;
  let rnd = seed;
  let ids = seed;
  let fences = 0;
  const io: JournalIo = {
    persist: async (r) => void writes.push(structuredClone(r)),
    fence: async () => void fences++,
    gate: async () => {},
    signal: turn.signal,
    now: () => clock++,
    random: () => (rnd++ % 10) / 10,
    newId: () => `id-${ids++}`,
  };
  return { io, writes, fences: () => fences, cut: (reason: Error) => turn.abort(reason) };
}

describe("turn journal (deterministic replay)", () => {
  it("replay - a rebuilt turn gets the recorded clock, random numbers, ids and step results without re-running steps", async () => {
    const first = harness(0);
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), first.io);
    const calls: string[] = [];
    const handler = async (j: TurnJournal) => {
      const t = j.now();
      const r = j.random();
      const id = j.newId();
      const llm = await j.step("llm", async () => {
        calls.push("llm");
        return { text: `reply at ${t}` };
      });
      const tool = await j.step("tool", async () => {
        calls.push("tool");
        return r * 100;
      });
      return { t, r, id, llm, tool };
    };
    const original = await handler(journal);
    expect(journal.replaying).toBe(false);
    expect(first.fences()).toBe(2);
    const crashRecord = parseTurnRecord(first.writes.at(-1))!;
    expect(crashRecord.clock).toEqual([original.t]);

    const second = harness(500);
    const replay = new TurnJournal("a", crashRecord, second.io);
    expect(replay.replaying).toBe(true);
    const again = await handler(replay);
    expect(again).toEqual(original);
    expect(calls).toEqual(["llm", "tool"]);
    expect(second.writes).toHaveLength(0);
    expect(replay.replaying).toBe(false);
  });

  it("replay - a non-idempotent step started before the crash with no result gives outcome unknown, also on later replays", async () => {
    const first = harness();
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), first.io);
    let charged = 0;
    let entered!: () => void;
    const charging = new Promise<void>((r) => (entered = r));
    const pending = journal.step("charge-card", () => {
      charged++;
      entered();
      return new Promise<never>(() => undefined);
    });
    await charging;
    expect(charged).toBe(1);
    void pending;
    const crashRecord = first.writes.at(-1)!;
    expect(crashRecord.steps).toEqual([{ name: "charge-card", status: "started", idempotent: false }]);

    const second = harness();
    const replay = new TurnJournal("a", structuredClone(crashRecord), second.io);
    const err = await replay.step("charge-card", async () => void charged++).catch((e: unknown) => e);
    expect(isKovaError(err, ActorErrorCode.STEP_OUTCOME_UNKNOWN)).toBe(true);
    expect((err as { outcome: string }).outcome).toBe("unknown");
    expect(charged).toBe(1);
    expect(second.writes.at(-1)!.steps[0]!.status).toBe("unknown");

    const third = new TurnJournal("a", structuredClone(second.writes.at(-1)!), harness().io);
    const again = await third.step("charge-card", async () => void charged++, { idempotent: true }).catch((e: unknown) => e);
    expect(isKovaError(again, ActorErrorCode.STEP_OUTCOME_UNKNOWN)).toBe(true);
    expect(charged).toBe(1);
  });

  it("replay - an idempotent step interrupted by a crash runs again and its new result is recorded", async () => {
    const record = newTurnRecord("a", "t", env);
    record.steps.push({ name: "done-before", status: "done", idempotent: false, result: 41 });
    const h = harness();
    const journal = new TurnJournal("a", record, h.io);
    let runs = 0;
    expect(await journal.step("done-before", async () => ++runs)).toBe(41);
    expect(await journal.step("fetch", async () => ++runs + 100, { idempotent: true })).toBe(101);
    expect(runs).toBe(1);
    expect(h.writes.at(-1)!.steps.map((s) => [s.name, s.status, s.result])).toEqual([
      ["done-before", "done", 41],
      ["fetch", "done", 101],
    ]);
  });

  it("replay - a step that failed and was handled is replayed as the same error; a trailing idempotent failure is retried", async () => {
    const h = harness();
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), h.io);
    const e1 = await journal
      .step(
        "tool-a",
        async () => {
          throw new Error("tool a broke");
        },
        { idempotent: true },
      )
      .catch((e: Error) => e);
    expect(e1.message).toBe("tool a broke");
    await journal.step("llm", async () => "recovered");
    await journal
      .step(
        "tool-b",
        async () => {
          throw new Error("tool b broke");
        },
        { idempotent: true },
      )
      .catch(() => undefined);

    const replay = new TurnJournal("a", structuredClone(h.writes.at(-1)!), harness().io);
    const r1 = await replay.step("tool-a", async () => "ran again", { idempotent: true }).catch((e: Error) => e);
    expect((r1 as Error).message).toBe("tool a broke");
    expect(await replay.step("llm", async () => "new llm call")).toBe("recovered");
    expect(await replay.step("tool-b", async () => "b fixed", { idempotent: true })).toBe("b fixed");
  });

  it("cut - steps cut short by the turn's end (a stop) record no outcome: on replay the non-idempotent one is outcome unknown and the idempotent one runs again, though it is not the last step", async () => {
    const h = harness();
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), h.io);
    const runs = { lookup: 0, charge: 0 };
    const entered: Promise<void>[] = [];
    // Each step runs until the turn is cut, and then rejects with the cut's reason, as a tool honouring its signal does.
    const untilCut = (name: keyof typeof runs) => {
      let entry!: () => void;
      entered.push(new Promise<void>((r) => (entry = r)));
      return () => {
        runs[name]++;
        entry();
        return new Promise<never>((_, reject) => h.io.signal.addEventListener("abort", () => reject(h.io.signal.reason), { once: true }));
      };
    };
    const cutSteps = Promise.allSettled([
      journal.step("lookup", untilCut("lookup"), { idempotent: true }),
      journal.step("charge", untilCut("charge"), { idempotent: false }),
    ]);
    await Promise.all(entered);
    const stop = Object.assign(new Error("turn stopped by stop"), { code: ErrorCode.INTERRUPTED });
    h.cut(stop);
    expect((await cutSteps).map((r) => (r.status === "rejected" ? r.reason : r.value))).toEqual([stop, stop]);
    // The host makes the record durable as the stop leaves it (the turn runner's `yield` write).
    await h.io.persist(journal.record);
    const left = h.writes.at(-1)!;
    expect(left.steps.map((s) => s && [s.name, s.status])).toEqual([
      ["lookup", "started"],
      ["charge", "started"],
    ]);

    const replay = new TurnJournal("a", structuredClone(left), harness().io);
    const [lookup, charge] = await Promise.allSettled([
      replay.step("lookup", async () => `lookup run ${++runs.lookup}`, { idempotent: true }),
      replay.step("charge", async () => `charge run ${++runs.charge}`, { idempotent: false }),
    ]);
    expect(lookup).toEqual({ status: "fulfilled", value: "lookup run 2" });
    expect(charge.status === "rejected" && isKovaError(charge.reason, ActorErrorCode.STEP_OUTCOME_UNKNOWN)).toBe(true);
    expect(runs).toEqual({ lookup: 2, charge: 1 });
  });

  it("replay - a handler asking for a different step than recorded fails with REPLAY_MISMATCH", async () => {
    const record = newTurnRecord("a", "t", env);
    record.steps.push({ name: "search", status: "done", idempotent: true, result: [] });
    const journal = new TurnJournal("a", record, harness().io);
    const err = await journal.step("write-file", async () => 1).catch((e: unknown) => e);
    expect(isKovaError(err, ActorErrorCode.REPLAY_MISMATCH)).toBe(true);
    expect((err as Error).message).toContain('recorded "search"');
  });

  it("replay - values handed out after the last step are made durable by flush", async () => {
    const h = harness();
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), h.io);
    journal.newId();
    expect(journal.dirty).toBe(true);
    await journal.flush();
    expect(h.writes.at(-1)!.ids).toEqual(["id-0"]);
    await journal.flush();
    expect(h.writes).toHaveLength(1);
  });

  it("turn record - an old record without the newer fields still loads", () => {
    const old = parseTurnRecord({ actorId: "a", envelope: env });
    expect(old).toMatchObject({ attempt: 1, steps: [], clock: [], random: [], ids: [] });
    expect(parseTurnRecord("garbage")).toBeUndefined();
  });
  it("concurrent steps - steps started together persist one after another and replay by their call order", async () => {
    const h = harness(0);
    let inPersist = 0;
    let overlapped = false;
    const io: JournalIo = {
      ...h.io,
      persist: async (r) => {
        inPersist++;
        if (inPersist > 1) overlapped = true;
        await new Promise((res) => setTimeout(res, 2));
        h.writes.push(structuredClone(r));
        inPersist--;
      },
    };
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), io);
    const slowFirst = (ms: number, v: string) => () => new Promise<string>((res) => setTimeout(() => res(v), ms));
    const results = await Promise.all([
      journal.step("tool:a", slowFirst(15, "A")),
      journal.step("tool:b", slowFirst(1, "B")),
      journal.step("tool:c", slowFirst(5, "C")),
    ]);
    expect(results).toEqual(["A", "B", "C"]);
    expect(overlapped).toBe(false);
    const last = parseTurnRecord(h.writes.at(-1))!;
    expect(last.steps.map((s) => [s.name, s.status, s.result])).toEqual([
      ["tool:a", "done", "A"],
      ["tool:b", "done", "B"],
      ["tool:c", "done", "C"],
    ]);
    const replay = new TurnJournal("a", last, harness(9).io);
    const again = await Promise.all(["tool:a", "tool:b", "tool:c"].map((n) => replay.step(n, () => "re-run")));
    expect(again).toEqual(["A", "B", "C"]);
  });
  it("concurrent steps - steps that end together share one write, which names each of them; a step ending alone writes at once", async () => {
    const h = harness(0);
    const changes: unknown[] = [];
    const io: JournalIo = {
      ...h.io,
      persist: async (r, change) => {
        changes.push(change);
        h.writes.push(structuredClone(r));
      },
    };
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), io);
    let release!: () => void;
    const together = new Promise<void>((r) => (release = r));
    const tools = Promise.all(["tool:a", "tool:b", "tool:c"].map((n) => journal.step(n, () => together.then(() => n.slice(5)), { idempotent: true })));
    await new Promise((r) => setTimeout(r, 5));
    release();
    expect(await tools).toEqual(["a", "b", "c"]);
    expect(changes).toEqual([{ steps: [0, 1, 2] }]);
    // Non-idempotent ones started together share the write of their intents too.
    const intents = new TurnJournal("b", newTurnRecord("b", "t", env), io);
    await Promise.all(["x", "y"].map((n) => intents.step(n, () => n)));
    expect(changes.slice(1)).toEqual([{ steps: [0, 1] }, { steps: [0, 1] }]);
    changes.splice(1);
    expect(parseTurnRecord(h.writes[0])!.steps.map((s) => s.status)).toEqual(["done", "done", "done"]);
    // Alone: its own write, with no sibling to wait for.
    await journal.step("llm", () => "x", { idempotent: true });
    expect(changes).toEqual([{ steps: [0, 1, 2] }, { steps: [3] }]);
  });
});

describe("merging the local and the NATS journal of a turn", () => {
  it("merge - per step a recorded outcome beats a bare start, the longer value lists win, and a step neither side recorded stays a hole that replay runs", async () => {
    const local = newTurnRecord("a", "t", env);
    local.steps.push({ name: "llm", status: "done", idempotent: false, result: 1 }, { name: "tool", status: "started", idempotent: false });
    local.clock.push(5);
    const remoteSteps: TurnRecord["steps"] = [];
    remoteSteps[0] = { name: "llm", status: "done", idempotent: false, result: 1 };
    remoteSteps[1] = { name: "tool", status: "done", idempotent: false, result: "ok" };
    remoteSteps[3] = { name: "later", status: "done", idempotent: false, result: "recorded beside the running step 2" };
    const merged = mergeTurn(local, { steps: remoteSteps, clock: [5, 6], random: [], ids: ["x"], attempt: 2 });
    expect(merged.steps[0]).toEqual({ name: "llm", status: "done", idempotent: false, result: 1 });
    expect(merged.steps[1]).toEqual({ name: "tool", status: "done", idempotent: false, result: "ok" });
    expect(merged.steps[2]).toBeUndefined();
    expect(merged.steps[3]?.result).toBe("recorded beside the running step 2");
    // Through the WAL's encoding the hole becomes null: replay runs that step and reuses the rest.
    const replayed = parseTurnRecord(JSON.parse(JSON.stringify(merged)))!;
    const ran: string[] = [];
    const j = new TurnJournal("a", replayed, harness().io);
    const results = await Promise.all([
      j.step("llm", () => ran.push("llm")),
      j.step("tool", () => ran.push("tool")),
      j.step(
        "search",
        () => {
          ran.push("search");
          return "searched";
        },
        { idempotent: true },
      ),
      j.step("later", () => ran.push("later")),
    ]);
    expect(ran).toEqual(["search"]);
    expect(results).toEqual([1, "ok", "searched", "recorded beside the running step 2"]);
    expect([merged.clock, merged.ids, merged.attempt]).toEqual([[5, 6], ["x"], 2]);
    // The local record is not changed in place.
    expect(local.steps[1]?.status).toBe("started");
  });
});

describe("unrecorded steps (record: false)", () => {
  it("record false - an idempotent step runs without a journal write, gets a stable key, and runs again on replay; later steps keep their indices", async () => {
    const first = harness(0);
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), first.io);
    const keys: string[] = [];
    const handler = async (j: TurnJournal) => {
      const llm = await j.step("llm", async () => "answer", { idempotent: true });
      const published = await j.step(
        "end",
        ({ key }) => {
          keys.push(key);
          return `published ${llm}`;
        },
        { idempotent: true, record: false },
      );
      return published;
    };
    expect(await handler(journal)).toBe("published answer");
    // One write: the model step's result. The unrecorded step left no trace.
    expect(first.writes).toHaveLength(1);
    const crashRecord = parseTurnRecord(JSON.parse(JSON.stringify(first.writes.at(-1))))!;
    expect(crashRecord.steps.map((s) => s?.name)).toEqual(["llm"]);

    // A replay (a crash before the turn's commit) reuses the recorded step and runs the unrecorded one again, under the same key.
    const second = harness(500);
    expect(await handler(new TurnJournal("a", crashRecord, second.io))).toBe("published answer");
    expect(second.writes).toHaveLength(0);
    expect(keys).toEqual(["a.m1.1", "a.m1.1"]);
  });

  it("record false - refused for a step that is not idempotent, before it runs", async () => {
    const h = harness(0);
    const journal = new TurnJournal("a", newTurnRecord("a", "t", env), h.io);
    let ran = false;
    await expect(journal.step("charge", () => (ran = true), { record: false })).rejects.toThrow(/record: false is for idempotent steps only/);
    expect(ran).toBe(false);
    expect(h.fences()).toBe(0);
  });
});
