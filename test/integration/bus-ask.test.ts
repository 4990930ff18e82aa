import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BusClosedError, createEnvelope } from "../../src/bus/index.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";

let server: NatsServerHandle;
beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  await server?.stop();
});

/** The server's count of subscriptions ever added and removed (`/subsz`). */
async function subscriptionChanges(): Promise<number> {
  const s = (await (await fetch(`${server.monitorUrl}/subsz`)).json()) as { num_inserts: number; num_removes: number };
  return s.num_inserts + s.num_removes;
}

describe("ask", () => {
  it("ask - replies come to a token of the connection's one reply subscription: asks add and remove no subscription on the server", async () => {
    const cluster = uniqueCluster();
    await using agent = await connectBus(server.url, cluster);
    await using asker = await connectBus(server.url, cluster);
    await agent.openMailbox("echo", async (env) => {
      await agent.respond(env, { echoed: env.payload });
    });
    const ask = (n: number) =>
      asker.ask<{ echoed: number }>(createEnvelope({ from: "t", to: "echo", type: "task_delegate", payload: n }), { checkAgent: false });
    expect((await ask(0)).payload).toEqual({ echoed: 0 });
    const before = await subscriptionChanges();
    const replies = await Promise.all([1, 2, 3, 4, 5].map(ask));
    expect(replies.map((r) => r.payload)).toEqual([1, 2, 3, 4, 5].map((n) => ({ echoed: n })));
    expect(await subscriptionChanges()).toBe(before);
  });

  it("ask - an ask waiting for its reply when its bus closes fails at once with BusClosedError", async () => {
    const cluster = uniqueCluster();
    await using agent = await connectBus(server.url, cluster);
    const asker = await connectBus(server.url, cluster);
    let arrived!: () => void;
    const delivered = new Promise<void>((r) => (arrived = r));
    await agent.openMailbox("silent", async () => arrived());
    const waiting = asker.ask(createEnvelope({ from: "t", to: "silent", type: "task_delegate", payload: null }), { timeoutMs: 60_000, checkAgent: false });
    const outcome = waiting.catch((e: unknown) => e);
    await delivered;
    const t0 = Date.now();
    await asker.close();
    expect(await outcome).toBeInstanceOf(BusClosedError);
    expect(Date.now() - t0).toBeLessThan(10_000);
  });
});
