import { afterAll, beforeAll, describe, expect, it } from "vitest";
import OpenAI from "openai";
import { connect } from "@nats-io/transport-node";
import { BucketNotFoundError, bucketName, listKvKeys } from "../../src/bus/index.js";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { streamText } from "../fixtures/gateway/openai-stream.js";
import { startGatewayRig, type GatewayRig } from "../fixtures/gateway/rig.js";
import { recordPublished } from "../fixtures/bus/published.js";
import { poll } from "../fixtures/poll.js";

// The model: a user message asking to add calls the `add` tool, a tool result is
// answered with the sum, anything else is echoed.
const handler: ScriptedHandler = (r) => {
  const last = r.lastMessage;
  if (last?.role === "tool") return scriptedReply.text(`The sum is ${String(last.content)}.`, { usage: { inputTokens: 30, outputTokens: 6 } });
  const text = String(last?.content ?? "");
  if (text.includes("hang")) return scriptedReply.text("far too late", { latencyMs: 120_000 });
  if (text.includes("add")) return scriptedReply.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { inputTokens: 20, outputTokens: 4 } });
  return scriptedReply.text(`echo: ${text} (history ${r.messages.length - 1})`, { usage: { inputTokens: 10, outputTokens: 5 } });
};

describe("gateway: OpenAI-compatible endpoint", () => {
  describe("one agent with a tool", () => {
    let rig: GatewayRig;
    let client: OpenAI;
    beforeAll(async () => {
      rig = await startGatewayRig({ handler, agents: ["helper"] });
      client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("openai - the openai client lists the agents as models", async () => {
      const models = await client.models.list();
      expect(models.data.map((m) => m.id).sort()).toEqual(["coordinator", "helper"]);
    });

    it("openai - a chat with an agent that uses a tool answers with its final text and the usage of both model calls; the tool call stays inside Kova", async () => {
      const done = await client.chat.completions.create({ model: "helper", messages: [{ role: "user", content: "please add 2 and 3" }] });
      expect(done.choices[0]?.message.content).toBe("The sum is 5.");
      expect(done.choices[0]?.finish_reason).toBe("stop");
      // usage is the agent's: both model calls of the run (the tool call and the answer)
      expect(done.usage).toMatchObject({ prompt_tokens: 50, completion_tokens: 10, total_tokens: 60 });
      // the model saw the tool result, the client only the answer
      const toolTurn = rig.model.requests.find((q) => q.lastMessage?.role === "tool");
      expect(toolTurn?.lastMessage?.content).toBe("5");
    }, 60_000);

    it("openai - a streamed chat arrives in more than one piece, then its finish reason and usage", async () => {
      const { pieces, text, usage, finish } = await streamText(
        await client.chat.completions.create({
          model: "helper",
          messages: [{ role: "user", content: "add them again" }],
          stream: true,
          stream_options: { include_usage: true },
        }),
      );
      expect(text).toBe("The sum is 5.");
      // tokens arrive as the model streams them
      expect(pieces.length).toBeGreaterThan(1);
      expect(finish).toBe("stop");
      expect(usage).toMatchObject({ prompt_tokens: 50, completion_tokens: 10 });
    }, 60_000);
  });

  it("openai - a session named by the user field keeps the conversation in the agent's memory", async () => {
    await using rig = await startGatewayRig({ handler });
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    const first = await client.chat.completions.create({ model: "helper", user: "conv-1", messages: [{ role: "user", content: "hello" }] });
    expect(first.choices[0]?.message.content).toBe("echo: hello (history 0)");
    const second = await client.chat.completions.create({
      model: "helper",
      user: "conv-1",
      messages: [
        { role: "user", content: "hello" },
        { role: "assistant", content: first.choices[0]!.message.content },
        { role: "user", content: "again" },
      ],
    });
    // the agent sent its memory of the session (2 messages) and the new message
    expect(second.choices[0]?.message.content).toBe("echo: again (history 2)");
    const raw = await fetch(`${rig.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json", "x-kova-session": "conv-1" },
      body: JSON.stringify({ model: "helper", messages: [{ role: "user", content: "third" }] }),
    });
    expect(raw.status).toBe(200);
    // the session id is scoped by the key (sessions are per key); sent back, it names the same session
    const sessionId = raw.headers.get("x-kova-session-id");
    expect(sessionId).toBe(`${rig.scope("test")}conv-1`);
    expect(((await raw.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content).toBe("echo: third (history 4)");
    const again = await client.chat.completions.create({ model: "helper", user: sessionId!, messages: [{ role: "user", content: "fourth" }] });
    expect(again.choices[0]?.message.content).toBe("echo: fourth (history 6)");
  }, 60_000);

  it("openai - a stateless call brings its conversation: the model sees each earlier turn in its role, and no session memory is written", async () => {
    await using rig = await startGatewayRig({ handler });
    const res = await fetch(`${rig.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "helper",
        messages: [
          { role: "developer", content: "Answer in French." },
          { role: "user", content: "hello" },
          { role: "assistant", content: "echo: hello" },
          { role: "tool", tool_call_id: "c1", content: "42" },
          { role: "user", content: [{ type: "text", text: "again" }] },
        ],
      }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content).toBe("echo: again (history 4)");
    const seen = rig.model.requests.at(-1)!.messages.map((m) => ({ role: m.role, content: m.content }));
    // after the agent's own system prompt (if it has one), the client's turns in their roles
    expect(seen.slice(-5)).toEqual([
      { role: "system", content: "Answer in French." },
      { role: "user", content: "hello" },
      { role: "assistant", content: "echo: hello" },
      { role: "user", content: "(tool) 42" },
      { role: "user", content: "again" },
    ]);
    // its session is its own run, and the agent kept no memory of it
    const runId = res.headers.get("x-kova-run-id")!;
    expect(res.headers.get("x-kova-session-id")).toBe(runId);
    const nc = await connect({ servers: rig.nats.url });
    await using _nc = defer(() => nc.close());
    const memory = await listKvKeys(nc, bucketName(rig.cluster, "agentMemory")).catch((err: unknown) => {
      if (err instanceof BucketNotFoundError) return [];
      throw err;
    });
    expect(memory.filter((k) => k.includes(runId))).toEqual([]);
  }, 60_000);

  it("openai - sessions are per key: the same user from two keys are two conversations, for an agent and for a template's instance", async () => {
    await using rig = await startGatewayRig({ handler, templates: ["support"], keys: { other: undefined } });
    const a = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    const b = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.keys.other!, maxRetries: 0 });
    const say = (client: OpenAI, model: string, content: string) =>
      client.chat.completions.create({ model, user: "alice", messages: [{ role: "user", content }] }).then((r) => r.choices[0]?.message.content);
    for (const model of ["helper", "support"]) {
      expect(await say(a, model, `key A's secret for ${model}`)).toBe(`echo: key A's secret for ${model} (history 0)`);
      // key B names the same session: its run starts a conversation of its own
      expect(await say(b, model, `key B asks ${model}`)).toBe(`echo: key B asks ${model} (history 0)`);
      const bRequest = rig.model.requests.find((q) => JSON.stringify(q.messages).includes(`key B asks ${model}`));
      expect(JSON.stringify(bRequest?.messages)).not.toContain("key A's secret");
      // and key A's conversation goes on where it was
      expect(await say(a, model, "go on")).toBe("echo: go on (history 2)");
    }
    // a template's instance per key and user
    const instances = rig.node.agents().map((x) => x.id);
    expect(instances).toContain(`support--${rig.scope("test")}alice`);
    expect(instances).toContain(`support--${rig.scope("other")}alice`);
  }, 60_000);

  describe("bad input and bad keys", () => {
    let rig: GatewayRig;
    let client: OpenAI;
    const post = (body: string, headers: Record<string, string> = {}) =>
      fetch(`${rig.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
    const good = JSON.stringify({ model: "helper", messages: [{ role: "user", content: "hi" }] });
    const auth = () => ({ authorization: `Bearer ${rig.key}` });
    beforeAll(async () => {
      rig = await startGatewayRig({ handler, keys: { narrow: ["coordinator"] }, gateway: { max_body_bytes: 4096 } });
      client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("openai - an unknown model is 404 naming it", async () => {
      const unknown = await client.chat.completions.create({ model: "nobody", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
      expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
      expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).message).toContain("nobody");
    });

    it("openai - no key is 401 UNAUTHORIZED with a Bearer challenge", async () => {
      const noKey = await post(good);
      expect(noKey.status).toBe(401);
      expect(noKey.headers.get("www-authenticate")).toContain("Bearer");
      expect(await noKey.json()).toMatchObject({ error: { code: "UNAUTHORIZED" } });
    });

    it("openai - a wrong key is 401, and the answer does not repeat it", async () => {
      const wrong = await post(good, { authorization: "Bearer kova_not-a-key" });
      expect(wrong.status).toBe(401);
      expect(await wrong.text()).not.toContain("kova_not-a-key");
    });

    it("openai - a key limited to some agents lists only those, and another agent is 404 for it, never 403", async () => {
      const narrow = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.keys.narrow!, maxRetries: 0 });
      expect((await narrow.models.list()).data.map((m) => m.id)).toEqual(["coordinator"]);
      const forbidden = await narrow.chat.completions.create({ model: "helper", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
      expect(forbidden).toBeInstanceOf(OpenAI.NotFoundError);
    });

    it("openai - a body that is no JSON is 400 BAD_REQUEST", async () => {
      const malformed = await post("{not json", auth());
      expect(malformed.status).toBe(400);
      expect(await malformed.json()).toMatchObject({ error: { code: "BAD_REQUEST" } });
    });

    it("openai - a chat without messages is 400 naming messages", async () => {
      const noMessages = await post(JSON.stringify({ model: "helper", messages: [] }), auth());
      expect(noMessages.status).toBe(400);
      expect(await noMessages.json()).toMatchObject({ error: { message: expect.stringContaining("messages") } });
    });

    it("openai - a body over max_body_bytes is 413 BODY_TOO_LARGE", async () => {
      const big = await post(JSON.stringify({ model: "helper", messages: [{ role: "user", content: "x".repeat(10_000) }] }), auth());
      expect(big.status).toBe(413);
      expect(await big.json()).toMatchObject({ error: { code: "BODY_TOO_LARGE" } });
    });
  });

  describe("template instances", () => {
    let rig: GatewayRig;
    let client: OpenAI;
    const chat = (model: string, content: string, user?: string) =>
      client.chat.completions.create({ model, messages: [{ role: "user", content }], ...(user ? { user } : {}) }).then((r) => r.choices[0]?.message.content);
    beforeAll(async () => {
      rig = await startGatewayRig({ handler, agents: [], templates: ["support"], keys: { scoped: ["support"] } });
      client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    }, 60_000);
    afterAll(() => rig?.[Symbol.asyncDispose]());

    it("openai - model = support with a user addresses that session's instance (activated on first use), which keeps the conversation", async () => {
      expect(await chat("support", "hello", "user-42")).toBe("echo: hello (history 0)");
      // The instance's key is the session id, scoped by the API key (sessions are per key).
      const instance = `support--${rig.scope("test")}user-42`;
      expect(rig.node.agents().map((a) => a.id)).toContain(instance);
      expect(await chat("support", "again", "user-42")).toBe("echo: again (history 2)");
      // The instance by its id, same session: the same memory.
      expect(await chat(instance, "third", "user-42")).toBe("echo: third (history 4)");
    }, 60_000);

    it("openai - model = support--<key> activates that instance, with a memory of its own", async () => {
      expect(await chat("support--user-7", "hi", "user-43")).toBe("echo: hi (history 0)");
      expect(await chat("support--user-7", "and", "user-43")).toBe("echo: and (history 2)");
      expect(await chat("support--user-8", "hi", "user-43")).toBe("echo: hi (history 0)");
    }, 60_000);

    it("openai - a template name without a session, or a template nobody defined, is 404 naming the templates", async () => {
      expect(await chat("support", "hi").catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
      const nosuch = await chat("nosuch--x", "hi").catch((e: unknown) => e);
      expect(nosuch).toBeInstanceOf(OpenAI.NotFoundError);
      expect((nosuch as Error).message).toContain("templates: eval, eval-subject, support");
    });

    it("openai - a key scoped to the template uses and lists only its own instances, and no other agent", async () => {
      // The instance it names is its own (support--<its scope>user-9): the admin key's are not its to see.
      const scoped = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.keys.scoped!, maxRetries: 0 });
      const viaScoped = await scoped.chat.completions.create({ model: "support--user-9", messages: [{ role: "user", content: "yo" }] });
      expect(viaScoped.choices[0]?.message.content).toBe("echo: yo (history 0)");
      expect(viaScoped.model).toBe(`support--${rig.scope("scoped")}user-9`);
      expect((await scoped.models.list()).data.map((m) => m.id).sort()).toEqual([`support--${rig.scope("scoped")}user-9`]);
      const denied = await scoped.chat.completions.create({ model: "coordinator", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
      expect(denied).toBeInstanceOf(OpenAI.NotFoundError);
    }, 60_000);

    it("openai - the A2A card of a never-addressed instance is served (the instance activated); of an unknown template, 404", async () => {
      const card = await fetch(`${rig.url}/agents/support--card-1/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.key}` } });
      expect(card.status).toBe(200);
      expect(await card.json()).toMatchObject({ name: "support--card-1" });
      const noCard = await fetch(`${rig.url}/agents/nosuch--x/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.key}` } });
      expect(noCard.status).toBe(404);
    }, 60_000);
  });

  it("openai - a key over its rate gets 429 with Retry-After", async () => {
    await using rig = await startGatewayRig({ handler, gateway: { rate_per_minute: 3 } });
    const get = () => fetch(`${rig.url}/v1/models`, { headers: { authorization: `Bearer ${rig.key}` } });
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await get()).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const limited = await get();
    expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await limited.json()).toMatchObject({ error: { code: "RATE_LIMITED" } });
  }, 60_000);

  it("openai - a run past task_timeout_ms answers 504 TIMEOUT and is interrupted (by its message id), so the agent answers the next request at once", async () => {
    await using rig = await startGatewayRig({ handler, gateway: { task_timeout_ms: 1500 } });
    // watch the interrupts the gateway sends to the nodes
    const nc = await connect({ servers: rig.nats.url });
    await using _nc = defer(() => nc.close());
    const signals: Array<Record<string, unknown>> = [];
    const sub = nc.subscribe(`kova.${rig.cluster}.node.*.signal`, {
      callback: (_e, m) => {
        signals.push(m.json());
      },
    });
    await using _sub = defer(() => sub.unsubscribe());
    const post = (content: string) =>
      fetch(`${rig.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "helper", messages: [{ role: "user", content }] }),
      });

    const hung = await post("please hang");
    expect(hung.status).toBe(504);
    expect(await hung.json()).toMatchObject({ error: { code: "TIMEOUT", type: "server_error" } });
    await poll(() => signals.length > 0, { timeoutMs: 5000, what: "the gateway's interrupt" });
    expect(signals[0]).toMatchObject({ actorId: "helper", signal: "interrupt", messageId: expect.any(String) });

    // the hung run was cut: the next request is answered (were the agent still in the hung
    // run, it would wait out task_timeout_ms and get a 504 as well)
    const next = await post("hello");
    expect(next.status).toBe(200);
    expect(((await next.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content).toBe("echo: hello (history 0)");
  }, 60_000);
  it("openai - streamed and plain chats leave no consumer on the EVENTS stream once answered (each follower deletes its own)", async () => {
    await using rig = await startGatewayRig({ handler, agents: ["helper"] });
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    const bus = rig.node.busClient;
    const consumers = async () => (await bus.jsm.streams.info(bus.subjects.streams.events)).state.consumer_count;
    const baseline = await consumers();
    for (let i = 0; i < 4; i++) {
      const stream = await client.chat.completions.create({ model: "helper", messages: [{ role: "user", content: `hello ${i}` }], stream: true });
      for await (const _ of stream);
      await client.chat.completions.create({ model: "helper", messages: [{ role: "user", content: `again ${i}` }] });
    }
    await poll(async () => (await consumers()) === baseline, { timeoutMs: 5_000, what: () => `the followers' consumers deleted (baseline ${baseline})` });
  }, 60_000);

  it("openai - each chat is for an end user: the user field scoped by the key, else the key; a session's max_tokens reaches the agent", async () => {
    await using rig = await startGatewayRig({ handler, agents: ["helper"] });
    using published = await recordPublished(rig.node.busClient, ["helper"]);
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    const asked = async (body: Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, "model" | "messages">) => {
      const before = published.to("helper").length;
      await client.chat.completions.create({ model: "helper", messages: [{ role: "user", content: "hello" }], ...body });
      return poll(() => published.to("helper")[before]?.payload as { constraints?: Record<string, unknown> } | undefined, {
        timeoutMs: 5000,
        what: "the run's message",
      });
    };
    // The user field names the session and the end user, both under the key's prefix.
    const alice = await asked({ user: "alice", max_tokens: 40 });
    expect(alice.constraints).toEqual({ max_tokens: 40, user: `${rig.scope("test")}alice` });
    // No user field: the key (its owner scope, not its name) is the user (a stateless task).
    expect((await asked({})).constraints).toEqual({ user: rig.scope("test").slice(0, -1) });
  });
});
