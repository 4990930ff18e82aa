import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import OpenAI from "openai";
import type { NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager, type MsgRequest } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { ActorTypeRegistry } from "../../src/actors/index.js";
import { listKvKeys } from "../../src/bus/index.js";
import { createLogger, silentLogger } from "../../src/core/logger.js";
import { startGatewayFor } from "../../src/cli/gateway-commands.js";
import type { Gateway } from "../../src/gateway/index.js";
import { generateKey } from "../../src/gateway/keys.js";
import { controlRequest, spawnSubject } from "../../src/cluster/control.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { scriptedReply, startScriptedModelServer, type NatsServerHandle, type ScriptedModelServer } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";
import { connectAs, expectPermissionDenied, expectSubscriptionsRefused, kovaAs, nodeTomlAs, startAccountsServer } from "../fixtures/security/accounts.js";

// A gateway under the `gateway` role of deploy/nats/accounts.conf as shipped, in front of a
// node (role `node`) hosting a real LLM agent on a scripted model: everything the gateway
// does works, and what it must not do is refused by the server.
const KEY_ENV = "KOVA_TEST_GATEWAY_KEY";
const key = generateKey();

let server: NatsServerHandle;
let model: ScriptedModelServer;
let node: KovaNode;
let gateway: Gateway;
let dir: string;
let admin: NatsConnection;

const logger = () => (process.env.KOVA_TEST_LOGS ? createLogger() : silentLogger());

beforeAll(async () => {
  process.env[KEY_ENV] = key;
  dir = await mkdtemp(join(tmpdir(), "kova-gwrole-"));
  server = await startAccountsServer(dir);
  model = await startScriptedModelServer({
    handler: (r) => {
      const text = String(r.lastMessage?.content ?? "");
      if (text.includes("slow")) return scriptedReply.text("too late", { latencyMs: 60_000 });
      return scriptedReply.text(`echo: ${text}`, { usage: { inputTokens: 10, outputTokens: 5 } });
    },
  });
  const nodeConfig = parseConfig(
    nodeTomlAs(server, join(dir, "node"), model.url, [
      `[[agents]]\nid = "helper"\nmodel = "main"\ncapabilities = ["chat"]`,
      `[[agent_templates]]\nname = "support"\nmodel = "main"`,
    ]),
    { env: process.env },
  );
  node = await KovaNode.start({ config: nodeConfig, logger: logger(), types: new ActorTypeRegistry() });
  admin = await connectAs(server, "node");
  await poll(() => node.agents().some((a) => a.id === "helper" && a.state === "Idle"), { timeoutMs: 20_000, what: "the agent hosted" });
  // The shipped deploy/kova/kova-gateway.toml, as `kova gateway start --config` reads it,
  // pointed at this server and a free port, with one key from the environment.
  const shipped = await readFile(resolve(import.meta.dirname, "../../deploy/kova/kova-gateway.toml"), "utf8");
  const gwConfig = parseConfig(`${shipped}\n[[gateway.keys]]\nname = "test"\nkey_env = "${KEY_ENV}"\nadmin = true\n`, { env: process.env });
  gateway = await startGatewayFor({ ...gwConfig, natsUrls: [server.url] }, logger(), { listen: "127.0.0.1:0" });
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await admin?.close();
  await node?.stop();
  await model?.close();
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

interface RpcReply {
  result?: { task?: Record<string, unknown> } & Record<string, unknown>;
  error?: { code: number; message: string };
}

async function a2a(method: string, params: unknown): Promise<RpcReply> {
  const res = await fetch(`${gateway.url}/agents/helper/a2a/jsonrpc`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "A2A-Version": "1.0" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return (await res.json()) as RpcReply;
}

const stateOf = (t: Record<string, unknown> | undefined) => (t?.status as { state?: string } | undefined)?.state;

describe("security: the gateway role (deploy/nats/accounts.conf)", () => {
  it("gateway role - A2A send, get, list and cancel, streaming OpenAI chat and the web view work", async () => {
    const sent = await a2a("SendMessage", { message: { messageId: "m1", role: "ROLE_USER", parts: [{ text: "hi there" }] } });
    expect(sent.error).toBeUndefined();
    const task = sent.result!.task!;
    expect(stateOf(task)).toBe("TASK_STATE_COMPLETED");
    expect(JSON.stringify(task.artifacts)).toContain("echo: hi there");

    const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key, maxRetries: 0 });
    const stream = await openai.chat.completions.create({ model: "helper", messages: [{ role: "user", content: "stream me" }], stream: true });
    const pieces: string[] = [];
    for await (const chunk of stream) if (chunk.choices[0]?.delta.content) pieces.push(chunk.choices[0].delta.content);
    expect(pieces.join("")).toBe("echo: stream me");

    // A template instance is activated through the nodes' control endpoint before its run.
    const instance = await openai.chat.completions.create({ model: "support--user-7", messages: [{ role: "user", content: "hello instance" }] });
    expect(instance.choices[0]?.message.content).toBe("echo: hello instance");

    // Cancel: the task is interrupted through the node's signal endpoint.
    const slow = await a2a("SendMessage", {
      message: { messageId: "m2", role: "ROLE_USER", parts: [{ text: "slow please" }] },
      configuration: { returnImmediately: true },
    });
    const slowId = String(slow.result!.task!.id);
    await poll(async () => stateOf((await a2a("GetTask", { id: slowId })).result) === "TASK_STATE_WORKING", {
      timeoutMs: 15_000,
      what: "the slow task to be working",
    });
    await poll(() => model.requests.some((q) => q.lastMessage?.content === "slow please"), { timeoutMs: 10_000, what: "the slow model call to start" });
    const cancelled = await a2a("CancelTask", { id: slowId });
    expect(cancelled.error).toBeUndefined();
    expect(stateOf(cancelled.result)).toBe("TASK_STATE_CANCELED");
    await poll(() => model.requests.find((q) => q.lastMessage?.content === "slow please")?.clientClosed === true, {
      timeoutMs: 10_000,
      what: "the model call to be aborted",
    });

    const listed = await a2a("ListTasks", {});
    expect((listed.result!.tasks as Array<{ id: string }>).map((t) => t.id).sort()).toEqual([String(task.id), slowId].sort());

    // The web view reads nodes, the agent's backlog (its mailbox consumer) and usage (fast
    // path). The cancelled run's message is acked once its turn has ended: poll for it.
    type View = { nodes: Array<{ id: string; live: boolean }>; agents: Array<{ id: string; backlog: number | null; usage?: { runs: number } }> };
    const view = await poll(
      async () => {
        const v = (await (await fetch(`${gateway.url}/ui/api/cluster`, { headers: { authorization: `Bearer ${key}` } })).json()) as View;
        const helper = v.agents.find((a) => a.id === "helper");
        return helper?.backlog === 0 && helper.usage?.runs === 3 ? v : undefined;
      },
      { timeoutMs: 10_000, what: "the web view to show helper's backlog drained and its 3 runs" },
    );
    expect(view.nodes.map((n) => [n.id, n.live])).toEqual([["n1", true]]);
  }, 90_000);

  it("gateway role - keys added, listed and removed by an operator work on the gateway at once; the gateway and a client cannot manage keys", async () => {
    const added = await kovaAs(server, "operator", ["gateway", "keys", "add", "ops", "--agents", "helper", "--json"]);
    expect(added.code, added.stderr).toBe(0);
    const opsKey = (JSON.parse(added.stdout) as { key: string }).key;
    const models = () => fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${opsKey}` } }).then((r) => r.status);
    await poll(async () => (await models()) === 200, { timeoutMs: 10_000, what: "the gateway to accept the new key" });
    const ls = await kovaAs(server, "operator", ["gateway", "keys", "ls", "--json"]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(JSON.parse(ls.stdout)).toMatchObject([{ name: "ops", agents: ["helper"] }]);
    for (const r of ["gateway", "client"] as const) {
      const denied = await kovaAs(server, r, ["gateway", "keys", "add", `by-${r}`], { timeoutMs: 30_000 });
      expect(denied.code, `${r} added a key`).not.toBe(0);
      expect(denied.stderr).toMatch(/permission/i);
    }
    const rm = await kovaAs(server, "operator", ["gateway", "keys", "rm", "ops"]);
    expect(rm.code, rm.stderr).toBe(0);
    await poll(async () => (await models()) === 401, { timeoutMs: 10_000, what: "the gateway to refuse the removed key" });
    expect(await listKvKeys(admin, "kova_default_gateway_keys")).toEqual([]);
  }, 90_000);

  it("gateway role - lists its tasks and keys buckets and no other, and creates no consumer on its tasks bucket", async () => {
    {
      await using nc = await connectAs(server, "gateway");
      // A task entry written and deleted under the role: listed, then not (as ListTasks reads).
      const tasks = await new Kvm(nc).open("kova_default_gateway_tasks");
      await tasks.put("listing-probe", "{}");
      expect(await listKvKeys(nc, "kova_default_gateway_tasks")).toContain("listing-probe");
      await tasks.delete("listing-probe");
      expect(await listKvKeys(nc, "kova_default_gateway_tasks")).not.toContain("listing-probe");
      expect(await listKvKeys(nc, "kova_default_gateway_keys")).toEqual(expect.any(Array));
      for (const bucket of ["kova_default_leases", "kova_default_checkpoints"]) await expectPermissionDenied(listKvKeys(nc, bucket));
      const jsm = await jetstreamManager(nc, { timeout: 2000 });
      await expectPermissionDenied(jsm.consumers.add("KV_kova_default_gateway_tasks", { ack_policy: AckPolicy.None, headers_only: true }));
      // The buckets it watches: a KV mirror's gap check reads the stream's next message.
      for (const bucket of ["kova_default_agents", "kova_default_nodes"]) {
        const query = { seq: 1, next_by_subj: `$KV.${bucket}.>` } as unknown as MsgRequest;
        expect((await jsm.streams.getMessage(`KV_${bucket}`, query))?.subject).toMatch(`$KV.${bucket}.`);
      }
    }
  });

  it("gateway role - cannot write the registry or checkpoints, spawn, read a mailbox, or read another role's inbox", async () => {
    {
      await using nc = await connectAs(server, "gateway");
      const enc = new TextEncoder();
      await expectPermissionDenied(
        nc.request("$KV.kova_default_agents.helper", enc.encode(JSON.stringify({ id: "helper", desired: "killed" })), { timeout: 2000 }),
      );
      await expectPermissionDenied(nc.request("$KV.kova_default_checkpoints.helper", enc.encode("{}"), { timeout: 2000 }));
      await expectPermissionDenied(nc.request("$KV.kova_default_leases.helper", enc.encode("{}"), { timeout: 2000 }));
      await expectPermissionDenied(controlRequest(nc, spawnSubject("default"), { id: "evil", type: "counter" }, 2000));
      const jsm = await jetstreamManager(nc, { timeout: 2000 });
      await expectPermissionDenied(
        jsm.consumers.add("KOVA_DEFAULT_A2A", { durable_name: "steal", filter_subject: "kova.default.a2a.helper", ack_policy: AckPolicy.Explicit }),
      );
      await expectPermissionDenied(jsm.consumers.add("KOVA_DEFAULT_EVENTS", { durable_name: "keep", ack_policy: AckPolicy.Explicit }));
      await expectPermissionDenied(jsm.streams.delete("KOVA_DEFAULT_EVENTS"));
      await expectPermissionDenied(jsm.streams.purge("KV_kova_default_gateway_keys"));
      await expectSubscriptionsRefused(nc, ["_INBOX_client.>", "_INBOX_operator.>", "_INBOX.>", "kova.default.a2a.>"]);
    }
    // Nothing changed: the agent is still declared running and hosted; nothing was spawned.
    const agents = await new Kvm(admin).open("kova_default_agents");
    expect(await agents.get("evil")).toBeNull();
    expect((await agents.get("helper"))!.json<{ desired: string }>().desired).toBe("running");
    expect(node.agents().find((a) => a.id === "helper")?.state).toBe("Idle");
  }, 60_000);
});
