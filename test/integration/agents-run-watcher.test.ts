import { describe, expect, it } from "vitest";
import { RunWatcher } from "../../src/agents/run-watcher.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();

describe("run watcher", () => {
  it("run watcher - closing a watcher deletes its consumer on the EVENTS stream at once (not after the 5 min inactivity threshold)", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const stream = bus.subjects.streams.events;
    const consumers = async () => (await bus.jsm.streams.info(stream)).state.consumer_count;
    expect(await consumers()).toBe(0);
    const watchers = await Promise.all(Array.from({ length: 5 }, (_, i) => RunWatcher.start(bus, { sessionId: `s-${i}`, since: Date.now() })));
    await poll(async () => (await consumers()) === 5, { timeoutMs: 5_000, what: "five watcher consumers" });
    await Promise.all(watchers.map((w) => w.close()));
    await poll(async () => (await consumers()) === 0, { timeoutMs: 5_000, what: "the watchers' consumers deleted" });
  });
});
