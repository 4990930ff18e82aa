import { describe, expect, it } from "vitest";
import { BusClosedError, KovaClient, createEnvelope, type Bus } from "../../src/bus/index.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { tempDir } from "../fixtures/disposable.js";

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

describe("a library inside someone else's service", () => {
  it("quiet - Bus, KovaClient, Wal and ActorHost given no logger write nothing to stdout or stderr while they connect, create streams, send, journal and close", async () => {
    const { execFile } = await import("node:child_process");
    const { join, resolve } = await import("node:path");
    await using tmp = await tempDir("kova-quiet-");
    const dir = tmp.path;
    const dist = resolve("dist");
    // The built package, as a user's service imports it; its own process, so nothing of the
    // test runner's (VITEST, KOVA_LOG_LEVEL) decides the level.
    const script = `
      const { Bus, KovaClient } = await import(${JSON.stringify(`${dist}/bus/index.js`)});
      const { Wal } = await import(${JSON.stringify(`${dist}/wal/index.js`)});
      const { ActorHost, ActorTypeRegistry, counterActor } = await import(${JSON.stringify(`${dist}/actors/index.js`)});
      const cluster = "quiet${Date.now().toString(36)}";
      const bus = await Bus.connect({ servers: ${JSON.stringify(server.url)}, cluster });
      await bus.ensureStreams();
      const wal = await Wal.open({ dir: ${JSON.stringify(join(dir, "wal"))}, sync: "normal" });
      const host = new ActorHost({ bus, wal, nodeId: "quiet", types: new ActorTypeRegistry([counterActor]) });
      await host.start("c1", "counter");
      const client = await KovaClient.connect({ servers: ${JSON.stringify(server.url)}, cluster });
      const reply = await client.ask("c1", "task_delegate", null, { checkAgent: false });
      await host.stopAll();
      await client.close();
      await bus.close();
      await wal.close();
      process.stdout.write(reply.type === "result_notify" ? "" : "unexpected reply " + reply.type);
    `;
    const env = { ...process.env };
    delete env.VITEST;
    delete env.KOVA_LOG_LEVEL;
    const out = await new Promise<{ stdout: string; stderr: string }>((res, rej) =>
      execFile(process.execPath, ["--input-type=module", "-e", script], { env, timeout: 30_000 }, (err, stdout, stderr) =>
        err ? rej(Object.assign(err, { stderr })) : res({ stdout, stderr }),
      ),
    );
    expect(out).toEqual({ stdout: "", stderr: "" });
  }, 40_000);
});
