import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { copyFile, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { KovaClient, securityOptions, type NatsSecurity } from "../../src/bus/index.js";
import { ActorTypeRegistry, counterActor, type CounterState } from "../../src/actors/index.js";
import { approveSubject, controlRequest, nodeSubject, spawnSubject, type NodeStatusView } from "../../src/node/control.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { createLogger } from "../../src/core/logger.js";
import { isKovaError } from "../../src/core/errors.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

// deploy/nats/accounts.conf as shipped, with the three passwords from the environment.
const ACCOUNTS = resolve(import.meta.dirname, "../../deploy/nats/accounts.conf");
const BIN = resolve(import.meta.dirname, "../../bin/kova.js");
const run = promisify(execFile);
const passwords = { node: `node-${process.pid}`, operator: `op-${process.pid}`, client: `cl-${process.pid}` };
const client: NatsSecurity = { user: "kova-client", password: passwords.client, inboxPrefix: "_INBOX_client" };
const operator: NatsSecurity = { user: "kova-operator", password: passwords.operator, inboxPrefix: "_INBOX_operator" };

let server: NatsServerHandle;
let node: KovaNode;
let dir: string;
let admin: NatsConnection;

async function as(sec: NatsSecurity): Promise<NatsConnection> {
  return connect({ servers: server.url, ...securityOptions(sec) });
}

/** Resolves with the error a request fails with (a permission violation, a timeout), or throws if it succeeds. */
async function refused(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("expected the request to be refused");
}

beforeAll(async () => {
  Object.assign(process.env, { KOVA_NODE_PASSWORD: passwords.node, KOVA_OPERATOR_PASSWORD: passwords.operator, KOVA_CLIENT_PASSWORD: passwords.client });
  dir = await mkdtemp(join(tmpdir(), "kova-acc-"));
  // nats-server resolves an include relative to the including file.
  await mkdir(join(dir, "nats"));
  await copyFile(ACCOUNTS, join(dir, "nats", "accounts.conf"));
  server = await startNatsServer({ allowExternal: false, baseDir: join(dir, "nats"), extraConfig: `include "accounts.conf"` });
  const config = parseConfig(
    `[node]\nid = "n1"\ndata_dir = "${join(dir, "node")}"\n[nats]\nurls = ["${server.url}"]\nuser = "kova-node"\npassword_env = "KOVA_NODE_PASSWORD"\n` +
      `reply_prefixes = ["_INBOX_client", "_INBOX_operator"]\n[wal]\nsync = "normal"\n[[actors]]\nid = "c1"\ntype = "counter"\n[[actors]]\nid = "c2"\ntype = "counter"\n`,
    { env: process.env },
  );
  node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
  admin = await as({ user: "kova-node", password: passwords.node });
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
    const state = await poll(async () => {
      const s = await kc.request<CounterState>("c1", "info_request", {});
      return s.count === 2 ? s : undefined;
    }, { timeoutMs: 10_000, what: "both counted", retryErrors: true });
    expect(state.count).toBe(2);
  });

  it("accounts - a client cannot spawn or signal, write a kova_* bucket, or read any mailbox", async () => {
    const nc = await as(client);
    try {
      expect(await refused(controlRequest(nc, spawnSubject("default"), { id: "evil", type: "counter" }, 2000))).toBeDefined();
      expect(await refused(controlRequest(nc, nodeSubject("default", "n1", "signal"), { actorId: "c2", signal: "kill" }, 2000))).toBeDefined();
      // Deciding an agent's tool call is an operator's act.
      expect(await refused(controlRequest(nc, approveSubject("default"), { runId: "r1", approvalId: "ap-000000000000", approved: true }, 2000))).toBeDefined();
      nc.publish("$KV.kova_default_agents.c2", new TextEncoder().encode(JSON.stringify({ id: "c2", type: "counter", desired: "killed" })));
      nc.publish("$KV.kova_default_leases.c2", new TextEncoder().encode("{}"));
      // No JetStream API at all: not even the account info a manager starts with.
      expect(await refused(jetstreamManager(nc, { timeout: 2000 }))).toBeDefined();
      const jsm = await jetstreamManager(nc, { timeout: 2000, checkAPI: false });
      expect(await refused(jsm.consumers.info("KOVA_DEFAULT_A2A", "agent_c2"))).toBeDefined();
      expect(await refused(jsm.consumers.add("KOVA_DEFAULT_A2A", { durable_name: "steal", filter_subject: "kova.default.a2a.c2", ack_policy: AckPolicy.Explicit }))).toBeDefined();
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
      await poll(async () => (await kc.request<CounterState>("c2", "info_request", {})).count === 1, { timeoutMs: 10_000, what: "c2 counted", retryErrors: true });
      expect(seen).toBe(0);
      expect(String(subError)).toContain("Permissions Violation for Subscription");
    } finally {
      await nc.close();
    }
    // Nothing changed: c2 still runs, is registered as running, and its lease is the node's.
    const kvm = new Kvm(admin);
    const agents = await kvm.open("kova_default_agents");
    expect((await agents.get("evil"))).toBeNull();
    expect((await agents.get("c2"))!.json<{ desired: string }>().desired).toBe("running");
    expect((await (await kvm.open("kova_default_leases")).get("c2"))!.json<{ node: string }>().node).toBe("n1");
    expect(node.agents().find((a) => a.id === "c2")?.state).toBe("Idle");
  });

  it("accounts - an operator can spawn, signal and read status", async () => {
    const nc = await as(operator);
    try {
      const spawned = await controlRequest<{ created: boolean }>(nc, spawnSubject("default"), { id: "c3", type: "counter" });
      expect(spawned.created).toBe(true);
      await poll(async () => node.agents().some((a) => a.id === "c3" && a.state === "Idle"), { timeoutMs: 15_000, what: "c3 hosted" });
      const sig = await controlRequest<{ state: string }>(nc, nodeSubject("default", "n1", "signal"), { actorId: "c3", signal: "pause" });
      expect(sig.state).toBe("Paused");
      const status = await controlRequest<NodeStatusView>(nc, nodeSubject("default", "n1", "status"), {});
      expect(status.nodeId).toBe("n1");
      // The approve and tools endpoints answer an operator (here: no such approval; a node without agents has no tools).
      const approval = await controlRequest(nc, approveSubject("default"), { runId: "r1", approvalId: "ap-000000000000", approved: true }).catch((e: unknown) => e);
      expect(isKovaError(approval, "APPROVAL_NOT_FOUND")).toBe(true);
      expect(await controlRequest<{ tools: unknown[] }>(nc, nodeSubject("default", "n1", "tools"), {})).toEqual({ node: "n1", tools: [] });
      expect(JSON.stringify(status)).not.toContain(passwords.node);
    } finally {
      await nc.close();
    }
    // The CLI as an operator: read-only registry listing through the JetStream API it is granted.
    const cli = await run(process.execPath, [BIN, "agents", "ls", "--json", "--server", server.url, "--user", "kova-operator", "--password-env", "KOVA_OPERATOR_PASSWORD", "--inbox-prefix", "_INBOX_operator"], {
      env: { ...process.env, KOVA_LOG_LEVEL: "warn" },
    });
    expect((JSON.parse(cli.stdout) as Array<{ id: string }>).map((a) => a.id).sort()).toEqual(["c1", "c2", "c3"]);
    const denied = await run(process.execPath, [BIN, "agents", "ls", "--server", server.url, "--user", "kova-client", "--password-env", "KOVA_CLIENT_PASSWORD", "--inbox-prefix", "_INBOX_client"], {
      env: { ...process.env, KOVA_LOG_LEVEL: "warn" },
    }).catch((err: { code?: number; stderr?: string }) => err);
    expect((denied as { code?: number }).code).not.toBe(0);
  }, 60_000);
});
