import { describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { SendMessageRequest, TaskState, type StreamResponse, type Task } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, type Client } from "@a2a-js/sdk/client";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { taskKey, tasksBucket } from "../../src/gateway/task-store.js";
import { approve } from "../fixtures/gateway/agents.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";
import { poll } from "../fixtures/poll.js";

const handler: ScriptedHandler = (r) => {
  const last = r.lastMessage;
  if (last?.role === "tool") return scriptedReply.text(`The tool said ${String(last.content)}.`, { usage: { inputTokens: 30, outputTokens: 6 } });
  const text = String(last?.content ?? "");
  if (text.includes("approval")) return scriptedReply.toolCalls([{ name: "needs_approval", arguments: {} }]);
  if (text.includes("add")) return scriptedReply.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { inputTokens: 20, outputTokens: 4 } });
  if (text.includes("slow")) return scriptedReply.text("too late", { latencyMs: 60_000 });
  return scriptedReply.text(`echo: ${text}`, { usage: { inputTokens: 10, outputTokens: 5 } });
};

function authedFetch(key: string): typeof fetch {
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set("authorization", `Bearer ${key}`);
    return fetch(input, { ...init, headers });
  };
}

async function clientFor(url: string, key: string): Promise<Client> {
  const fetchImpl = authedFetch(key);
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    }),
  );
  return factory.createFromUrl(url);
}

function message(text: string, extra: Record<string, unknown> = {}) {
  return SendMessageRequest.fromJSON({ message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }], ...extra } });
}

function answer(task: Task): string {
  return task.artifacts.flatMap((a) => a.parts.map((p) => (p.content?.$case === "text" ? p.content.value : ""))).join("");
}

async function collect(stream: AsyncGenerator<StreamResponse>): Promise<StreamResponse[]> {
  const out: StreamResponse[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

describe("gateway: A2A v1.0", () => {
  it("a2a - the SDK's client discovers the card, sends, streams, gets, lists and cancels tasks", async () => {
    await using rig = await startGatewayRig({ handler });
    const client = await clientFor(`${rig.url}/agents/helper/`, rig.key);
    const card = await client.getAgentCard();
    expect(card.name).toBe("helper");
    expect(card.skills.map((s) => s.id)).toEqual(["chat", "math"]);
    expect(card.capabilities?.streaming).toBe(true);
    expect(Object.values(card.securitySchemes)[0]?.scheme).toMatchObject({ $case: "httpAuthSecurityScheme", value: { scheme: "bearer" } });
    expect(card.supportedInterfaces.map((i) => i.protocolVersion).sort()).toEqual(["0.3", "1.0"]);

    // blocking send: the agent uses a tool; the task comes back completed with the answer
    const sent = (await client.sendMessage(message("please add 2 and 3"))) as Task;
    expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answer(sent)).toBe("The tool said 5.");
    expect(sent.metadata?.kova).toMatchObject({ agentId: "helper", usage: { inputTokens: 50, outputTokens: 10 } });

    // streaming: the task, working, tool steps, token chunks, the whole answer, completed
    const events = await collect(client.sendMessageStream(message("add once more")));
    const kinds = events.map((e) => e.payload?.$case);
    expect(kinds[0]).toBe("task");
    const states = events.flatMap((e) => (e.payload?.$case === "statusUpdate" ? [e.payload.value.status?.state] : []));
    expect(states[0]).toBe(TaskState.TASK_STATE_WORKING);
    expect(states.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED);
    const chunks = events.flatMap((e) => (e.payload?.$case === "artifactUpdate" && !e.payload.value.lastChunk ? [e.payload.value] : []));
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks[0]?.append).toBe(false);
    expect(chunks.slice(1).every((c) => c.append)).toBe(true);
    expect(chunks.map((c) => answer({ artifacts: c.artifact ? [c.artifact] : [] } as unknown as Task)).join("")).toBe("The tool said 5.");
    const streamedTask = (events[0]!.payload as { value: Task }).value;

    const got = await client.getTask({ tenant: "", id: streamedTask.id, historyLength: undefined });
    expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answer(got)).toBe("The tool said 5.");
    expect(got.history[0]?.parts[0]?.content).toEqual({ $case: "text", value: "add once more" });

    const listed = await client.listTasks({
      tenant: "",
      contextId: "",
      status: TaskState.TASK_STATE_UNSPECIFIED,
      pageToken: "",
      statusTimestampAfter: undefined,
      pageSize: 10,
    });
    expect(listed.tasks.map((t) => t.id).sort()).toEqual([sent.id, streamedTask.id].sort());
    expect(listed.totalSize).toBe(2);

    // cancel: a run whose model call hangs is interrupted, its model call aborted
    const slow = (await client.sendMessage(
      SendMessageRequest.fromJSON({
        message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text: "slow please" }] },
        configuration: { returnImmediately: true },
      }),
    )) as Task;
    expect(slow.status?.state).toBe(TaskState.TASK_STATE_SUBMITTED);
    await poll(async () => (await client.getTask({ tenant: "", id: slow.id })).status?.state === TaskState.TASK_STATE_WORKING, {
      timeoutMs: 10_000,
      what: "the slow task to be working",
    });
    await poll(() => rig.model.requests.some((q) => q.lastMessage?.content === "slow please"), { timeoutMs: 10_000, what: "the slow model call to start" });
    const cancelled = await client.cancelTask({ tenant: "", id: slow.id, metadata: {} });
    expect(cancelled.status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    await poll(() => rig.model.requests.find((q) => q.lastMessage?.content === "slow please")?.clientClosed === true, {
      timeoutMs: 10_000,
      what: "the model call to be aborted",
    });
    // a finished task cannot be cancelled
    await expect(client.cancelTask({ tenant: "", id: sent.id, metadata: {} })).rejects.toThrow(/ended|cancel/i);
    // another key sees none of these tasks
    const other = await startOtherKeyClient(rig);
    await expect(other.getTask({ tenant: "", id: sent.id })).rejects.toThrow(/not found/i);
  }, 90_000);

  it("a2a - two replicas answer for the same task, and a client subscribes again after its gateway restarts", async () => {
    await using rig = await startGatewayRig({ handler, gateways: 2 });
    const [a, b] = rig.gateways as [(typeof rig.gateways)[0], (typeof rig.gateways)[0]];
    const onA = await clientFor(`${a.url}/agents/helper/`, rig.key);
    const onB = await clientFor(`${b.url}/agents/helper/`, rig.key);

    // the run waits for an approval: the stream ends at input_required
    const first = await collect(onA.sendMessageStream(message("this needs approval")));
    const task = (first[0]!.payload as { value: Task }).value;
    const last = first.at(-1)!.payload;
    expect(last?.$case).toBe("statusUpdate");
    expect((last as { value: { status: { state: TaskState } } }).value.status.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect((await onB.getTask({ tenant: "", id: task.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);

    // the gateway that started it goes away; a new one takes its place
    await rig.stopGateway(a);
    const c = await rig.addGateway();
    const onC = await clientFor(`${c.url}/agents/helper/`, rig.key);
    const resub = onC.resubscribeTask({ tenant: "", id: task.id });
    const firstEvent = await resub.next();
    expect(firstEvent.value?.payload?.$case).toBe("task");
    expect((firstEvent.value?.payload?.value as Task | undefined)?.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    approve(task.id);
    const rest: StreamResponse[] = [];
    for await (const e of resub) rest.push(e);
    const states = rest.flatMap((e) => (e.payload?.$case === "statusUpdate" ? [e.payload.value.status?.state] : []));
    expect(states).toContain(TaskState.TASK_STATE_WORKING);
    expect(states.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED);

    // the other replica, which never watched it, answers with the finished task
    const onBTask = await poll(
      async () => {
        const t = await onB.getTask({ tenant: "", id: task.id });
        return t.status?.state === TaskState.TASK_STATE_COMPLETED ? t : undefined;
      },
      { timeoutMs: 10_000, what: "replica B to see the task completed" },
    );
    expect(answer(onBTask)).toBe("The tool said approved.");
    // and the task is stored completed in the bucket every replica reads
    const nc = await connect({ servers: rig.nats.url });
    const kv = await new Kvm(nc).open(tasksBucket(rig.cluster));
    expect((await kv.get(taskKey("test", task.id)))?.json<{ task: { status: { state: string } } }>().task.status.state).toBe("TASK_STATE_COMPLETED");
    await nc.close();
  }, 90_000);

  it("a2a - raw JSON-RPC: v1.0 and v0.3 method names, the directory, and bad requests get JSON-RPC errors", async () => {
    await using rig = await startGatewayRig({ handler, keys: { narrow: ["coordinator"] } });
    const rpc = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
      const r = await fetch(`${rig.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json", ...headers },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      return { status: r.status, body: (await r.json()) as Record<string, any> };
    };
    const v1 = { "A2A-Version": "1.0" };
    const sent = await rpc(
      "/agents/helper/a2a/jsonrpc",
      { jsonrpc: "2.0", id: 1, method: "SendMessage", params: { message: { messageId: "m1", role: "ROLE_USER", parts: [{ text: "hi there" }] } } },
      v1,
    );
    expect(sent.status).toBe(200);
    expect(sent.body.result.task.status.state).toBe("TASK_STATE_COMPLETED");
    expect(sent.body.result.task.artifacts[0].parts[0].text).toBe("echo: hi there");
    const id = sent.body.result.task.id as string;
    const got = await rpc("/agents/helper/a2a/jsonrpc", { jsonrpc: "2.0", id: 2, method: "GetTask", params: { id } }, v1);
    expect(got.body.result.id).toBe(id);

    // v0.3 (no A2A-Version header): message/send and tasks/get, v0.3 shapes
    const legacy = await rpc("/agents/helper/a2a/jsonrpc", {
      jsonrpc: "2.0",
      id: 3,
      method: "message/send",
      params: { message: { kind: "message", messageId: "m2", role: "user", parts: [{ kind: "text", text: "old client" }] } },
    });
    expect(legacy.body.result).toMatchObject({ kind: "task", status: { state: "completed" } });
    expect(legacy.body.result.artifacts[0].parts[0]).toMatchObject({ kind: "text", text: "echo: old client" });
    const legacyGet = await rpc("/agents/helper/a2a/jsonrpc", { jsonrpc: "2.0", id: 4, method: "tasks/get", params: { id: legacy.body.result.id } });
    expect(legacyGet.body.result).toMatchObject({ kind: "task", id: legacy.body.result.id, status: { state: "completed" } });

    // the shared endpoint routes by metadata.agent
    const shared = await rpc(
      "/a2a/jsonrpc",
      {
        jsonrpc: "2.0",
        id: 5,
        method: "SendMessage",
        params: { message: { messageId: "m3", role: "ROLE_USER", parts: [{ text: "via directory" }], metadata: { agent: "helper" } } },
      },
      v1,
    );
    expect(shared.body.result.task.artifacts[0].parts[0].text).toBe("echo: via directory");
    const noAgent = await rpc(
      "/a2a/jsonrpc",
      { jsonrpc: "2.0", id: 6, method: "SendMessage", params: { message: { messageId: "m4", role: "ROLE_USER", parts: [{ text: "x" }] } } },
      v1,
    );
    expect(noAgent.body.error.message).toContain("metadata.agent");

    // directory card and listing
    const dir = await fetch(`${rig.url}/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.key}`, ...v1 } });
    expect(dir.status).toBe(200);
    expect(((await dir.json()) as { skills: Array<{ id: string }> }).skills.map((s) => s.id).sort()).toEqual(["coordinator", "helper"]);
    const listing = await fetch(`${rig.url}/agents`, { headers: { authorization: `Bearer ${rig.keys.narrow}` } });
    expect(((await listing.json()) as { agents: Array<{ id: string }> }).agents.map((a) => a.id)).toEqual(["coordinator"]);

    // bad requests
    const malformed = await rpc("/agents/helper/a2a/jsonrpc", "{oops", v1);
    expect(malformed.body.error.code).toBe(-32700);
    const unknownMethod = await rpc("/agents/helper/a2a/jsonrpc", { jsonrpc: "2.0", id: 7, method: "NoSuchMethod", params: {} }, v1);
    expect(unknownMethod.body.error.code).toBe(-32601);
    const notRpc = await rpc("/agents/helper/a2a/jsonrpc", { hello: "world" }, v1);
    // the SDK answers a request that is not JSON-RPC as malformed (-32602), naming it
    expect(notRpc.body.error).toMatchObject({ code: -32602, message: expect.stringContaining("Invalid JSON-RPC") });
    const noTask = await rpc("/agents/helper/a2a/jsonrpc", { jsonrpc: "2.0", id: 8, method: "GetTask", params: { id: "no-such-task" } }, v1);
    expect(noTask.body.error.code).toBe(-32001);
    const unknownAgent = await fetch(`${rig.url}/agents/nobody/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.key}` } });
    expect(unknownAgent.status).toBe(404);
    expect(await unknownAgent.json()).toMatchObject({ error: { code: "UNKNOWN_AGENT" } });
    const forbidden = await fetch(`${rig.url}/agents/helper/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.keys.narrow}` } });
    expect(forbidden.status).toBe(403);
    const noKey = await fetch(`${rig.url}/agents/helper/.well-known/agent-card.json`);
    expect(noKey.status).toBe(401);
    const huge = await rpc(
      "/agents/helper/a2a/jsonrpc",
      {
        jsonrpc: "2.0",
        id: 9,
        method: "SendMessage",
        params: { message: { messageId: "m5", role: "ROLE_USER", parts: [{ text: "x".repeat(2 * 1024 * 1024) }] } },
      },
      v1,
    );
    expect(huge.status).toBe(413);
    expect(huge.body.error.code).toBe(-32600);
  }, 90_000);

  it("a2a - a contextId is per key: two keys sending in the same context do not share the agent's memory of it", async () => {
    await using rig = await startGatewayRig({ handler, keys: { other: undefined } });
    const send = async (key: string, text: string) => {
      const r = await fetch(`${rig.url}/agents/helper/a2a/jsonrpc`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "A2A-Version": "1.0" },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "SendMessage",
          params: { message: { messageId: randomUUID(), contextId: "shared-context", role: "ROLE_USER", parts: [{ text }] } },
        }),
      });
      const body = (await r.json()) as { result: { task: Task & { contextId: string } } };
      expect(body.result.task.status?.state).toBe("TASK_STATE_COMPLETED");
      // the client's context id comes back as it sent it
      expect(body.result.task.contextId).toBe("shared-context");
    };
    await send(rig.key, "key A's secret");
    await send(rig.keys.other!, "key B's question");
    await send(rig.key, "key A again");
    const promptOf = (text: string) => JSON.stringify(rig.model.requests.find((q) => q.lastMessage?.content === text)?.messages);
    expect(promptOf("key B's question")).not.toContain("key A's secret");
    // key A's own conversation goes on
    expect(promptOf("key A again")).toContain("key A's secret");
  }, 60_000);
});

async function startOtherKeyClient(rig: Awaited<ReturnType<typeof startGatewayRig>>): Promise<Client> {
  // a second key added to the cluster's bucket at run time, as `kova gateway keys add` does
  const { KeyAdmin } = await import("../../src/gateway/keys.js");
  const nc = await connect({ servers: rig.nats.url });
  const admin = await KeyAdmin.open(nc, rig.cluster);
  const { key } = await admin.add("other");
  await nc.close();
  return poll(() => clientFor(`${rig.url}/agents/helper/`, key), { timeoutMs: 5000, retryErrors: true, what: "the new key to be accepted" });
}
