import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { decodeValue, encodeValue } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { NatsStepJournal } from "../../src/actors/step-journal.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";

const server = fileServer();
const silent = createLogger({ level: "silent" });
const golden = (name: string): Uint8Array => readFileSync(join(import.meta.dirname, "../fixtures/actors/journal-entry-v1", name));
/** The entries of one turn, in the order a host wrote them (the file names give their stream sequences). */
const OPEN_TURN = ["1-claim.msgpack", "2-result.msgpack", "3-intent.msgpack", "4-yield.msgpack", "5-claim.msgpack"];

describe("step journal on NATS: stored formats", () => {
  it("formats - a journal of version 1 entries (golden files) is taken over: the new host finds the open turn its previous hosts left", async () => {
    // A fresh cluster: its journal stream starts at sequence 1, as the entries' `start` expects.
    await using bus = await connectBus(server.url, uniqueCluster("jf"));
    for (const name of OPEN_TURN) await bus.js.publish(bus.subjects.journal("agent-7"), golden(name));
    const journal = await new NatsStepJournal({ bus, nodeId: "kova-3", log: silent, timeoutMs: 5_000 }).open("agent-7");
    expect(journal.openTurn()).toEqual({
      envelopeId: "m-0001",
      start: 2,
      attempt: 1,
      yielded: true,
      steps: [
        { name: "llm", status: "done", idempotent: false, result: { text: "use shell_exec" } },
        { name: "tool:shell_exec", status: "started", idempotent: false },
      ],
      clock: [1764450000000],
      random: [0.25],
      ids: ["4b7c1a52-0000-4000-8000-000000000001"],
      nodes: ["kova-1", "kova-2"],
    });
    // The new host's claim went after them.
    const last = await bus.jsm.streams.getMessage(bus.subjects.streams.journal, { last_by_subj: bus.subjects.journal("agent-7") });
    expect([last?.seq, decodeValue(last!.data, "msgpack")]).toEqual([6, { v: 1, k: "claim", node: "kova-3", turn: "m-0001", start: 2, attempt: 1 }]);

    // A turn closed by turn_done leaves nothing open.
    await bus.js.publish(bus.subjects.journal("agent-8"), golden("turn-done.msgpack"));
    const closed = await new NatsStepJournal({ bus, nodeId: "kova-3", log: silent, timeoutMs: 5_000 }).open("agent-8");
    expect(closed.openTurn()).toBeUndefined();
  });

  it("formats - a journal entry of a newer version is refused as UNSUPPORTED_FORMAT naming the entry, not reported as NATS being unavailable", async () => {
    await using bus = await connectBus(server.url, uniqueCluster("jf"));
    const newer = { ...(decodeValue(golden("2-result.msgpack"), "msgpack") as object), v: 2 };
    await bus.js.publish(bus.subjects.journal("agent-7"), golden("1-claim.msgpack"));
    await bus.js.publish(bus.subjects.journal("agent-7"), encodeValue(newer));
    const started = performance.now();
    const err = await new NatsStepJournal({ bus, nodeId: "kova-3", log: silent, timeoutMs: 5_000 }).open("agent-7").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({
      code: "UNSUPPORTED_FORMAT",
      data: { record: "step-journal entry #2 of actor agent-7", version: 2, readable: [1] },
    });
    expect((err as Error).message).toContain("upgrade this node");
    // Refused at once: an unreadable entry is not retried like an outage until the timeout.
    expect(performance.now() - started).toBeLessThan(5_000);
    // Nothing was claimed over it.
    const info = await bus.jsm.streams.info(bus.subjects.streams.journal);
    expect(info.state.messages).toBe(2);
  });
});
