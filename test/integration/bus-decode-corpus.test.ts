import { connect, headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { createEnvelope, decodeEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import { startNatsServer } from "../../src/testing/index.js";
import { loadCorpus, reasonOf } from "../fixtures/bus/decode-corpus.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const corpus = loadCorpus();

/** The reason the decoder gives an input (for random ones, whose name says `any`). */
function expectedReason(bytes: Uint8Array, json: boolean): string | undefined {
  const h = headers();
  if (json) h.set("Content-Type", "application/json");
  try {
    decodeEnvelope(bytes, h);
    return undefined;
  } catch (err) {
    return reasonOf(err);
  }
}

describe("bus decode corpus against a live mailbox", () => {
  it("corpus - every bad input sent to a live mailbox ends in the DLQ whole with its reason, the consumer stays up and the next good message is processed", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    const bus = await connectBus(server.url, uniqueCluster("corpus"));
    const nc = await connect({ servers: server.url });
    try {
      const inbox = bus.subjects.a2a("victim");
      for (const [i, item] of corpus.entries()) {
        const h = headers();
        h.set("Nats-Msg-Id", `corpus-${i}`);
        if (item.encoding === "json") h.set("Content-Type", "application/json");
        const ack = await nc.request(inbox, item.bytes, { headers: h, timeout: 5_000 });
        expect(ack.json<{ seq?: number }>().seq, item.name).toBeGreaterThan(0);
      }
      const good = createEnvelope({ from: "tester", to: "victim", type: "task_delegate", payload: "the next good message" });
      await bus.send(good);

      const handled: A2AEnvelope[] = [];
      await bus.openMailbox("victim", async (env) => void handled.push(env));
      await poll(() => handled.length === 1, { timeoutMs: 60_000, what: "the good message after the corpus", retryErrors: true });
      expect(handled.map((e) => e.id)).toEqual([good.id]);

      const entries = await bus.listDlq({ limit: corpus.length + 10 });
      expect(entries).toHaveLength(corpus.length);
      const byMsgId = new Map(entries.map((e) => [e.headers["Kova-Dlq-Msg-Id"], e]));
      for (const [i, item] of corpus.entries()) {
        const entry = byMsgId.get(`corpus-${i}`);
        expect(entry, item.name).toBeDefined();
        expect(Buffer.from(entry!.data).equals(Buffer.from(item.bytes)), `${item.name}: stored whole`).toBe(true);
        const reason = item.reason ?? expectedReason(item.bytes, item.encoding === "json");
        expect(entry!.reason, item.name).toBe(reason);
        expect(entry!.subject).toBe(bus.subjects.dlq(reason!));
        expect(entry!.headers["Kova-Dlq-Error"], item.name).toBeTruthy();
        if (item.encoding === "json") expect(entry!.headers["Content-Type"]).toBe("application/json");
      }
      // Nothing is left in the WorkQueue stream, and the mailbox's consumer is still there, idle.
      expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages).toBe(0);
      const consumer = await bus.jsm.consumers.info(bus.subjects.streams.a2a, bus.subjects.consumer("victim"));
      expect(consumer.num_ack_pending).toBe(0);
      expect(consumer.delivered.stream_seq).toBe(corpus.length + 1);
    } finally {
      await nc.close();
      await bus.close();
    }
  }, 120_000);
});
