import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { KovaClient, listKvKeys } from "../../src/bus/index.js";
import { ActorTypeRegistry, counterActor, type CounterState } from "../../src/actors/index.js";
import { approveSubject, controlRequest, nodeSubject, spawnSubject, type NodeStatusView } from "../../src/cluster/control.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { createLogger } from "../../src/core/logger.js";
import { isKovaError } from "../../src/core/errors.js";
import type { NatsServerHandle } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";
import { connectAs, expectPermissionDenied, kovaAs, natsToml, passwords, role, startAccountsServer } from "../fixtures/security/accounts.js";

// deploy/nats/accounts.conf as shipped, with the roles' passwords from the environment.
const client = role("client");

let server: NatsServerHandle;
let node: KovaNode;
let dir: string;
let admin: NatsConnection;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "kova-acc-"));
  server = await startAccountsServer(dir);
  const config = parseConfig(
    `[node]\nid = "n1"\ndata_dir = "${join(dir, "node")}"\n[nats]\nurls = ["${server.url}"]\n${natsToml("node")}\n` +
      `[wal]\nsync = "normal"\n[[actors]]\nid = "c1"\ntype = "counter"\n[[actors]]\nid = "c2"\ntype = "counter"\n`,
    { env: process.env },
  );
  node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
  admin = await connectAs(server, "node");
  await poll(async () => node.agents().length === 2, { timeoutMs: 20_000, what: "both actors hosted" });
}, 60_000);

afterAll(async () => {
  await admin?.close();
  await node?.stop();
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("security: least-privilege accounts (deploy/nats/accounts.conf)", () => {
  it("accounts - a client can send, ask and use the fast path with its own inbox", async () => {
    await using kc = await KovaClient.connect({ servers: server.url, security: client, ensureStreams: false });
    await kc.send("c1", "task_delegate", { n: 1 });
    const reply = await kc.ask("c1", "task_delegate", { n: 2 }, { timeoutMs: 10_000 });
    expect(reply.type).toBe("result_notify");
    const state = await poll(
      async () => {
        const s = await kc.request<CounterState>("c1", "info_request", {});
        return s.count === 2 ? s : undefined;
      },
      { timeoutMs: 10_000, what: "both counted", retryErrors: true },
    );
    expect(state.count).toBe(2);
  });

  it("accounts - a client cannot spawn or signal, write a kova_* bucket, or read any mailbox", async () => {
    {
      await using nc = await connectAs(server, "client");
      await expectPermissionDenied(controlRequest(nc, spawnSubject("default"), { id: "evil", type: "counter" }, 2000));
      await expectPermissionDenied(controlRequest(nc, nodeSubject("default", "n1", "signal"), { actorId: "c2", signal: "kill" }, 2000));
      // Deciding an agent's tool call is an operator's act.
      await expectPermissionDenied(controlRequest(nc, approveSubject("default"), { runId: "r1", approvalId: "ap-000000000000", approved: true }, 2000));
      nc.publish("$KV.kova_default_agents.c2", new TextEncoder().encode(JSON.stringify({ id: "c2", type: "counter", desired: "killed" })));
      nc.publish("$KV.kova_default_leases.c2", new TextEncoder().encode("{}"));
      // No JetStream API at all: not even the account info a manager starts with.
      await expectPermissionDenied(jetstreamManager(nc, { timeout: 2000 }));
      const jsm = await jetstreamManager(nc, { timeout: 2000, checkAPI: false });
      await expectPermissionDenied(jsm.consumers.info("KOVA_DEFAULT_A2A", "agent_c2"));
      await expectPermissionDenied(
        jsm.consumers.add("KOVA_DEFAULT_A2A", { durable_name: "steal", filter_subject: "kova.default.a2a.c2", ack_policy: AckPolicy.Explicit }),
      );
      let seen = 0;
      let subError: Error | null = null;
      nc.subscribe("kova.default.a2a.>", {
        callback: (err, msg) => {
          if (err) subError = err;
          else if (msg) seen++;
        },
      });
      await nc.flush();
      // A message to c2 goes through its mailbox (counted) while the client's subscription gets nothing.
      await using kc = await KovaClient.connect({ servers: server.url, security: client, ensureStreams: false });
      await kc.send("c2", "task_delegate", { n: 1 });
      await poll(async () => (await kc.request<CounterState>("c2", "info_request", {})).count === 1, {
        timeoutMs: 10_000,
        what: "c2 counted",
        retryErrors: true,
      });
      expect(seen).toBe(0);
      expect(String(subError)).toContain("Permissions Violation for Subscription");
    }
    // Nothing changed: c2 still runs, is registered as running, and its lease is the node's.
    const kvm = new Kvm(admin);
    const agents = await kvm.open("kova_default_agents");
    expect(await agents.get("evil")).toBeNull();
    expect((await agents.get("c2"))!.json<{ desired: string }>().desired).toBe("running");
    expect((await (await kvm.open("kova_default_leases")).get("c2"))!.json<{ node: string }>().node).toBe("n1");
    // (Idle once the turn that counted has ended: a refused signal would leave it Paused or stopped.)
    await poll(() => node.agents().find((a) => a.id === "c2")?.state === "Idle", { timeoutMs: 10_000, what: "c2 idle, not paused or stopped" });
  });

  it("accounts - an operator can spawn, signal and read status", async () => {
    {
      await using nc = await connectAs(server, "operator");
      const spawned = await controlRequest<{ created: boolean }>(nc, spawnSubject("default"), { id: "c3", type: "counter" });
      expect(spawned.created).toBe(true);
      await poll(async () => node.agents().some((a) => a.id === "c3" && a.state === "Idle"), { timeoutMs: 15_000, what: "c3 hosted" });
      const sig = await controlRequest<{ state: string }>(nc, nodeSubject("default", "n1", "signal"), { actorId: "c3", signal: "pause" });
      expect(sig.state).toBe("Paused");
      const status = await controlRequest<NodeStatusView>(nc, nodeSubject("default", "n1", "status"), {});
      expect(status.nodeId).toBe("n1");
      // The approve and tools endpoints answer an operator (here: no such approval; a node without agents has no tools).
      const approval = await controlRequest(nc, approveSubject("default"), { runId: "r1", approvalId: "ap-000000000000", approved: true }).catch(
        (e: unknown) => e,
      );
      expect(isKovaError(approval, "APPROVAL_NOT_FOUND")).toBe(true);
      expect(await controlRequest<{ tools: unknown[] }>(nc, nodeSubject("default", "n1", "tools"), {})).toEqual({ node: "n1", tools: [] });
      expect(JSON.stringify(status)).not.toContain(passwords.node);
    }
    // The CLI as an operator: read-only registry listing through the JetStream API it is granted.
    const cli = await kovaAs(server, "operator", ["agents", "ls", "--json"]);
    expect(cli.code, cli.stderr).toBe(0);
    expect((JSON.parse(cli.stdout) as Array<{ id: string }>).map((a) => a.id).sort()).toEqual(["c1", "c2", "c3"]);
    const nodes = await kovaAs(server, "operator", ["nodes", "ls", "--json"]);
    expect(nodes.code, nodes.stderr).toBe(0);
    expect((JSON.parse(nodes.stdout) as Array<{ id: string }>).map((n) => n.id)).toEqual(["n1"]);
    const denied = await kovaAs(server, "client", ["agents", "ls"]);
    expect(denied.code).not.toBe(0);
  }, 60_000);

  it("accounts - a role lists exactly the buckets it may: the operator the registry and nodes, not leases or gateway tasks; a client none", async () => {
    {
      await using op = await connectAs(server, "operator");
      await using cl = await connectAs(server, "client");
      expect(await listKvKeys(op, "kova_default_agents")).toEqual(expect.arrayContaining(["c1", "c2"]));
      expect(await listKvKeys(op, "kova_default_nodes")).toEqual(["n1"]);
      await expectPermissionDenied(listKvKeys(op, "kova_default_leases"));
      await expectPermissionDenied(listKvKeys(op, "kova_default_gateway_tasks"));
      // Listing takes no consumer, so the operator may create none on the registry.
      const jsm = await jetstreamManager(op, { timeout: 2000, checkAPI: false });
      await expectPermissionDenied(jsm.consumers.add("KV_kova_default_agents", { ack_policy: AckPolicy.None, headers_only: true }));
      for (const bucket of ["kova_default_agents", "kova_default_nodes", "kova_default_leases", "kova_default_checkpoints"]) {
        await expectPermissionDenied(listKvKeys(cl, bucket));
      }
    }
  });
});
