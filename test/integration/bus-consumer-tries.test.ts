import { describe, expect, it } from "vitest";
import { Bus } from "../../src/bus/index.js";
import { startNatsServer } from "../../src/testing/index.js";

// nats-server 2.9 answers a consumer delete or create from the consumer's raft leader: while
// the consumer has none, the server does the work and nobody answers. A takeover waits for
// that delete (the mailbox consumer's reset) and then the create, so they go in tries of
// growing timeouts. Here a server without JetStream stands for such a server: the test
// answers the JetStream API itself, silent on the first request and at once on the next.
describe("consumer requests in tries", () => {
  it("consumer tries - a mailbox consumer delete whose first request gets no answer is sent again after 1.5 s and succeeds on the answer to the second, instead of failing after the client's 5 s", async () => {
    await using server = await startNatsServer({ jetstream: false, allowExternal: false });
    await using bus = await Bus.connect({ servers: [server.url], cluster: "tries", checkJetStream: false });
    const subject = `$JS.API.CONSUMER.DELETE.${bus.subjects.streams.a2a}.${bus.subjects.consumer("a1")}`;
    const seen: number[] = [];
    const sub = bus.nc.subscribe(subject, {
      callback: (_err, msg) => {
        seen.push(performance.now());
        // The first request is the one whose answer never comes.
        if (seen.length > 1) msg.respond(JSON.stringify({ type: "io.nats.jetstream.api.v1.consumer_delete_response", success: true }));
      },
    });
    await bus.deleteMailboxConsumer("a1");
    sub.unsubscribe();
    expect(seen).toHaveLength(2);
    // The second request went out when the first try's timeout ran out, not later.
    expect(seen[1]! - seen[0]!).toBeGreaterThanOrEqual(1_400);
  }, 30_000);

  it("consumer tries - a consumer delete that never gets an answer fails with the timeout after the last try (1.5 + 3 + 5 s), having sent three requests", async () => {
    await using server = await startNatsServer({ jetstream: false, allowExternal: false });
    await using bus = await Bus.connect({ servers: [server.url], cluster: "tries", checkJetStream: false });
    const subject = `$JS.API.CONSUMER.DELETE.${bus.subjects.streams.a2a}.${bus.subjects.consumer("a2")}`;
    let seen = 0;
    const sub = bus.nc.subscribe(subject, { callback: () => void seen++ });
    await expect(bus.deleteMailboxConsumer("a2")).rejects.toThrow(/timeout/i);
    sub.unsubscribe();
    expect(seen).toBe(3);
  }, 30_000);
});
