import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNatsCluster, startNatsServer } from "../../src/testing/index.js";
import { jetStreamReplicas, NatsBootstrapError, resolveNats, type ResolvedNats } from "../../src/node/nats/bootstrap.js";
import { BusErrorCode } from "../../src/bus/errors.js";
import { poll } from "../fixtures/poll.js";

const saved = { NATS_URL: process.env.NATS_URL, NATS_SERVER_BIN: process.env.NATS_SERVER_BIN };
const cleanups: Array<() => Promise<unknown>> = [];
let dataDir: string;

beforeEach(async () => {
  delete process.env.NATS_URL;
  delete process.env.NATS_SERVER_BIN;
  dataDir = await mkdtemp(join(tmpdir(), "kova-boot-"));
  const dir = dataDir;
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
});

afterEach(async () => {
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  // stop servers before removing their directories
  for (const c of cleanups.splice(0).reverse()) await c();
});

function track(r: ResolvedNats): ResolvedNats {
  cleanups.push(() => r.stop());
  return r;
}

/**
 * Whether the nats-server that `resolveNats` started on `dataDir` still runs, by the pid
 * it recorded (not by its port: once freed, another test's server may take it).
 */
async function startedPid(dir: string): Promise<number> {
  return (JSON.parse(await readFile(join(dir, "nats", "kova-nats.json"), "utf8")) as { pid: number }).pid;
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function answers(url: string): Promise<boolean> {
  try {
    const nc = await connect({ servers: url, timeout: 500, reconnect: false });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}

describe("nats bootstrap", () => {
  it("nats bootstrap - NATS_URL wins over the config and may list several servers", async () => {
    process.env.NATS_URL = "nats://10.0.0.1:4222, nats://10.0.0.2:4222";
    const r = await resolveNats({ configuredUrls: ["nats://config:4222"], dataDir });
    expect(r.source).toBe("env");
    expect(r.urls).toEqual(["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]);
    await r.stop();
  });

  it("nats bootstrap - configured URLs are used as given, without probing", async () => {
    const r = await resolveNats({ configuredUrls: ["nats://n1:4222", " nats://n2:4222 ", ""], dataDir });
    expect(r.source).toBe("config");
    expect(r.urls).toEqual(["nats://n1:4222", "nats://n2:4222"]);
    await r.stop();
  });

  it("nats bootstrap - uses a JetStream server already answering on the default URL", async () => {
    const server = await startNatsServer({ allowExternal: false });
    cleanups.push(() => server.stop());
    const r = track(await resolveNats({ dataDir, defaultUrl: server.url }));
    expect(r.source).toBe("local-4222");
    expect(r.urls).toEqual([server.url]);
    await r.stop();
    expect(await answers(server.url)).toBe(true); // not ours to stop
  });

  it("nats bootstrap - skips a default server without JetStream and starts its own", async () => {
    const plain = await startNatsServer({ allowExternal: false, jetstream: false });
    cleanups.push(() => plain.stop());
    const r = track(await resolveNats({ dataDir, defaultUrl: plain.url }));
    expect(r.source).toBe("started");
    expect(r.urls[0]).not.toBe(plain.url);
  });

  it("nats bootstrap - starts nats-server on a free port with its store under the data dir, kept across restarts", async () => {
    const first = track(await resolveNats({ dataDir, probeDefault: false }));
    expect(first.source).toBe("started");
    expect(first.urls).toHaveLength(1);
    expect(first.urls[0]).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    expect(first.urls[0]).not.toBe("nats://127.0.0.1:4222");
    let nc = await connect({ servers: first.urls });
    await (await jetstreamManager(nc)).streams.add({ name: "BOOT", subjects: ["boot.>"] });
    await nc.close();
    expect((await stat(join(dataDir, "nats", "jetstream"))).isDirectory()).toBe(true);
    const pid = await startedPid(dataDir);
    expect(running(pid)).toBe(true);
    await first.stop();
    expect(running(pid)).toBe(false);

    const second = track(await resolveNats({ dataDir, probeDefault: false }));
    expect(second.source).toBe("started");
    nc = await connect({ servers: second.urls });
    const info = await (await jetstreamManager(nc)).streams.info("BOOT");
    expect(info.config.subjects).toEqual(["boot.>"]);
    await nc.close();
  });

  it("nats bootstrap - a server left running by a killed node is reused, not doubled on the same store", async () => {
    const orphan = await resolveNats({ dataDir, probeDefault: false });
    cleanups.push(() => orphan.stop());
    const pid = await startedPid(dataDir);
    // the "restarted node" never calls orphan.stop(): it finds the survivor by its record
    const again = track(await resolveNats({ dataDir, probeDefault: false }));
    expect(again.source).toBe("started");
    expect(again.urls).toEqual(orphan.urls);
    expect(await startedPid(dataDir)).toBe(pid);
    await again.stop();
    expect(running(pid)).toBe(false);
  });

  it("nats bootstrap - with no server and no binary the error says how to install nats-server or set NATS_URL", async () => {
    process.env.NATS_SERVER_BIN = join(dataDir, "no-such-nats-server");
    const err = await resolveNats({ dataDir, probeDefault: false }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NatsBootstrapError);
    expect((err as NatsBootstrapError).code).toBe(BusErrorCode.NATS_UNREACHABLE);
    const message = (err as Error).message;
    expect(message).toContain("apt-get install nats-server");
    expect(message).toContain("brew install nats-server");
    expect(message).toContain("docker run");
    expect(message).toContain("NATS_URL");
  });

  it("nats bootstrap - a nats-server binary that cannot be executed is a clear error naming it, not an uncaught exception", async () => {
    const bin = join(dataDir, "nats-server-not-executable");
    await writeFile(bin, "#!/bin/sh\nexit 0\n", { mode: 0o644 });
    process.env.NATS_SERVER_BIN = bin;
    const err = await resolveNats({ dataDir, probeDefault: false }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain(bin);
  });

  it("nats bootstrap - streams get 3 replicas on a clustered NATS and 1 on a single server", async () => {
    const single = await startNatsServer({ allowExternal: false });
    cleanups.push(() => single.stop());
    const cluster = await startNatsCluster({ size: 3 });
    cleanups.push(() => cluster.stop());
    await using one = await connect({ servers: single.url });
    await using three = await connect({ servers: cluster.urls });
    expect(jetStreamReplicas(one)).toBe(1);
    expect(jetStreamReplicas(three)).toBe(3);
    // and the cluster accepts what it was told to use
    const jsm = await jetstreamManager(three);
    // the meta leader is not elected yet right after the servers start
    await poll(() => jsm.streams.add({ name: "REPL", subjects: ["repl.>"], num_replicas: jetStreamReplicas(three) }), {
      timeoutMs: 20_000,
      everyMs: 200,
      retryErrors: true,
      what: "the replicated stream",
    });
    expect((await jsm.streams.info("REPL")).config.num_replicas).toBe(3);
  });
});
