import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { SendMessageRequest, TaskState, type StreamResponse, type Task } from "@a2a-js/sdk";
import type { Client } from "@a2a-js/sdk/client";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { taskKey } from "../../src/gateway/task-store.js";
import { FOLLOW_AFTER_MS } from "../../src/gateway/task-tracker.js";
import { principalOf } from "../../src/gateway/auth.js";
import { hashKey } from "../../src/gateway/keys.js";
import { type KovaEvent, bucketName } from "../../src/bus/index.js";
import { defer } from "../fixtures/disposable.js";
import { approve } from "../fixtures/gateway/agents.js";
import { answer, answerChunks, clientFor, collect, message, sseData } from "../fixtures/gateway/a2a-client.js";
import { startGatewayRig, type GatewayRig } from "../fixtures/gateway/rig.js";
import { recordPublished } from "../fixtures/bus/published.js";
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

describe("gateway: A2A v1.0", () => {
  describe("the SDK's client", () => {
    let rig: GatewayRig;
    let client: Client;
    beforeAll(async () => {
      rig = await startGatewayRig({ handler, keys: { lister: undefined } });
      client = await clientFor(`${rig.url}/agents/helper/`, rig.key);
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("a2a - the client discovers the agent's card: skills, streaming, bearer auth, protocol versions 0.3 and 1.0", async () => {
      const card = await client.getAgentCard();
      expect(card.name).toBe("helper");
      expect(card.skills.map((s) => s.id)).toEqual(["chat", "math"]);
      expect(card.capabilities?.streaming).toBe(true);
      expect(Object.values(card.securitySchemes)[0]?.scheme).toMatchObject({ $case: "httpAuthSecurityScheme", value: { scheme: "bearer" } });
      expect(card.supportedInterfaces.map((i) => i.protocolVersion).sort()).toEqual(["0.3", "1.0"]);
    });

    it("a2a - a blocking send to an agent that uses a tool comes back completed with the answer and the run's usage", async () => {
      const sent = (await client.sendMessage(message("please add 2 and 3"))) as Task;
      expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(answer(sent)).toBe("The tool said 5.");
      expect(sent.metadata?.kova).toMatchObject({ agentId: "helper", usage: { inputTokens: 50, outputTokens: 10 } });
    }, 60_000);

    it("a2a - a blocking send answered within FOLLOW_AFTER_MS reads no events (no consumer on EVENTS) and writes its task twice: submitted, then completed", async () => {
      const nc = await connect({ servers: rig.nats.url });
      await using _nc = defer(() => nc.close());
      const seen: string[] = [];
      const subs = ["$JS.API.CONSUMER.>", `$KV.${bucketName(rig.cluster, "gatewayTasks")}.>`].map((subject) =>
        nc.subscribe(subject, { callback: (_e, m) => void seen.push(m.subject) }),
      );
      await nc.flush();
      const sent = (await client.sendMessage(message("a quick one"))) as Task;
      expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(answer(sent)).toBe("echo: a quick one");
      expect(sent.metadata?.kova).toMatchObject({ usage: { inputTokens: 10, outputTokens: 5 } });
      // the task's final save is on its way when the answer is: wait for it, then for anything later
      await poll(() => seen.filter((s) => s.endsWith(`.${sent.id}`)).length >= 2, { timeoutMs: 5000, what: "the task's two saves" });
      await new Promise((r) => setTimeout(r, FOLLOW_AFTER_MS + 200));
      await nc.flush();
      for (const s of subs) s.unsubscribe();
      const events = rig.node.busClient.subjects.streams.events;
      expect(seen.filter((s) => s.includes(`.${events}`))).toEqual([]);
      expect(seen.filter((s) => s.endsWith(`.${sent.id}`))).toHaveLength(2);
      const got = await client.getTask({ tenant: "", id: sent.id });
      expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(answer(got)).toBe("echo: a quick one");
    }, 60_000);

    it("a2a - a blocking send whose run waits for an approval comes back input_required (its events followed once the run takes FOLLOW_AFTER_MS); approved, GetTask reads it completed", async () => {
      const waiting = (await client.sendMessage(message("this needs approval too"))) as Task;
      expect(waiting.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
      approve(waiting.id);
      const done = await poll(
        async () => {
          const t = await client.getTask({ tenant: "", id: waiting.id });
          return t.status?.state === TaskState.TASK_STATE_COMPLETED ? t : undefined;
        },
        { timeoutMs: 10_000, what: "the approved task to complete" },
      );
      expect(answer(done)).toBe("The tool said approved.");
    }, 60_000);

    it("a2a - a streamed send gives the task, working, token chunks appended to one artifact, then completed; GetTask reads it back", async () => {
      const events = await collect(client.sendMessageStream(message("add once more")));
      expect(events[0]?.payload?.$case).toBe("task");
      const states = events.flatMap((e) => (e.payload?.$case === "statusUpdate" ? [e.payload.value.status?.state] : []));
      expect(states[0]).toBe(TaskState.TASK_STATE_WORKING);
      expect(states.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED);
      const chunks = answerChunks(events);
      expect(chunks.length).toBeGreaterThan(1);
      expect(chunks[0]?.append).toBe(false);
      expect(chunks.slice(1).every((c) => c.append)).toBe(true);
      expect(chunks.map((c) => answer({ artifacts: c.artifact ? [c.artifact] : [] })).join("")).toBe("The tool said 5.");
      const streamedTask = (events[0]!.payload as { value: Task }).value;
      const got = await client.getTask({ tenant: "", id: streamedTask.id, historyLength: undefined });
      expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(answer(got)).toBe("The tool said 5.");
      expect(got.history[0]?.parts[0]?.content).toEqual({ $case: "text", value: "add once more" });
    }, 60_000);

    it("a2a - ListTasks lists the tasks of the caller's key", async () => {
      const lister = await clientFor(`${rig.url}/agents/helper/`, rig.keys.lister!);
      const mine = [(await lister.sendMessage(message("one"))) as Task, (await lister.sendMessage(message("two"))) as Task];
      const listed = await lister.listTasks({
        tenant: "",
        contextId: "",
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageToken: "",
        statusTimestampAfter: undefined,
        pageSize: 10,
      });
      expect(listed.tasks.map((t) => t.id).sort()).toEqual(mine.map((t) => t.id).sort());
      expect(listed.totalSize).toBe(2);
    }, 60_000);

    it("a2a - CancelTask interrupts a run whose model call hangs: the task is canceled and the model call aborted", async () => {
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
    }, 60_000);

    it("a2a - a finished task cannot be cancelled, and another key does not see it", async () => {
      const sent = (await client.sendMessage(message("hello"))) as Task;
      expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      await expect(client.cancelTask({ tenant: "", id: sent.id, metadata: {} })).rejects.toThrow(/ended|cancel/i);
      const other = await startOtherKeyClient(rig);
      await expect(other.getTask({ tenant: "", id: sent.id })).rejects.toThrow(/not found/i);
    }, 60_000);
  });

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
    const kv = await new Kvm(nc).open(bucketName(rig.cluster, "gatewayTasks"));
    expect(
      (await kv.get(taskKey(principalOf({ name: "test", hash: hashKey(rig.key) }).id, task.id)))?.json<{ task: { status: { state: string } } }>().task.status
        .state,
    ).toBe("TASK_STATE_COMPLETED");
    await nc.close();
  }, 90_000);

  describe("raw JSON-RPC", () => {
    let rig: GatewayRig;
    const v1 = { "A2A-Version": "1.0" };
    const rpc = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
      const r = await fetch(`${rig.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json", ...headers },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      return { status: r.status, body: (await r.json()) as Record<string, any> };
    };
    const card = (agent: string, key?: string) =>
      fetch(`${rig.url}/agents/${agent}/.well-known/agent-card.json`, key === undefined ? {} : { headers: { authorization: `Bearer ${key}` } });
    beforeAll(async () => {
      rig = await startGatewayRig({ handler, keys: { narrow: ["coordinator"] } });
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("a2a - v1.0 method names: SendMessage completes the task with the answer, GetTask reads it", async () => {
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
    }, 60_000);

    it("a2a - without the A2A-Version header, v0.3 names and shapes: message/send and tasks/get", async () => {
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
    }, 60_000);

    it("a2a - the shared endpoint routes by metadata.agent, and a message without it is an error naming metadata.agent", async () => {
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
    }, 60_000);

    it("a2a - the directory card has a skill per agent; the agent listing holds only what the key may use", async () => {
      const dir = await fetch(`${rig.url}/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.key}`, ...v1 } });
      expect(dir.status).toBe(200);
      expect(((await dir.json()) as { skills: Array<{ id: string }> }).skills.map((s) => s.id).sort()).toEqual(["coordinator", "helper"]);
      const listing = await fetch(`${rig.url}/agents`, { headers: { authorization: `Bearer ${rig.keys.narrow}` } });
      expect(((await listing.json()) as { agents: Array<{ id: string }> }).agents.map((a) => a.id)).toEqual(["coordinator"]);
    });

    it("a2a - malformed JSON, an unknown method and a body that is no JSON-RPC get JSON-RPC errors -32700, -32601, -32602", async () => {
      expect((await rpc("/agents/helper/a2a/jsonrpc", "{oops", v1)).body.error.code).toBe(-32700);
      expect((await rpc("/agents/helper/a2a/jsonrpc", { jsonrpc: "2.0", id: 7, method: "NoSuchMethod", params: {} }, v1)).body.error.code).toBe(-32601);
      // the SDK answers a request that is not JSON-RPC as malformed (-32602), naming it
      const notRpc = await rpc("/agents/helper/a2a/jsonrpc", { hello: "world" }, v1);
      expect(notRpc.body.error).toMatchObject({ code: -32602, message: expect.stringContaining("Invalid JSON-RPC") });
    });

    it("a2a - GetTask of a task nobody has is -32001", async () => {
      const noTask = await rpc("/agents/helper/a2a/jsonrpc", { jsonrpc: "2.0", id: 8, method: "GetTask", params: { id: "no-such-task" } }, v1);
      expect(noTask.body.error.code).toBe(-32001);
    });

    it("a2a - the card of an unknown agent is 404 UNKNOWN_AGENT; of an agent the key may not use, the same 404, never 403; without a key, 401", async () => {
      const unknownAgent = await card("nobody", rig.key);
      expect(unknownAgent.status).toBe(404);
      expect(await unknownAgent.json()).toMatchObject({ error: { code: "UNKNOWN_AGENT" } });
      const forbidden = await card("helper", rig.keys.narrow!);
      expect(forbidden.status).toBe(404);
      const nobody = await card("nobody", rig.keys.narrow!);
      expect(JSON.stringify(await forbidden.json())).toBe(JSON.stringify(await nobody.json()).replaceAll("nobody", "helper"));
      expect((await card("helper")).status).toBe(401);
    });

    it("a2a - a request over the body limit is 413 with JSON-RPC error -32600", async () => {
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
    });
  });

  it("a2a - raw JSON-RPC with the v0.3 method names: message/stream streams the task, its updates and the answer; tasks/resubscribe follows a running task; tasks/cancel cancels it", async () => {
    await using rig = await startGatewayRig({ handler });
    // no A2A-Version header: the SDK's v0.3 compatibility layer serves the request
    const post = (body: unknown) =>
      fetch(`${rig.url}/agents/helper/a2a/jsonrpc`, {
        method: "POST",
        headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json", accept: "text/event-stream" },
        body: JSON.stringify(body),
      });
    const userMessage = (text: string) => ({ kind: "message", messageId: randomUUID(), role: "user", parts: [{ kind: "text", text }] });

    const streamed = await post({ jsonrpc: "2.0", id: 1, method: "message/stream", params: { message: userMessage("add in the old way") } });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get("content-type")).toContain("text/event-stream");
    const events: Array<Record<string, any>> = [];
    for await (const e of sseData(streamed)) events.push(e);
    expect(events.every((e) => e.jsonrpc === "2.0" && e.id === 1)).toBe(true);
    const results = events.map((e) => e.result);
    expect(results[0]).toMatchObject({ kind: "task", status: { state: "submitted" } });
    const kinds = new Set(results.map((r) => r.kind));
    expect([...kinds].sort()).toEqual(["artifact-update", "status-update", "task"]);
    expect(results.some((r) => r.kind === "status-update" && r.status.state === "working")).toBe(true);
    const lastArtifact = results.filter((r) => r.kind === "artifact-update").at(-1);
    expect(lastArtifact).toMatchObject({ lastChunk: true, artifact: { parts: [{ kind: "text", text: "The tool said 5." }] } });
    expect(results.at(-1)).toMatchObject({ kind: "status-update", status: { state: "completed" }, final: true });

    // a slow run, sent without blocking, then followed and cancelled with the v0.3 names
    const sent = await post({
      jsonrpc: "2.0",
      id: 2,
      method: "message/send",
      params: { message: userMessage("slow please"), configuration: { blocking: false } },
    });
    const task = ((await sent.json()) as { result: { kind: string; id: string } }).result;
    expect(task.kind).toBe("task");
    await poll(() => rig.model.requests.some((q) => q.lastMessage?.content === "slow please"), { timeoutMs: 10_000, what: "the slow model call to start" });
    const resubscribed = await post({ jsonrpc: "2.0", id: 3, method: "tasks/resubscribe", params: { id: task.id } });
    expect(resubscribed.status).toBe(200);
    const following = sseData(resubscribed);
    expect((await following.next()).value?.result).toMatchObject({ kind: "task", id: task.id, status: { state: "working" } });
    const cancelled = await post({ jsonrpc: "2.0", id: 4, method: "tasks/cancel", params: { id: task.id } });
    expect(((await cancelled.json()) as { result: unknown }).result).toMatchObject({ kind: "task", id: task.id, status: { state: "canceled" } });
    const rest: Array<Record<string, any>> = [];
    for await (const e of following) rest.push(e.result);
    expect(rest.at(-1)).toMatchObject({ kind: "status-update", taskId: task.id, status: { state: "canceled" }, final: true });
    // the cancel aborted the model call
    await poll(() => rig.model.requests.find((q) => q.lastMessage?.content === "slow please")?.clientClosed === true, {
      timeoutMs: 10_000,
      what: "the model call to be aborted",
    });
    // a finished task cannot be cancelled: a v0.3 JSON-RPC error
    const again = await post({ jsonrpc: "2.0", id: 5, method: "tasks/cancel", params: { id: results[0].id } });
    expect(((await again.json()) as { error: { code: number } }).error.code).toBe(-32002);
  }, 90_000);

  it("a2a - CancelTask of a task still queued behind the agent's other work: it ends canceled at once, and its run never calls the model", async () => {
    await using rig = await startGatewayRig({ handler });
    const bus = rig.node.busClient;
    const consumers = async () => (await bus.jsm.streams.info(bus.subjects.streams.events)).state.consumer_count;
    const baseline = await consumers();
    const client = await clientFor(`${rig.url}/agents/helper/`, rig.key);
    const later = (text: string) =>
      client.sendMessage(
        SendMessageRequest.fromJSON({ message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }] }, configuration: { returnImmediately: true } }),
      ) as Promise<Task>;
    // the agent is busy: its model call hangs
    const busy = await later("slow please");
    await poll(() => rig.model.requests.some((q) => q.lastMessage?.content === "slow please"), { timeoutMs: 10_000, what: "the busy model call to start" });
    // a second task queues behind it
    const queued = await later("queued hello");
    expect((await client.getTask({ tenant: "", id: queued.id })).status?.state).toBe(TaskState.TASK_STATE_SUBMITTED);

    const cancelled = await client.cancelTask({ tenant: "", id: queued.id, metadata: {} });
    expect(cancelled.status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    // the busy task was not touched by it
    expect((await client.getTask({ tenant: "", id: busy.id })).status?.state).toBe(TaskState.TASK_STATE_WORKING);
    expect(rig.model.requests.find((q) => q.lastMessage?.content === "slow please")?.clientClosed).toBe(false);

    // free the agent; a third task runs after the queued one's turn, so once it is answered
    // the queued message has had its turn
    await client.cancelTask({ tenant: "", id: busy.id, metadata: {} });
    const after = (await client.sendMessage(message("after hello"))) as Task;
    expect(answer(after)).toBe("echo: after hello");
    expect(rig.model.requests.some((q) => q.lastMessage?.content === "queued hello")).toBe(false);
    expect((await client.getTask({ tenant: "", id: queued.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    // the queued run's end (the agent's reply) stops the gateway following it
    await poll(async () => (await consumers()) === baseline, { timeoutMs: 10_000, what: () => `the followers' consumers deleted (baseline ${baseline})` });
  }, 90_000);

  it("a2a - a task canceled while queued whose agent then moves to a node that never heard of the cancel: its run is interrupted there as it starts", async () => {
    let busyCalls = 0;
    const moving: ScriptedHandler = (r) => {
      const text = String(r.lastMessage?.content ?? "");
      // the busy task hangs on its first node and is answered at once on the next
      if (text === "busy work") return ++busyCalls === 1 ? scriptedReply.text("too late", { latencyMs: 60_000 }) : scriptedReply.text("busy done");
      if (text === "queued hello") return scriptedReply.text("never read", { latencyMs: 60_000 });
      return scriptedReply.text(`echo: ${text}`);
    };
    // a real agent: its run publishes its end even when interrupted
    await using rig = await startGatewayRig({ handler: moving, agents: [], llmAgents: [{ id: "worker" }], drainTimeoutMs: 300 });
    // every run event, live
    const nc = await connect({ servers: rig.nats.url });
    await using _nc = defer(() => nc.close());
    const events: KovaEvent[] = [];
    const sub = nc.subscribe(`kova.${rig.cluster}.events.>`, { callback: (_e, m) => void events.push(m.json<KovaEvent>()) });
    await using _sub = defer(() => sub.unsubscribe());
    const client = await clientFor(`${rig.url}/agents/worker/`, rig.key);
    const later = (text: string) =>
      client.sendMessage(
        SendMessageRequest.fromJSON({ message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }] }, configuration: { returnImmediately: true } }),
      ) as Promise<Task>;
    await later("busy work");
    await poll(() => rig.model.requests.some((q) => q.lastMessage?.content === "busy work"), { timeoutMs: 10_000, what: "the busy model call to start" });
    const queued = await later("queued hello");
    expect((await client.cancelTask({ tenant: "", id: queued.id, metadata: {} })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);

    // the agent moves: n1, which holds the interrupt, stops (cutting the busy turn); n2 takes the agent and its mailbox over
    const n2 = await rig.addNode("n2");
    await rig.node.stop("test");
    await poll(() => n2.agents().some((a) => a.id === "worker"), { timeoutMs: 20_000, what: "worker to be hosted on n2" });
    // the queued message's turn starts on n2, and the gateway interrupts it there
    const end = await poll(() => events.find((e) => e.runId === queued.id && e.type === "run_stream_end"), {
      timeoutMs: 20_000,
      what: () => `the queued run to end on n2 (its events: ${events.filter((e) => e.runId === queued.id).map((e) => e.type)})`,
    });
    expect(end.data).toMatchObject({ status: "cancelled" });
    expect(events.filter((e) => e.runId === queued.id).map((e) => e.type)).toContain("run_started");
    // its model call was cut, not answered
    expect(rig.model.requests.filter((q) => q.lastMessage?.content === "queued hello").map((q) => q.outcome)).not.toContain("completion");
    expect((await client.getTask({ tenant: "", id: queued.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);
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

  it("a2a - a task is for its key's end user: the task_delegate names the key (its owner scope) in constraints.user (fair share, user_max_tokens)", async () => {
    await using rig = await startGatewayRig({ handler });
    using published = await recordPublished(rig.node.busClient, ["helper"]);
    const client = await clientFor(`${rig.url}/agents/helper/`, rig.key);
    const sent = (await client.sendMessage(message("hello"))) as Task;
    expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    const run = published.to("helper").find((e) => (e.payload as { runId?: string }).runId === sent.id);
    expect(run?.payload).toMatchObject({ constraints: { user: rig.scope("test").slice(0, -1) } });
  });
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
