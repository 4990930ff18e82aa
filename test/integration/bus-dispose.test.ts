import { describe, expect, it } from "vitest";
import { BusClosedError, KovaClient, createEnvelope, type Bus } from "../../src/bus/index.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";

const server = fileServer();

describe("bus disposal", () => {
  it("dispose - await using closes a Bus and a KovaClient at the end of the scope, and closing again is harmless", async () => {
    let bus: Bus;
    let client: KovaClient;
    {
      await using b = await connectBus(server.url, uniqueCluster());
      await using c = await KovaClient.connect({ servers: server.url, cluster: b.cluster });
      expect(b.nc.isClosed()).toBe(false);
      expect(c.bus.nc.isClosed()).toBe(false);
      bus = b;
      client = c;
    }
    expect(bus.nc.isClosed()).toBe(true);
    expect(client.bus.nc.isClosed()).toBe(true);
    await bus.close();
    await client.close();
    expect(() => bus.send(createEnvelope({ from: "t", to: "a1", type: "task_delegate", payload: null }))).toThrow(BusClosedError);
  });

  it("close - a second close resolves only when the first is done: mailboxes stopped, connection closed", async () => {
    const bus = await connectBus(server.url, uniqueCluster());
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const handling = new Promise<void>((r) => (entered = r));
    await bus.openMailbox("slowpoke", async () => {
      entered();
      await held;
    });
    await bus.send(createEnvelope({ from: "t", to: "slowpoke", type: "task_delegate", payload: null }));
    await handling;
    const first = bus.close(); // waits for the handler in flight
    const second = bus.close();
    release();
    await second;
    expect(bus.nc.isClosed()).toBe(true);
    await first;
  });
});
