import { describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { Kvm } from "@nats-io/kv";
import { AckPolicy, jetstream } from "@nats-io/jetstream";
import { startNatsCluster, startNatsServer } from "../../src/testing/index.js";
import { createEnvelope } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { ActorTypeRegistry, counterActor, processedWindowLimit } from "../../src/actors/index.js";
import { ErrorCode } from "../../src/core/errors.js";
import { captureLogs, repeatedKeys } from "../fixtures/capture-logs.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

describe("KovaNode in process", () => {
  it("node - on a 3-server NATS cluster its buckets and streams get 3 replicas without a replicas key, and a graceful stop releases everything", async () => {
    await using nats = await startNatsCluster({ size: 3 });
    await using tmp = await tempDir("kova-node-");
    const dir = tmp.path;
    const cluster = `k${randomUUID().slice(0, 8)}`;
    let node: KovaNode | undefined;
    await using _node = defer(() => node?.stop("cleanup").catch(() => undefined));
    const config = parseConfig(
      `[node]\nid = "solo"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\nheartbeat_ms = 200\nstale_after_ms = 1000\n` +
        `[nats]\nurls = ${JSON.stringify(nats.urls)}\n[wal]\nsync = "normal"\n` +
        `[[actors]]\nid = "c1"\ntype = "counter"\n`,
      { env: {} },
    );
    // the meta leader of a fresh cluster takes a moment: retry the start
    node = await poll(() => KovaNode.start({ config, logger: createLogger(), types: new ActorTypeRegistry([counterActor]) }), {
      timeoutMs: 30_000,
      everyMs: 500,
      retryErrors: true,
      what: "the node to start on the fresh NATS cluster",
    });
    const bus = node.busClient;
    const kvm = new Kvm(bus.nc);
    for (const b of ["agents", "nodes", "leases", "checkpoints"]) {
      await expect.poll(async () => (await (await kvm.open(`kova_${cluster}_${b}`)).status()).replicas, { timeout: 10_000 }).toBe(3);
    }
    expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).config.num_replicas).toBe(3);

    await expect.poll(() => node!.agents().map((a) => `${a.id}:${a.state}`), { timeout: 10_000 }).toEqual(["c1:Idle"]);
    const env = createEnvelope({ from: "t", to: "c1", type: "task_delegate", payload: {} });
    await bus.send(env);
    await expect.poll(async () => (await bus.request<{ ids: string[] }>("c1", "info_request", {})).ids, { timeout: 10_000 }).toEqual([env.id]);
    expect(node.status()).toMatchObject({ nodeId: "solo", cluster, healthy: true, actors: { hosted: 1 } });

    await node.stop("test");
    node = undefined;
    // the bus of the node is closed now: read through a fresh connection
    const { connect } = await import("@nats-io/transport-node");
    const nc = await connect({ servers: nats.urls });
    const leases = await new Kvm(nc).open(`kova_${cluster}_leases`);
    expect((await leases.get("c1"))?.json<{ node: string | null; reason: string }>()).toMatchObject({ node: null, reason: "shutdown" });
    const nodes = await new Kvm(nc).open(`kova_${cluster}_nodes`);
    expect((await nodes.get("solo"))?.operation).toBe("DEL");
    await nc.close();
  }, 60_000);

  it("node - every log line of a node's life (start, an actor's turn, an agent declared, a stop) is JSON with no key written twice", async () => {
    await using nats = await startNatsServer({ allowExternal: false });
    await using tmp = await tempDir("kova-node-");
    const cluster = `k${randomUUID().slice(0, 8)}`;
    const logs = captureLogs();
    let node: KovaNode | undefined;
    await using _node = defer(() => node?.stop("cleanup").catch(() => undefined));
    const config = parseConfig(
      `[node]\nid = "solo"\ndata_dir = "${tmp.path}"\n[cluster]\nname = "${cluster}"\n[nats]\nurls = ["${nats.url}"]\n[wal]\nsync = "normal"\n` +
        `[models.m]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n[[agents]]\nid = "helper"\nmodel = "m"\ntools = ["calculator"]\n` +
        `[tools.shell]\nsandbox = "none"\n[[actors]]\nid = "c1"\ntype = "counter"\n`,
      { env: {} },
    );
    node = await KovaNode.start({ config, logger: logs.logger, types: new ActorTypeRegistry([counterActor]) });
    await expect
      .poll(
        () =>
          node!
            .agents()
            .map((a) => `${a.id}:${a.state}`)
            .sort(),
        { timeout: 10_000 },
      )
      .toEqual(["c1:Idle", "helper:Idle"]);
    const env = createEnvelope({ from: "t", to: "c1", type: "task_delegate", payload: {} });
    await node.busClient.send(env);
    await expect.poll(async () => (await node!.busClient.request<{ ids: string[] }>("c1", "info_request", {})).ids, { timeout: 10_000 }).toEqual([env.id]);
    await node.stop("test");
    node = undefined;

    const components = new Set<string>();
    for (const line of logs.lines) {
      expect(repeatedKeys(line), line).toEqual([]);
      const entry = JSON.parse(line) as { component?: string; nodeId?: string };
      if (entry.component) components.add(entry.component);
      expect(entry.nodeId, line).toBe("solo");
    }
    // The lines came from the node's parts, each under its own name.
    for (const c of ["node", "bus", "wal", "membership", "placement", "agents", "tools", "nats-bootstrap"]) expect([...components]).toContain(c);
  }, 60_000);

  it("node - a message that exhausts max_deliver on its stream is moved to the DLQ by the node, with replicas 1 on a single server", async () => {
    await using nats = await startNatsServer({ allowExternal: false });
    await using tmp = await tempDir("kova-node-");
    const dir = tmp.path;
    const cluster = `k${randomUUID().slice(0, 8)}`;
    let node: KovaNode | undefined;
    await using _node = defer(() => node?.stop("cleanup").catch(() => undefined));
    const config = parseConfig(
      `[node]\nid = "solo"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\n[nats]\nurls = ["${nats.url}"]\n[wal]\nsync = "normal"\n`,
      { env: {} },
    );
    expect(config.replicas).toBeUndefined();
    node = await KovaNode.start({ config, logger: createLogger(), types: new ActorTypeRegistry([counterActor]) });
    const bus = node.busClient;
    expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).config.num_replicas).toBe(1);

    // A consumer that gives up after one delivery, as a crashing host would: the server
    // only raises the MAX_DELIVERIES advisory, and the node's mover must act on it.
    const env = createEnvelope({ from: "t", to: "poisoned", type: "task_delegate", payload: { n: 1 } });
    await bus.send(env);
    await bus.jsm.consumers.add(bus.subjects.streams.a2a, {
      durable_name: "agent_poisoned",
      filter_subject: bus.subjects.a2a("poisoned"),
      ack_policy: AckPolicy.Explicit,
      max_deliver: 1,
      ack_wait: 1_000_000_000,
    });
    const consumer = await jetstream(bus.nc).consumers.get(bus.subjects.streams.a2a, "agent_poisoned");
    const msg = await consumer.next({ expires: 5_000 });
    expect(msg?.headers?.get("Nats-Msg-Id")).toBe(env.id);
    msg!.nak();
    // The server raises the advisory when it would redeliver, i.e. on the next pull.
    expect(await consumer.next({ expires: 2_000 })).toBeNull();

    await expect.poll(async () => (await bus.listDlq({ reason: "max_deliver" })).length, { timeout: 15_000 }).toBe(1);
    const [entry] = await bus.listDlq({ reason: "max_deliver" });
    expect(entry!.headers["Kova-Dlq-Msg-Id"]).toBe(env.id);
    await expect.poll(async () => (await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages, { timeout: 10_000 }).toBe(0);
  }, 60_000);
});

describe("KovaNode config against its server", () => {
  it("node - a [checkpoint] processed_window whose checkpoints cannot fit in the server's max_payload stops the start with an error saying the largest that fits; that one starts", async () => {
    await using nats = await startNatsServer({ allowExternal: false });
    await using tmp = await tempDir("kova-node-");
    const cluster = `w${randomUUID().slice(0, 8)}`;
    const configFor = (window: number) =>
      parseConfig(
        `[node]\nid = "solo"\ndata_dir = "${tmp.path}"\n[cluster]\nname = "${cluster}"\n[nats]\nurls = ["${nats.url}"]\n[wal]\nsync = "normal"\n[checkpoint]\nprocessed_window = ${window}\n`,
        { env: {} },
      );
    const limit = processedWindowLimit(1024 * 1024); // the server's default max_payload
    const err = await KovaNode.start({ config: configFor(limit + 1), logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry() }).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: ErrorCode.INVALID_CONFIG, data: { key: "checkpoint.processed_window" } });
    expect((err as Error).message).toContain(`set it to at most ${limit}`);
    const node = await KovaNode.start({ config: configFor(limit), logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry() });
    await node.stop("test done");
  }, 60_000);
});
