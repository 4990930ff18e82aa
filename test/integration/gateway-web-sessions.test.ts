import { describe, expect, it } from "vitest";
import { connect as tcpConnect } from "node:net";
import { Bus } from "../../src/bus/index.js";
import { defer } from "../fixtures/disposable.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";
import { poll } from "../fixtures/poll.js";

/** Sends a GET with the key and closes the socket at once, before any answer. */
function abortedGet(url: string, path: string, key: string): Promise<void> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = tcpConnect(Number(port), hostname, () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${key}\r\nAccept: text/event-stream\r\n\r\n`, () => {
        socket.destroy();
        resolve();
      });
    });
    socket.on("error", () => resolve());
  });
}

describe("gateway: web view session streams", () => {
  it("web - session streams aborted right after the request leave no consumer on EVENTS behind", async () => {
    await using rig = await startGatewayRig();
    const bus = await Bus.connect({ servers: rig.nats.url, cluster: rig.cluster, name: "test-observer" });
    await using _bus = defer(() => bus.close());
    const consumers = async () => (await bus.jsm.streams.info(bus.subjects.streams.events)).state.consumer_count;
    const baseline = await consumers();

    for (let batch = 0; batch < 4; batch++) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => abortedGet(rig.url, `/ui/api/sessions/s-${batch}-${i}/events`, rig.key)));
    }
    // One stream read to its end the ordinary way, then closed by the client.
    const ac = new AbortController();
    const open = await fetch(`${rig.url}/ui/api/sessions/s-open/events`, { headers: { authorization: `Bearer ${rig.key}` }, signal: ac.signal });
    expect(open.status).toBe(200);
    expect(await consumers()).toBeGreaterThan(baseline);
    ac.abort();

    await poll(async () => (await consumers()) === baseline, {
      timeoutMs: 15_000,
      what: () => `the EVENTS consumers to return to ${baseline}`,
    });
  }, 60_000);
});
