import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { startNatsServer } from "../../src/testing/index.js";
import {
  isConsumerNotFound,
  isJetStreamNotEnabled,
  isMessageGone,
  isNatsNoResponders,
  isNatsTimeout,
  isStreamNameInUse,
  isStreamNotFound,
  isSubjectOverlap,
  isWrongLastSequence,
} from "../../src/bus/nats-errors.js";

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("expected a failure");
}

// The predicates in src/bus/nats-errors.ts name API codes; this checks them against what
// the real server (2.9.10 here, newer in users' clusters) sends for each situation.
describe("nats errors", () => {
  it("nats errors - each failure Kova handles is recognised by class or API code on a real server", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    {
      await using nc = await connect({ servers: server.url });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: "A", subjects: ["a.>"] });
      expect(isStreamNameInUse(await failure(jsm.streams.add({ name: "A", subjects: ["a.>", "x.>"] })))).toBe(true);
      expect(isSubjectOverlap(await failure(jsm.streams.add({ name: "B", subjects: ["a.b"] })))).toBe(true);
      expect(isConsumerNotFound(await failure(jsm.consumers.delete("A", "nope")))).toBe(true);
      expect(isStreamNotFound(await failure(jsm.streams.info("NOPE")))).toBe(true);
      expect(isMessageGone(await failure(jsm.streams.deleteMessage("A", 999, false)))).toBe(true);
      const kv = await new Kvm(nc).create("errs");
      await kv.create("k", new Uint8Array([1]));
      expect(isWrongLastSequence(await failure(kv.create("k", new Uint8Array([1]))))).toBe(true);
      expect(isWrongLastSequence(await failure(kv.update("k", new Uint8Array([1]), 99)))).toBe(true);
      expect(isNatsNoResponders(await failure(nc.request("nobody.here", new Uint8Array(), { timeout: 1000 })))).toBe(true);
      nc.subscribe("silent", { callback: () => {} });
      expect(isNatsTimeout(await failure(nc.request("silent", new Uint8Array(), { timeout: 100 })))).toBe(true);
    }
    await using plain = await startNatsServer({ allowExternal: false, jetstream: false });
    await using nc2 = await connect({ servers: plain.url });
    expect(isJetStreamNotEnabled(await failure(jetstreamManager(nc2)))).toBe(true);
  });
});
