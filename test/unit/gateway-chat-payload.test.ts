import type { Request } from "express";
import { describe, expect, it } from "vitest";
import { MAX_HISTORY_TURNS, parseRunRequest } from "../../src/agents/protocol.js";
import { GatewayHttpError } from "../../src/gateway/errors.js";
import { chatRun } from "../../src/gateway/openai.js";
import { runPayload } from "../../src/gateway/runs.js";

/** A chat request as express hands it over: a parsed body and no headers. */
function requestOf(body: unknown): Request {
  return { body, header: () => undefined } as unknown as Request;
}

describe("gateway chat → agent payload (the contract between the OpenAI endpoint and an agent)", () => {
  it("openai - a stateless conversation reaches the agent as input plus history in roles, without a session; a named session sends only the last message", () => {
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "developer", content: "Answer in French." },
      { role: "user", content: "hi" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1" }] },
      { role: "tool", content: "42" },
      { role: "assistant", content: [{ type: "text", text: "noted" }] },
      { role: "user", content: "and now?" },
    ];
    const run = chatRun(requestOf({ model: "helper", messages }), 60_000);
    const parsed = parseRunRequest(run.kind, runPayload(run), Date.now());
    expect(parsed).toEqual({
      kind: "task",
      input: "and now?",
      runId: run.runId,
      history: [
        { role: "system", content: "Be brief." },
        { role: "system", content: "Answer in French." },
        { role: "user", content: "hi" },
        { role: "user", content: "(tool) 42" },
        { role: "assistant", content: "noted" },
      ],
    });
    // its session is its run: what the agent uses when no sessionId is sent
    expect(run.sessionId).toBe(run.runId);

    // one message: no history at all
    const single = chatRun(requestOf({ model: "helper", messages: [{ role: "user", content: "hello" }] }), 60_000);
    expect(parseRunRequest(single.kind, runPayload(single), Date.now())).toEqual({ kind: "task", input: "hello", runId: single.runId });

    // a prefilled answer after the last user message stays after it, in the input
    const prefilled = chatRun(requestOf({ model: "helper", messages: [...messages, { role: "assistant", content: "Bien sûr" }] }), 60_000);
    expect(parseRunRequest(prefilled.kind, runPayload(prefilled), Date.now()).input).toBe("and now?\n\nassistant: Bien sûr");

    // a named session: the agent's memory holds the earlier turns
    const named = chatRun(requestOf({ model: "helper", user: "conv-1", messages }), 60_000);
    const chat = parseRunRequest(named.kind, runPayload(named), Date.now());
    expect(chat).toMatchObject({ kind: "chat", input: "and now?", sessionId: named.sessionId });
    expect(chat.history).toBeUndefined();
  });

  it("openai - a stateless conversation with more earlier turns than an agent takes is refused with 400 naming messages, before any run", () => {
    const many = Array.from({ length: MAX_HISTORY_TURNS + 1 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `turn ${i}` }));
    const refused = (() => {
      try {
        chatRun(requestOf({ model: "helper", messages: [...many, { role: "user", content: "and now?" }] }), 60_000);
      } catch (err) {
        return err as GatewayHttpError;
      }
    })();
    expect(refused).toBeInstanceOf(GatewayHttpError);
    expect(refused).toMatchObject({ status: 400, message: expect.stringContaining("name a session") });
    // the most an agent takes goes through
    const most = chatRun(requestOf({ model: "helper", messages: [...many.slice(1), { role: "user", content: "and now?" }] }), 60_000);
    expect(parseRunRequest(most.kind, runPayload(most), Date.now()).history).toHaveLength(MAX_HISTORY_TURNS);
  });
});
