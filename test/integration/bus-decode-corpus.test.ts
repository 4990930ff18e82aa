import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import { startNatsServer } from "../../src/testing/index.js";
import { expectCorpusDeadLettered, loadCorpus, publishCorpus } from "../fixtures/bus/decode-corpus.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const corpus = loadCorpus();

describe("bus decode corpus against a live mailbox", () => {
  it("corpus - every bad input sent to a live mailbox ends in the DLQ whole with its reason, the consumer stays up and the next good message is processed", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    {
      await using bus = await connectBus(server.url, uniqueCluster("corpus"));
      await using nc = await connect({ servers: server.url });
      await publishCorpus(nc, bus.subjects.a2a("victim"), corpus);
      const good = createEnvelope({ from: "tester", to: "victim", type: "task_delegate", payload: "the next good message" });
      await bus.send(good);

      const handled: A2AEnvelope[] = [];
      await bus.openMailbox("victim", async (env) => void handled.push(env));
      await poll(() => handled.length === 1, { timeoutMs: 60_000, what: "the good message after the corpus", retryErrors: true });
      expect(handled.map((e) => e.id)).toEqual([good.id]);

      expectCorpusDeadLettered(await bus.listDlq({ limit: corpus.length + 10 }), corpus, (reason) => bus.subjects.dlq(reason));
      // Nothing is left in the WorkQueue stream, and the mailbox's consumer is still there, idle.
      expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages).toBe(0);
      const consumer = await bus.jsm.consumers.info(bus.subjects.streams.a2a, bus.subjects.consumer("victim"));
      expect(consumer.num_ack_pending).toBe(0);
      expect(consumer.delivered.stream_seq).toBe(corpus.length + 1);
    }
  }, 120_000);
});
