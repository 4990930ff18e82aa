import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { connect, headers, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ActorTypeRegistry } from "../../src/actors/index.js";
import { Bus, encodeEnvelope, createEnvelope, KovaClient, securityOptions, type NatsSecurity } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { Gateway } from "../../src/gateway/gateway.js";
import { parseGatewayConfig } from "../../src/gateway/config.js";
import { generateKey, hashKey, KeyAdmin } from "../../src/gateway/keys.js";
import { principalOf } from "../../src/gateway/auth.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { approveSubject, nodeSubject, spawnSubject } from "../../src/cluster/control.js";
import {
  defineExperiment,
  evalControlSubject,
  evalsBucket,
  experimentActorId,
  readExperimentSummary,
  runnerActorId,
  startExperiment,
} from "../../src/eval/index.js";
import { scriptedReply, startScriptedModelServer, type NatsServerHandle, type ScriptedModelServer } from "../../src/testing/index.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { tempDir, type TempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";
import {
  connectAs,
  expectPermissionDenied,
  expectSubscriptionsRefused,
  nodeTomlAs,
  passwords,
  role,
  startAccountsServer,
} from "../fixtures/security/accounts.js";

/**
 * The cross-tenant corpus (docs/security.md, "Principals"): one cluster under the shipped
 * deploy/nats/accounts.conf, a node hosting real agents (`helper`, `writer`, `clerk`,
 * whose calculator calls need approval) and a template (`support`), a gateway under the
 * gateway role with two keys whose agents overlap (A: helper, support, clerk; B: helper,
 * writer, support), and two NATS client users (client-a, client-b).
 *
 * A (key A) and client-a first create what principals own: sessions, template instances,
 * A2A tasks (completed, running, waiting for an approval), runs, and an experiment each
 * that an operator started for them (running: its cell waits). Then every case tries one
 * endpoint or subject as key B or client-b with A's or client-a's ids, and is judged by
 * effect: what B gets back, and that nothing reached or changed A's things (each attempt
 * carries a marker the scripted model would see if any run started with it).
 */

const SUFFIX = randomUUID().slice(0, 8);
let released!: () => void;
const heldRuns = new Promise<void>((resolve) => (released = resolve));

let dir: TempDir;
let server: NatsServerHandle;
let model: ScriptedModelServer;
let node: KovaNode;
let gateway: Gateway;
let admin: Bus;
const conns: NatsConnection[] = [];
const logs = captureLogs();
const keys = { a: generateKey(), b: generateKey(), c: generateKey(), ops: generateKey() };
const scopeOf = (key: string, name: string) => principalOf({ name, hash: hashKey(key) }).sessionScope!;
const clientUser = (user: string): NatsSecurity => ({ user, password: passwords.client, inboxPrefix: `_INBOX_client.${user}` });

/** What A and client-a created, filled in by beforeAll. */
const A = {} as {
  session: string;
  instance: string;
  statelessRun: string;
  task: { id: string; contextId: string; sessionId: string };
  held: { id: string; sessionId: string };
  waiting: { id: string; sessionId: string; runId: string };
  approvalKey: string;
};
const CA = {} as { session: string; instance: string; run: string };
/** The experiments started for key A and client-a (their ids carry their owners' scopes). */
const EXP = {} as { a: string; c: string; ca: string };
let clientA: KovaClient;
let clientB: KovaClient;
let rawB: NatsConnection;

const marker = (n: string) => `MARK-${n}-${SUFFIX}`;
/** Whether any model call of any agent saw this text: the proof that a run started with it. */
const reached = (text: string) => model.requests.some((q) => JSON.stringify(q.messages).includes(text));

// The A2A SDK writes a refused stream's error to console.error itself (docs/gateway.md): here
// those are the refusals the cases expect, and nothing else is hidden.
const consoleError = console.error;
console.error = (...args: unknown[]) => {
  if (/^(Pre-stream error for request|Error during SSE streaming \(request)/.test(String(args[0]))) return;
  consoleError(...args);
};

beforeAll(async () => {
  dir = await tempDir("kova-tenants-");
  server = await startAccountsServer(dir.path, { clientUsers: ["client-a", "client-b"] });
  model = await startScriptedModelServer({
    handler: async (r) => {
      const text = String(r.lastMessage?.content ?? "");
      if (r.lastMessage?.role === "tool") return scriptedReply.text("the tool answered");
      if (text.includes("HOLD")) await heldRuns;
      if (text.includes("APPROVE")) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "1 + 1" } }]);
      return scriptedReply.text(`echo: ${text}`, { usage: { inputTokens: 5, outputTokens: 5 } });
    },
  });
  node = await KovaNode.start({
    config: parseConfig(
      nodeTomlAs(server, join(dir.path, "node"), model.url, [
        `[[agents]]\nid = "helper"\nmodel = "main"`,
        `[[agents]]\nid = "writer"\nmodel = "main"`,
        `[[agents]]\nid = "clerk"\nmodel = "main"\ntools = ["calculator"]\napproval = ["calculator"]`,
        `[[agent_templates]]\nname = "support"\nmodel = "main"`,
      ]),
      { env: process.env },
    ),
    logger: logs.logger,
    types: new ActorTypeRegistry(),
  });
  await poll(() => ["helper", "writer", "clerk"].every((id) => node.agents().some((a) => a.id === id && a.state === "Idle")), {
    timeoutMs: 20_000,
    what: "the agents hosted",
  });
  gateway = await Gateway.start({
    config: parseGatewayConfig({
      listen: "127.0.0.1:0",
      keys: [
        { name: "key-a", hash: hashKey(keys.a), agents: ["helper", "support", "clerk"] },
        { name: "key-b", hash: hashKey(keys.b), agents: ["helper", "writer", "support"] },
        { name: "ops", hash: hashKey(keys.ops), admin: true },
        // No agents list: it may use every agent, so only ownership keeps it from others' things.
        { name: "key-c", hash: hashKey(keys.c) },
      ],
    }),
    servers: server.url,
    cluster: "default",
    security: role("gateway"),
    logger: logs.logger,
  });
  admin = await Bus.connect({ servers: server.url, cluster: "default", security: role("node"), name: "test-admin" });
  clientA = await KovaClient.connect({ servers: server.url, security: clientUser("client-a"), ensureStreams: false });
  clientB = await KovaClient.connect({ servers: server.url, security: clientUser("client-b"), ensureStreams: false });
  rawB = await connect({ servers: server.url, ...securityOptions(clientUser("client-b")) });
  conns.push(rawB);

  // What key A owns.
  const chat = await openai("a", { model: "helper", messages: [{ role: "user", content: "A-SECRET-1" }] }, { "x-kova-session": "secret-s" });
  expect(chat.status).toBe(200);
  A.session = chat.headers.get("x-kova-session-id")!;
  const inst = await openai("a", { model: "support", user: "inst-1", messages: [{ role: "user", content: "A-SECRET-2" }] });
  A.instance = ((await inst.json()) as { model: string }).model;
  const stateless = await openai("a", { model: "helper", messages: [{ role: "user", content: "A-SECRET-4" }] });
  A.statelessRun = stateless.headers.get("x-kova-run-id")!;
  const sent = await rpc("a", "/agents/helper/a2a/jsonrpc", "SendMessage", { message: message("A-SECRET-3", { contextId: "ctx-a" }) });
  const task = sent.body.result.task;
  A.task = { id: task.id, contextId: task.contextId, sessionId: task.metadata.kova.sessionId };
  // On an instance of its own: an agent runs one turn at a time, and this one waits.
  const held = await rpc("a", "/agents/support--held/a2a/jsonrpc", "SendMessage", {
    message: message("HOLD A-SECRET-5", { contextId: "ctx-held" }),
    configuration: { returnImmediately: true },
  });
  A.held = { id: held.body.result.task.id, sessionId: held.body.result.task.metadata.kova.sessionId };
  const waiting = await rpc("a", "/agents/clerk/a2a/jsonrpc", "SendMessage", { message: message("APPROVE A-SECRET-6") });
  const w = waiting.body.result.task;
  expect(w.status.state).toBe("TASK_STATE_INPUT_REQUIRED");
  A.waiting = { id: w.id, sessionId: w.metadata.kova.sessionId, runId: w.metadata.kova.runId };
  const approvals = await new Kvm(admin.nc).open("kova_default_approvals");
  A.approvalKey = await poll(
    async () => {
      for await (const k of await approvals.keys(`${A.waiting.runId}.>`)) return k;
      return undefined;
    },
    { timeoutMs: 10_000, what: "A's approval record" },
  );
  await poll(() => reached("HOLD A-SECRET-5"), { timeoutMs: 10_000, what: "A's held run to call its model" });

  // What client-a owns.
  const ca = await clientA.ask<{ sessionId: string; runId: string }>(
    "helper",
    "agent.chat",
    { message: "CA-SECRET-1", sessionId: "cs" },
    { timeoutMs: 20_000 },
  );
  CA.session = ca.payload.sessionId;
  CA.run = ca.payload.runId;
  const cai = await clientA.ask("support--cinst", "agent.chat", { message: "CA-SECRET-2", sessionId: "x" }, { timeoutMs: 20_000 });
  CA.instance = cai.from;

  // An experiment for each, started by a trusted party (here a node's user) as an operator would.
  const experiment = (name: string) =>
    defineExperiment({
      experiment: { name, concurrency: 1 },
      subjects: [{ id: "s", agent: "helper" }],
      tasks: [{ id: "t", input: `HOLD ${name}-SECRET`, expected: "x" }],
      verifiers: [{ type: "exact" }],
    });
  EXP.a = (await startExperiment(admin, experiment("exp-a"), { owner: principalOf({ name: "key-a", hash: hashKey(keys.a) }).id })).experimentId;
  EXP.c = (await startExperiment(admin, experiment("exp-c"), { owner: principalOf({ name: "key-c", hash: hashKey(keys.c) }).id })).experimentId;
  EXP.ca = (await startExperiment(admin, experiment("exp-ca"), { owner: "nats:CLIENT:client-a" })).experimentId;
  await poll(() => ["exp-a", "exp-c", "exp-ca"].every((n) => reached(`HOLD ${n}-SECRET`)), {
    timeoutMs: 20_000,
    what: "the experiments' cells to call the model",
  });
}, 120_000);

afterAll(async () => {
  console.error = consoleError;
  released();
  await clientA?.close();
  await clientB?.close();
  for (const c of conns) await c.close().catch(() => undefined);
  await gateway?.close();
  await admin?.close();
  await node?.stop();
  await model?.close();
  await server?.stop();
  await dir?.[Symbol.asyncDispose]();
});

function message(text: string, extra: Record<string, unknown> = {}) {
  return { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }], ...extra };
}

function openai(key: keyof typeof keys, body: Record<string, unknown>, extra: Record<string, string> = {}) {
  return fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys[key]}`, "content-type": "application/json", ...extra },
    body: JSON.stringify(body),
  });
}

async function rpc(key: keyof typeof keys, path: string, method: string, params: unknown, legacy = false) {
  const res = await fetch(`${gateway.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys[key]}`, "content-type": "application/json", ...(legacy ? {} : { "A2A-Version": "1.0" }) },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  const text = await res.text();
  // A streaming method answers SSE: its first data line is the JSON-RPC answer.
  const json = text.startsWith("data:") || text.startsWith("event:") ? (/^data: (.*)$/m.exec(text)?.[1] ?? "{}") : text;
  return { status: res.status, body: JSON.parse(json) as Record<string, any> };
}

function get(key: keyof typeof keys, path: string) {
  return fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${keys[key]}` } });
}

/** A's things as A sees them: its tasks' states and its approval's status. */
async function stateOfA(): Promise<{ held: string; waiting: string; approval: string }> {
  const state = async (id: string) => (await rpc("a", "/a2a/jsonrpc", "GetTask", { id })).body.result?.status?.state as string;
  const approvals = await new Kvm(admin.nc).open("kova_default_approvals");
  return {
    held: await state(A.held.id),
    waiting: await state(A.waiting.id),
    approval: ((await approvals.get(A.approvalKey))?.json<{ status: string }>() ?? { status: "gone" }).status,
  };
}

/** Messages published to `subject` while `act` runs, on a connection allowed to listen there. */
async function deliveredTo(listener: NatsConnection, subject: string, act: () => Promise<void>): Promise<Msg[]> {
  const got: Msg[] = [];
  const sub = listener.subscribe(subject, {
    callback: (_e, m) => {
      got.push(m);
    },
  });
  await listener.flush();
  await act();
  // Anything the node published for it went out before its answer to the send.
  await listener.flush();
  sub.unsubscribe();
  return got;
}

/**
 * Publishes an envelope to an agent's inbox as raw client-b (with headers of its own), as a
 * hostile client would, and returns the answer: the stream's ack, or the nodes' refusal
 * (`error.kova`, ingress.ts).
 */
async function publishAsB(to: string, payload: unknown, opts: { replyTo?: string; header?: [string, string][] } = {}) {
  const env = createEnvelope({ from: "intruder", to, type: "agent.chat", payload, ...(opts.replyTo ? { replyTo: opts.replyTo } : {}) });
  const h = headers();
  h.set("Content-Type", "application/json");
  h.set("Nats-Msg-Id", env.id);
  for (const [k, v] of opts.header ?? []) h.append(k, v);
  const reply = await rawB.request(`kova.default.a2a.${to}`, encodeEnvelope(env, "json"), { headers: h, timeout: 5000 });
  return reply.json<{ seq?: number; error?: { kova?: { code: string } } }>();
}

/** A refused ask: client-b gets UNKNOWN_AGENT (as for something that does not exist), and no run starts. */
async function refusedAsk(to: string, payload: Record<string, unknown>, text: string) {
  const err = await clientB.ask(to, "agent.chat", { message: text, ...payload }, { timeoutMs: 10_000 }).catch((e: unknown) => e);
  expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
  expect(reached(text)).toBe(false);
}

interface Case {
  name: string;
  run(): Promise<void>;
}

const cases: Case[] = [];
const add = (name: string, run: () => Promise<void>) => cases.push({ name, run });

// ---- key B against the gateway, with A's and client-a's ids ----

/** The victims' ids by name, read when a case runs (beforeAll fills them in). */
const sessions: Record<string, () => string> = {
  "A's named session": () => A.session,
  "A's instance session": () => A.instance.slice("support--".length),
  "A's stateless run": () => A.statelessRun,
  "A's task session": () => A.task.sessionId,
  "A's running task session": () => A.held.sessionId,
  "A's approval-waiting session": () => A.waiting.sessionId,
  "client-a's session": () => CA.session,
};
for (const [what, sid] of Object.entries(sessions)) {
  add(`web view - key B watching ${what} gets 404 and no event`, async () => {
    const res = await get("b", `/ui/api/sessions/${sid()}/events`);
    expect(res.status).toBe(404);
    const body = await res.text();
    expect(body).not.toMatch(/SECRET|run_started/);
  });
}
add("web view - A watching its own session gets its events (the check is by owner, not a refusal of everyone)", async () => {
  const ac = new AbortController();
  const res = await fetch(`${gateway.url}/ui/api/sessions/${A.session}/events`, { headers: { authorization: `Bearer ${keys.a}` }, signal: ac.signal });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes("caught_up")) text += new TextDecoder().decode((await reader.read()).value);
  ac.abort();
  expect(text).toContain("A-SECRET-1");
});

const instances: Record<string, () => string> = { "A's instance": () => A.instance, "client-a's instance": () => CA.instance };
for (const [what, id] of Object.entries(instances)) {
  const absent = async (path: string, pick: (body: any) => string[]) => {
    const res = await get("b", path);
    expect(res.status).toBe(200);
    expect(pick(await res.json())).not.toContain(id());
  };
  add(`listing - ${what} is not in key B's /v1/models`, () => absent("/v1/models", (b) => b.data.map((m: { id: string }) => m.id)));
  add(`listing - ${what} is not in key B's /agents`, () => absent("/agents", (b) => b.agents.map((a: { id: string }) => a.id)));
  add(`listing - ${what} is not in key B's directory card`, () => absent("/.well-known/agent-card.json", (b) => b.skills.map((s: { id: string }) => s.id)));
  add(`listing - ${what} is not in key B's web view agents table`, () => absent("/ui/api/cluster", (b) => b.agents.map((a: { id: string }) => a.id)));
  add(`card - key B asking ${what}'s card gets 404`, async () => {
    expect((await get("b", `/agents/${id()}/.well-known/agent-card.json`)).status).toBe(404);
  });
  add(`a2a - key B sending to ${what}'s endpoint gets 404 and the instance runs nothing`, async () => {
    const text = marker(`a2a-${what}`);
    const res = await rpc("b", `/agents/${id()}/a2a/jsonrpc`, "SendMessage", { message: message(text) });
    expect(res.status).toBe(404);
    expect(reached(text)).toBe(false);
  });
  add(`a2a - key B naming ${what} in metadata.agent on the shared endpoint gets an unknown agent`, async () => {
    const text = marker(`shared-${what}`);
    const res = await rpc("b", "/a2a/jsonrpc", "SendMessage", { message: message(text, { metadata: { agent: id() } }) });
    expect(res.body.error?.message).toContain("no agent");
    expect(reached(text)).toBe(false);
  });
  for (const stream of [false, true]) {
    add(`openai - key B with model = ${what} (stream ${stream}) gets 404 model_not_found and the instance runs nothing`, async () => {
      const text = marker(`model-${what}-${stream}`);
      const res = await openai("b", { model: id(), stream, messages: [{ role: "user", content: text }] });
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
      expect(reached(text)).toBe(false);
    });
  }
  add(`openai - key B naming ${what}'s key as its session with model = support gets 404`, async () => {
    const text = marker(`user-${what}`);
    const res = await openai("b", { model: "support", user: id().slice("support--".length), messages: [{ role: "user", content: text }] });
    expect(res.status).toBe(404);
    expect(reached(text)).toBe(false);
  });
}

for (const what of ["A's named session", "A's running task session", "client-a's session"] as const) {
  for (const via of ["X-Kova-Session", "user"] as const) {
    add(`openai - key B naming ${what} (${via}) on helper gets 404 and reads nothing of it`, async () => {
      const text = marker(`session-${what}-${via}`);
      const sid = sessions[what]!();
      const res = await openai(
        "b",
        { model: "helper", ...(via === "user" ? { user: sid } : {}), messages: [{ role: "user", content: text }] },
        via === "X-Kova-Session" ? { "x-kova-session": sid } : {},
      );
      expect(res.status).toBe(404);
      expect(reached(text)).toBe(false);
    });
  }
}
add("a2a - key B sending in A's context id (as A's session id) gets an error and starts no run", async () => {
  const text = marker("ctx");
  const res = await rpc("b", "/agents/helper/a2a/jsonrpc", "SendMessage", { message: message(text, { contextId: A.task.sessionId }) });
  expect(res.body.error).toBeDefined();
  expect(reached(text)).toBe(false);
});
add("a2a - key B sending in A's client context id (ctx-a) gets a conversation of its own, without A's turns", async () => {
  const text = marker("ctx-name");
  const res = await rpc("b", "/agents/helper/a2a/jsonrpc", "SendMessage", { message: message(text, { contextId: "ctx-a" }) });
  expect(res.body.result.task.status.state).toBe("TASK_STATE_COMPLETED");
  const prompt = model.requests.find((q) => JSON.stringify(q.messages).includes(text));
  expect(JSON.stringify(prompt?.messages)).not.toContain("A-SECRET-3");
});
add("a2a - key B continuing A's task (message.taskId) gets task not found", async () => {
  const text = marker("taskid");
  const res = await rpc("b", "/agents/helper/a2a/jsonrpc", "SendMessage", { message: message(text, { taskId: A.task.id }) });
  expect(res.body.error?.code).toBe(-32001);
  expect(reached(text)).toBe(false);
});

const tasks: Record<string, () => string> = {
  "A's completed task": () => A.task.id,
  "A's running task": () => A.held.id,
  "A's approval-waiting task": () => A.waiting.id,
};
const METHODS = [
  { name: "GetTask", legacy: "tasks/get" },
  { name: "CancelTask", legacy: "tasks/cancel" },
  { name: "SubscribeToTask", legacy: "tasks/resubscribe" },
];
for (const [what, taskId] of Object.entries(tasks)) {
  for (const m of METHODS) {
    for (const path of ["/agents/helper/a2a/jsonrpc", "/a2a/jsonrpc"]) {
      for (const legacy of [false, true]) {
        add(`a2a - key B ${legacy ? m.legacy : m.name} of ${what} on ${path} gets task not found, and A's tasks stay as they were`, async () => {
          const before = await stateOfA();
          const res = await rpc("b", path, legacy ? m.legacy : m.name, { id: taskId() }, legacy);
          expect(res.body.error?.code, JSON.stringify(res.body)).toBe(-32001);
          expect(JSON.stringify(res.body)).not.toContain("SECRET");
          expect(await stateOfA()).toEqual(before);
        });
      }
    }
  }
}
add("a2a - key B's ListTasks lists none of A's tasks", async () => {
  const res = await rpc("b", "/a2a/jsonrpc", "ListTasks", { pageSize: 100 });
  const ids = (res.body.result.tasks as Array<{ id: string }>).map((t) => t.id);
  for (const id of Object.values(tasks)) expect(ids).not.toContain(id());
});
add("web view - key B's cluster table has no nodes, no dead letters, and no usage or backlog of shared agents", async () => {
  const view = (await (await get("b", "/ui/api/cluster")).json()) as { nodes: unknown[]; dlq: object; agents: Array<Record<string, unknown>> };
  expect(view.nodes).toEqual([]);
  expect(view.dlq).toEqual({});
  const helper = view.agents.find((a) => a.id === "helper")!;
  expect(helper).toBeDefined();
  expect(helper.usage).toBeUndefined();
  expect(helper.backlog).toBeUndefined();
});
add("keys - a key removed and added again under the same name is a new principal: it finds none of the old key's tasks or sessions", async () => {
  const keyAdmin = await KeyAdmin.open(admin.nc, "default");
  const ask = async (key: string, path: string, init: RequestInit = {}) =>
    fetch(`${gateway.url}${path}`, { ...init, headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "A2A-Version": "1.0" } });
  const accepted = (key: string) => poll(async () => (await ask(key, "/v1/models")).status === 200, { timeoutMs: 10_000, what: "the key to be accepted" });
  const first = (await keyAdmin.add("carol", { agents: ["helper"] })).key;
  await accepted(first);
  const sent = await ask(first, "/agents/helper/a2a/jsonrpc", {
    method: "POST",
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "SendMessage", params: { message: message("CAROL-SECRET", { contextId: "carol-ctx" }) } }),
  });
  const task = ((await sent.json()) as { result: { task: { id: string; metadata: { kova: { sessionId: string } } } } }).result.task;
  await keyAdmin.remove("carol");
  await poll(async () => (await ask(first, "/v1/models")).status === 401, { timeoutMs: 10_000, what: "the removed key to be refused" });
  const second = (await keyAdmin.add("carol", { agents: ["helper"] })).key;
  await accepted(second);
  const got = await ask(second, "/a2a/jsonrpc", {
    method: "POST",
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "GetTask", params: { id: task.id } }),
  });
  expect(((await got.json()) as { error?: { code: number } }).error?.code).toBe(-32001);
  const list = await ask(second, "/a2a/jsonrpc", {
    method: "POST",
    body: JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ListTasks", params: { pageSize: 10 } }),
  });
  expect(((await list.json()) as { result: { tasks: unknown[] } }).result.tasks).toEqual([]);
  expect((await ask(second, `/ui/api/sessions/${task.metadata.kova.sessionId}/events`)).status).toBe(404);
  // Its conversation in the same context name is a new one.
  const again = await ask(second, "/agents/helper/a2a/jsonrpc", {
    method: "POST",
    body: JSON.stringify({ jsonrpc: "2.0", id: 4, method: "SendMessage", params: { message: message("carol again", { contextId: "carol-ctx" }) } }),
  });
  expect(((await again.json()) as { result: { task: { metadata: { kova: { sessionId: string } } } } }).result.task.metadata.kova.sessionId).not.toBe(
    task.metadata.kova.sessionId,
  );
  expect(JSON.stringify(model.requests.find((q) => q.lastMessage?.content === "carol again")?.messages)).not.toContain("CAROL-SECRET");
});
add("admin - an admin key (given explicitly) sees A's instance and client-a's in /v1/models and A's session's events: the operator's view", async () => {
  const models = ((await (await get("ops", "/v1/models")).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  expect(models).toEqual(expect.arrayContaining([A.instance, CA.instance]));
  const ac = new AbortController();
  const res = await fetch(`${gateway.url}/ui/api/sessions/${A.session}/events`, { headers: { authorization: `Bearer ${keys.ops}` }, signal: ac.signal });
  expect(res.status).toBe(200);
  ac.abort();
  const view = (await (await get("ops", "/ui/api/cluster")).json()) as { nodes: unknown[] };
  expect(view.nodes.length).toBeGreaterThan(0);
});
add("admin - a key added by kova gateway keys add without --admin is no admin: A's session is 404 and its instance unlisted", async () => {
  const keyAdmin = await KeyAdmin.open(admin.nc, "default");
  const { key, record } = await keyAdmin.add("dave");
  expect(record.admin).toBeUndefined();
  await poll(async () => (await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status === 200, {
    timeoutMs: 10_000,
    what: "dave's key to be accepted",
  });
  expect((await fetch(`${gateway.url}/ui/api/sessions/${A.session}/events`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(404);
  const models = ((await (await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: Array<{ id: string }> })
    .data;
  expect(models.map((m) => m.id)).not.toContain(A.instance);
});
add("agents - key A asking writer (not its agent) gets 404 as for an agent that does not exist, never 403", async () => {
  const text = marker("writer");
  const res = await openai("a", { model: "writer", messages: [{ role: "user", content: text }] });
  expect(res.status).toBe(404);
  expect((await get("a", "/agents/writer/.well-known/agent-card.json")).status).toBe(404);
  expect(reached(text)).toBe(false);
});

// ---- client-b on the bus, with A's and client-a's ids ----

for (const what of ["A's named session", "A's task session", "A's approval-waiting session", "client-a's session"]) {
  const sid = sessions[what]!;
  add(`bus - client-b chatting into ${what} is refused (UNKNOWN_AGENT) and reads nothing of it`, () =>
    refusedAsk("helper", { sessionId: sid() }, marker(`bus-chat-${what}`)),
  );
  add(`bus - client-b's task naming ${what} is refused`, async () => {
    const text = marker(`bus-task-${what}`);
    const err = await clientB.ask("helper", "task_delegate", { input: text, sessionId: sid() }, { timeoutMs: 10_000 }).catch((e: unknown) => e);
    expect(isKovaError(err, "UNKNOWN_AGENT")).toBe(true);
    expect(reached(text)).toBe(false);
  });
}
for (const [what, run] of [
  ["A's stateless run", () => A.statelessRun],
  ["A's task's run", () => A.task.id],
  ["client-a's run", () => CA.run],
] as const) {
  add(`bus - client-b naming ${what} as its runId is refused`, () => refusedAsk("helper", { sessionId: "mine", runId: run() }, marker(`bus-run-${what}`)));
  add(`bus - client-b naming ${what} as its parentRunId is refused`, () =>
    refusedAsk("helper", { sessionId: "mine", parentRunId: run() }, marker(`bus-parent-${what}`)),
  );
}
add("bus - client-b naming A's end user in constraints.user is refused", () =>
  refusedAsk("helper", { sessionId: "mine", constraints: { user: `${scopeOf(keys.a, "key-a")}alice` } }, marker("bus-user")),
);
add("bus - client-b naming A's budget group is refused", () =>
  refusedAsk("helper", { sessionId: "mine", constraints: { budget_group: `${scopeOf(keys.a, "key-a")}g` } }, marker("bus-budget")),
);
for (const [what, id] of Object.entries(instances)) {
  add(`bus - client-b asking ${what} is refused (UNKNOWN_AGENT) and the instance runs nothing`, () =>
    refusedAsk(id(), { sessionId: "mine" }, marker(`bus-inst-${what}`)),
  );
  add(`bus - client-b's fast-path info_request to ${what} is refused (no usage of it)`, async () => {
    const err = await clientB.request(id(), "info_request", {}, { timeoutMs: 5000 }).catch((e: unknown) => e);
    expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
  });
  add(`bus - client-b activating ${what} is refused (UNKNOWN_AGENT)`, async () => {
    const err = await clientB.activate(id()).catch((e: unknown) => e);
    expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
  });
  add(`bus - client-b's raw publish to ${what}'s inbox is refused (UNKNOWN_AGENT), stored nowhere, and runs nothing`, async () => {
    const text = marker(`bus-raw-${what}`);
    const answer = await publishAsB(id(), { message: text, sessionId: "mine" });
    expect(answer.error?.kova?.code).toBe("UNKNOWN_AGENT");
    expect(answer.seq).toBeUndefined();
    expect(reached(text)).toBe(false);
  });
}
add("bus - client-b asking support--inst-1 (A's instance's key, unscoped) gets an instance of its own, not A's", async () => {
  const text = marker("own-inst");
  const reply = await clientB.ask("support--inst-1", "agent.chat", { message: text, sessionId: "x" }, { timeoutMs: 20_000 });
  expect(reply.from).not.toBe(A.instance);
  expect(reply.from).toMatch(/^support--o[0-9a-f]{12}_inst-1$/);
  const prompt = model.requests.find((q) => JSON.stringify(q.messages).includes(text));
  expect(JSON.stringify(prompt?.messages)).not.toContain("A-SECRET-2");
});

/** Inboxes client-b must not get a node to publish into, and a connection allowed to listen on each. */
const foreignInboxes: Array<[string, string, () => Promise<NatsConnection>]> = [
  ["client-a's inbox", "_INBOX_client.client-a.stolen", () => connect({ servers: server.url, ...securityOptions(clientUser("client-a")) })],
  ["kova-client's inbox", "_INBOX_client.kova-client.stolen", () => connectAs(server, "client")],
  ["the gateway's inbox", "_INBOX_gateway.stolen", () => connectAs(server, "gateway")],
  ["the operators' inbox", "_INBOX_operator.stolen", () => connectAs(server, "operator")],
  ["the nodes' own inbox", "_INBOX.stolen", () => connectAs(server, "node")],
];
for (const [what, subject, listen] of foreignInboxes) {
  add(`bus - client-b aiming a reply at ${what} is refused (INVALID_ENVELOPE) and nothing is published there`, async () => {
    const listener = await listen();
    conns.push(listener);
    const text = marker(`reply-${what}`);
    let answer: Awaited<ReturnType<typeof publishAsB>> | undefined;
    const got = await deliveredTo(listener, subject, async () => {
      answer = await publishAsB("helper", { message: text, sessionId: "mine" }, { replyTo: subject });
    });
    expect(answer?.error?.kova?.code).toBe("INVALID_ENVELOPE");
    expect(got).toEqual([]);
    expect(reached(text)).toBe(false);
  });
}
for (const [what, forged] of [
  ["claiming client-a", { acc: "CLIENT", user: "client-a" }],
  ["claiming the gateway's trusted account", { acc: "GATEWAY", user: "kova-gateway" }],
  ["claiming the nodes' account", { acc: "KOVA", user: "kova-node" }],
] as const) {
  for (const copies of [1, 2]) {
    add(`bus - client-b's forged Nats-Request-Info ${what} (${copies}×) is not believed: chatting into client-a's session is still refused`, async () => {
      const text = marker(`forged-${what}-${copies}`);
      const forgedHeader: [string, string] = ["Nats-Request-Info", JSON.stringify(forged)];
      const answer = await publishAsB("helper", { message: text, sessionId: CA.session }, { header: Array.from({ length: copies }, () => forgedHeader) });
      expect(answer.error?.kova?.code).toBe("UNKNOWN_AGENT");
      expect(reached(text)).toBe(false);
    });
  }
}
add("bus - client-b's forged lower-case nats-request-info is not believed either", async () => {
  const text = marker("forged-lower");
  const answer = await publishAsB(
    "helper",
    { message: text, sessionId: CA.session },
    {
      header: [["nats-request-info", JSON.stringify({ acc: "GATEWAY", user: "kova-gateway" })]],
    },
  );
  expect(answer.error?.kova?.code).toBe("UNKNOWN_AGENT");
  expect(reached(text)).toBe(false);
});
add("bus - client-b's own raw publish into its own session is stored and answered (the door is the sender's, not shut)", async () => {
  const text = marker("own-raw");
  const answer = await publishAsB("helper", { message: text, sessionId: "mine" });
  expect(answer.seq).toBeGreaterThan(0);
  await poll(() => reached(text), { timeoutMs: 20_000, what: "client-b's own message to run" });
});

// The registry: no enumeration of agent and instance ids.
const registryReads: Array<[string, string, unknown]> = [
  ["a direct get by sequence", "$JS.API.DIRECT.GET.KV_kova_default_agents", { seq: 1 }],
  ["a direct get of the next key", "$JS.API.DIRECT.GET.KV_kova_default_agents", { next_by_subj: "$KV.kova_default_agents.>", seq: 1 }],
  ["a direct get of the newest key (wildcard)", "$JS.API.DIRECT.GET.KV_kova_default_agents.$KV.kova_default_agents.>", undefined],
  ["a direct get of one key", `$JS.API.DIRECT.GET.KV_kova_default_agents.$KV.kova_default_agents.helper`, undefined],
  ["the stream's subject list", "$JS.API.STREAM.INFO.KV_kova_default_agents", { subjects_filter: ">" }],
  ["a stream message get", "$JS.API.STREAM.MSG.GET.KV_kova_default_agents", { seq: 1 }],
  ["a consumer (a KV watch)", "$JS.API.CONSUMER.CREATE.KV_kova_default_agents", { stream_name: "KV_kova_default_agents", config: {} }],
];
for (const [what, subject, body] of registryReads) {
  add(`registry - client-b may not enumerate the registry: ${what} is refused`, async () => {
    await expectPermissionDenied(rawB.request(subject, body === undefined ? "" : JSON.stringify(body), { timeout: 5000 }));
  });
}
add("bus - client-b may not subscribe to client-a's inbox, the role's inboxes or any events", async () => {
  await expectSubscriptionsRefused(rawB, ["_INBOX_client.client-a.>", "_INBOX_client.>", "kova.default.events.>", `kova.default.events.${CA.session}.>`]);
});
add("approvals - client-b deciding A's approval is refused and it stays pending", async () => {
  const [runId, approvalId] = A.approvalKey.split(".");
  await expectPermissionDenied(rawB.request(approveSubject("default"), JSON.stringify({ runId, approvalId, approved: true }), { timeout: 5000 }));
  expect((await stateOfA()).approval).toBe("pending");
});
add("runs - client-b interrupting A's running task is refused and it goes on", async () => {
  await expectPermissionDenied(
    rawB.request(nodeSubject("default", "n1", "signal"), JSON.stringify({ actorId: "helper", signal: "interrupt" }), { timeout: 5000 }),
  );
  expect((await stateOfA()).held).toBe("TASK_STATE_WORKING");
});
// ---- experiments started for A and client-a (docs/security.md, "Experiments") ----

const experimentIds = (body: unknown) => (body as { experiments: Array<{ experimentId: string }> }).experiments.map((e) => e.experimentId);
add("experiments - key B's experiments page lists neither A's nor client-a's experiment, and each is 404 to it", async () => {
  const list = await get("b", "/ui/api/experiments");
  expect(list.status).toBe(200);
  const ids = experimentIds(await list.json());
  expect(ids).not.toContain(EXP.a);
  expect(ids).not.toContain(EXP.ca);
  for (const id of [EXP.a, EXP.ca]) {
    const res = await get("b", `/ui/api/experiments/${id}`);
    expect(res.status).toBe(404);
    expect(await res.text()).not.toContain("SECRET");
  }
});
add("experiments - key A lists and reads its own experiment (the check is by owner), and not client-a's", async () => {
  expect(experimentIds(await (await get("a", "/ui/api/experiments")).json())).toEqual([EXP.a]);
  expect((await get("a", `/ui/api/experiments/${EXP.a}`)).status).toBe(200);
  expect((await get("a", `/ui/api/experiments/${EXP.ca}`)).status).toBe(404);
});
add("experiments - the admin key sees every experiment", async () => {
  const ids = experimentIds(await (await get("ops", "/ui/api/experiments")).json());
  expect(ids).toEqual(expect.arrayContaining([EXP.a, EXP.ca]));
  expect((await get("ops", `/ui/api/experiments/${EXP.ca}`)).status).toBe(200);
});
// Key C may use every agent (no agents list): only ownership and the reserved templates keep it from these.
const experimentActors: Record<string, () => string> = {
  "C's experiment actor": () => experimentActorId(EXP.c),
  "C's experiment's subject runner": () => runnerActorId({ experimentId: EXP.c, role: "s", index: 0, slot: 0 }),
};
for (const [what, id] of Object.entries(experimentActors)) {
  for (const key of ["c", "b"] as const) {
    add(
      `experiments - key ${key.toUpperCase()} with model = ${what} gets 404 (no key drives an experiment's actors, its owner's neither) and it runs nothing`,
      async () => {
        const text = marker(`exp-openai-${key}-${what}`);
        const res = await openai(key, { model: id(), messages: [{ role: "user", content: text }] });
        expect(res.status).toBe(404);
        expect(reached(text)).toBe(false);
      },
    );
    add(`experiments - ${what} is not in key ${key.toUpperCase()}'s /v1/models`, async () => {
      const body = (await (await get(key, "/v1/models")).json()) as { data: Array<{ id: string }> };
      expect(body.data.map((m) => m.id)).not.toContain(id());
    });
  }
}
/** The experiment is still running: nothing a principal sent reached it. */
const stillRunning = async (experimentId: string) => expect((await readExperimentSummary(admin, experimentId)).status).toBe("running");
const onTheBus: Array<[string, () => KovaClient, () => string]> = [
  ["client-b cancelling A's experiment", () => clientB, () => experimentActorId(EXP.a)],
  ["client-b cancelling client-a's experiment", () => clientB, () => experimentActorId(EXP.ca)],
  ["client-a cancelling the experiment started for it", () => clientA, () => experimentActorId(EXP.ca)],
];
for (const [what, client, id] of onTheBus) {
  add(`experiments - ${what} on the bus is refused (UNKNOWN_AGENT) and it runs on`, async () => {
    const err = await client()
      .ask(id(), "eval.cancel", { reason: "intruder" }, { timeoutMs: 10_000 })
      .catch((e: unknown) => e);
    expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
    await stillRunning(id().slice("eval--".length));
  });
}
add("experiments - client-a's task to the subject runner of the experiment started for it is refused, and it runs nothing", async () => {
  const text = marker("exp-runner-ca");
  const to = runnerActorId({ experimentId: EXP.ca, role: "s", index: 0, slot: 0 });
  const err = await clientA.ask(to, "task_delegate", { input: text }, { timeoutMs: 10_000 }).catch((e: unknown) => e);
  expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
  expect(reached(text)).toBe(false);
});
add("experiments - client-a's fast-path info_request to the experiment started for it is refused (its progress is the operator's to read)", async () => {
  const err = await clientA.request(experimentActorId(EXP.ca), "info_request", {}, { timeoutMs: 5000 }).catch((e: unknown) => e);
  expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
});
add("experiments - client-b's raw publish of eval.cancel to A's experiment is refused at the ingress and stored nowhere", async () => {
  const env = createEnvelope({ from: "intruder", to: experimentActorId(EXP.a), type: "eval.cancel", payload: {} });
  const h = headers();
  h.set("Content-Type", "application/json");
  const reply = await rawB.request(`kova.default.a2a.${env.to}`, encodeEnvelope(env, "json"), { headers: h, timeout: 5000 });
  expect(reply.json<{ error?: { kova?: { code: string } } }>().error?.kova?.code).toBe("UNKNOWN_AGENT");
  await stillRunning(EXP.a);
});
add("experiments - client-b activating an experiment actor in its own scope is refused (UNKNOWN_AGENT): no principal starts one on the bus", async () => {
  const err = await clientB.ask("eval--mine-0123abcd", "eval.start", { digest: "x" }, { timeoutMs: 10_000 }).catch((e: unknown) => e);
  expect(isKovaError(err, "UNKNOWN_AGENT"), String(err)).toBe(true);
});
add("experiments - client-b may not store a spec (control.eval) nor read the evals bucket", async () => {
  await expectPermissionDenied(rawB.request(evalControlSubject("default"), JSON.stringify({ op: "spec", experimentId: "x-0123abcd" }), { timeout: 5000 }));
  await expectPermissionDenied(rawB.request(`$JS.API.STREAM.INFO.KV_${evalsBucket("default")}`, "", { timeout: 5000 }));
  await expectPermissionDenied(
    rawB.request(`$JS.API.STREAM.MSG.GET.KV_${evalsBucket("default")}`, JSON.stringify({ last_by_subj: `$KV.${evalsBucket("default")}.${EXP.ca}.status` }), {
      timeout: 5000,
    }),
  );
});

add("runs - client-b may not spawn", async () => {
  await expectPermissionDenied(rawB.request(spawnSubject("default"), JSON.stringify({ id: "intruder", type: "x" }), { timeout: 5000 }));
});

describe("security: the cross-tenant corpus", () => {
  it("corpus - at least 100 cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(100);
  });
  for (const c of cases) it(c.name, c.run, 30_000);
  it("corpus - afterwards A's and client-a's things are as they left them: memory without any intruder's turn, tasks and approval untouched", async () => {
    expect(await stateOfA()).toEqual({ held: "TASK_STATE_WORKING", waiting: "TASK_STATE_INPUT_REQUIRED", approval: "pending" });
    for (const id of [EXP.a, EXP.c, EXP.ca]) await stillRunning(id);
    const again = await openai("a", { model: "helper", messages: [{ role: "user", content: "A again" }] }, { "x-kova-session": "secret-s" });
    expect(again.status).toBe(200);
    const prompt = JSON.stringify(model.requests.find((q) => q.lastMessage?.content === "A again")?.messages);
    expect(prompt).toContain("A-SECRET-1");
    expect(prompt).not.toContain("MARK-");
    const ca = await clientA.ask("helper", "agent.chat", { message: "client-a again", sessionId: "cs" }, { timeoutMs: 20_000 });
    expect(ca.payload).toMatchObject({ sessionId: CA.session });
    const caPrompt = JSON.stringify(model.requests.find((q) => q.lastMessage?.content === "client-a again")?.messages);
    expect(caPrompt).toContain("CA-SECRET-1");
    expect(caPrompt).not.toContain("MARK-");
    released();
    await poll(async () => (await stateOfA()).held === "TASK_STATE_COMPLETED", { timeoutMs: 20_000, what: "A's held task to complete once let go" });
  }, 60_000);
});
