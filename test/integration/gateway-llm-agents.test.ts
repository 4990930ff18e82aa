import { describe, expect, it } from "vitest";
import OpenAI from "openai";
import { TaskState, type Task } from "@a2a-js/sdk";
import { connect } from "@nats-io/transport-node";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { answer, answerChunks, clientFor, collect, foldedAnswer, message } from "../fixtures/gateway/a2a-client.js";
import { streamText } from "../fixtures/gateway/openai-stream.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

/**
 * The gateway in front of real LLM agents of the agents layer (`[[agents]]` with a built-in
 * tool), not the contract agents of the other gateway tests: what the OpenAI and A2A clients
 * get is what an agent's decision loop, model client and tools do.
 */

const STORY = "Once upon a time there was a cat.";

/**
 * The model: "multiply" calls the calculator, its result is answered in words; "story"
 * streams STORY, but the first attempt of each story prompt is cut after two words (the
 * connection dropped), and a prompt with "retold" gets another story on the retry.
 */
function model(): ScriptedHandler {
  const attempts = new Map<string, number>();
  return (r) => {
    const last = r.lastMessage;
    if (last?.role === "tool") {
      const { result } = JSON.parse(String(last.content)) as { result: number };
      // chunks apart in time, so a streamed answer reaches the client in several pieces (tokens
      // that arrive together go out as one delta)
      return scriptedReply.text(`Six times seven is ${result}.`, { usage: { inputTokens: 30, outputTokens: 6 }, chunkDelayMs: 15 });
    }
    const text = String(last?.content ?? "");
    if (text.includes("multiply"))
      return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "6 * 7" } }], { usage: { inputTokens: 20, outputTokens: 4 } });
    if (text.includes("story")) {
      const n = (attempts.get(text) ?? 0) + 1;
      attempts.set(text, n);
      // chunk 0 carries the role; "Once", " upon" follow; then the connection is cut
      if (n === 1) return scriptedReply.drop(3, scriptedReply.text(STORY));
      return scriptedReply.text(text.includes("retold") ? "A dog lived by the sea." : STORY, { usage: { inputTokens: 10, outputTokens: 8 } });
    }
    return scriptedReply.text(`echo: ${text}`);
  };
}

describe("gateway: real LLM agents", () => {
  it("llm agents - an [[agents]] agent with the calculator answers the openai client (plain and streamed) and A2A SendMessage: the model sees the tool result, the client only the answer, usage covers both model calls", async () => {
    await using rig = await startGatewayRig({ handler: model(), agents: [], llmAgents: [{ id: "calc", tools: ["calculator"] }] });
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toContain("calc");

    const done = await client.chat.completions.create({ model: "calc", messages: [{ role: "user", content: "multiply 6 by 7" }] });
    expect(done.choices[0]?.message).toMatchObject({ role: "assistant", content: "Six times seven is 42." });
    expect(done.choices[0]?.message.tool_calls).toBeUndefined();
    expect(done.usage).toMatchObject({ prompt_tokens: 50, completion_tokens: 10, total_tokens: 60 });
    // the calculator ran inside Kova: the model's second call saw its result
    const toolTurns = rig.model.requests.filter((q) => q.lastMessage?.role === "tool");
    expect(toolTurns).toHaveLength(1);
    expect(JSON.parse(String(toolTurns[0]!.lastMessage!.content))).toMatchObject({ expression: "6 * 7", result: 42 });
    // the agent's own system prompt came first, the client's message after it
    expect(toolTurns[0]!.messages[0]).toMatchObject({ role: "system", content: "You help." });

    const streamed = await streamText(
      await client.chat.completions.create({
        model: "calc",
        messages: [{ role: "user", content: "multiply them once more" }],
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    expect(streamed.text).toBe("Six times seven is 42.");
    expect(streamed.pieces.length).toBeGreaterThan(1);
    expect(streamed.finish).toBe("stop");
    expect(streamed.usage).toMatchObject({ prompt_tokens: 50, completion_tokens: 10 });

    const a2a = await clientFor(`${rig.url}/agents/calc/`, rig.key);
    const task = (await a2a.sendMessage(message("please multiply 6 and 7"))) as Task;
    expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answer(task)).toBe("Six times seven is 42.");
    expect(task.metadata?.kova).toMatchObject({ agentId: "calc", usage: { inputTokens: 50, outputTokens: 10 } });
    expect(rig.model.requests.filter((q) => q.lastMessage?.role === "tool")).toHaveLength(3);
  }, 90_000);

  it("llm agents - a named session the agent has no memory of starts with the client's conversation (its system prompt and earlier turns); once the agent remembers the session, its memory is used, not the client's copy", async () => {
    await using rig = await startGatewayRig({ handler: model(), agents: [], llmAgents: [{ id: "teller" }] });
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    const earlier = [
      { role: "system" as const, content: "Answer in French." },
      { role: "user" as const, content: "my name is Ana" },
      { role: "assistant" as const, content: "noted" },
    ];
    const first = await client.chat.completions.create({
      model: "teller",
      user: "resumed",
      messages: [...earlier, { role: "user", content: "what is my name?" }],
    });
    expect(first.choices[0]?.message.content).toBe("echo: what is my name?");
    const seen = (text: string) => rig.model.requests.find((q) => q.lastMessage?.content === text)!.messages.map((m) => ({ role: m.role, content: m.content }));
    // after the agent's own system prompt, the client's turns in their roles
    expect(seen("what is my name?")).toEqual([{ role: "system", content: "You help." }, ...earlier, { role: "user", content: "what is my name?" }]);

    // the agent now remembers the session: a client's different copy of it is not used, nor repeated
    await client.chat.completions.create({
      model: "teller",
      user: "resumed",
      messages: [
        { role: "user", content: "a turn that never happened" },
        { role: "assistant", content: "?" },
        { role: "user", content: "and again?" },
      ],
    });
    expect(seen("and again?")).toEqual([
      { role: "system", content: "You help." },
      ...earlier,
      { role: "user", content: "what is my name?" },
      { role: "assistant", content: "echo: what is my name?" },
      { role: "user", content: "and again?" },
    ]);
  }, 90_000);

  it("llm agents - a model stream cut mid-answer and retried: the openai client's streamed text and the A2A stream's folded answer are the answer, not the cut attempt plus the retry", async () => {
    await using rig = await startGatewayRig({ handler: model(), agents: [], llmAgents: [{ id: "teller" }] });
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });

    const streamed = await streamText(
      await client.chat.completions.create({ model: "teller", messages: [{ role: "user", content: "a story" }], stream: true }),
    );
    // the cut attempt was streamed, then retried
    expect(rig.model.requests.filter((q) => q.lastMessage?.content === "a story").map((q) => q.outcome)).toEqual(["drop", "completion"]);
    expect(streamed.text).toBe(STORY);
    expect(streamed.finish).toBe("stop");

    const a2a = await clientFor(`${rig.url}/agents/teller/`, rig.key);
    const events = await collect(a2a.sendMessageStream(message("another story")));
    expect(rig.model.requests.filter((q) => q.lastMessage?.content === "another story").map((q) => q.outcome)).toEqual(["drop", "completion"]);
    // the retry replaced the partial answer (a non-append update after the first chunk)
    expect(
      answerChunks(events)
        .slice(1)
        .some((c) => !c.append),
    ).toBe(true);
    expect(foldedAnswer(events)).toBe(STORY);
    const final = events.flatMap((e) => (e.payload?.$case === "artifactUpdate" && e.payload.value.lastChunk ? [e.payload.value] : []));
    expect(final.map((c) => answer({ artifacts: c.artifact ? [c.artifact] : [] }))).toEqual([STORY]);
  }, 90_000);

  it("llm agents - a retried model stream that answers otherwise than what was streamed: the openai client gets a STREAM_DIVERGED error, not a garbled answer; the A2A stream gets the retry's answer", async () => {
    await using rig = await startGatewayRig({ handler: model(), agents: [], llmAgents: [{ id: "teller" }] });
    const client = new OpenAI({ baseURL: `${rig.url}/v1`, apiKey: rig.key, maxRetries: 0 });
    const nc = await connect({ servers: rig.nats.url });
    await using _nc = defer(() => nc.close());
    const signals: Array<Record<string, unknown>> = [];
    const sub = nc.subscribe(`kova.${rig.cluster}.node.*.signal`, { callback: (_e, m) => void signals.push(m.json()) });
    await using _sub = defer(() => sub.unsubscribe());

    const failed = await streamText(
      await client.chat.completions.create({ model: "teller", messages: [{ role: "user", content: "a story retold" }], stream: true }),
    ).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(OpenAI.APIError);
    expect(failed).toMatchObject({ code: "STREAM_DIVERGED", message: expect.stringContaining("send the request again") });
    // nobody reads that run's answer: the gateway interrupts it
    await poll(() => signals.some((m) => m.actorId === "teller" && m.signal === "interrupt"), { timeoutMs: 10_000, what: "the interrupt of the diverged run" });

    const a2a = await clientFor(`${rig.url}/agents/teller/`, rig.key);
    const events = await collect(a2a.sendMessageStream(message("another story retold")));
    expect(foldedAnswer(events)).toBe("A dog lived by the sea.");
    const last = events.at(-1)?.payload;
    expect(last?.$case === "statusUpdate" && last.value.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
  }, 90_000);
});
