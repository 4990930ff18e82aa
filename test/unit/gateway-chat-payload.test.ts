import type { Request } from "express";
import { describe, expect, it } from "vitest";
import { MAX_HISTORY_TURNS, parseRunRequest } from "../../src/agents/run-protocol.js";
import { GatewayHttpError } from "../../src/gateway/errors.js";
import { chatRun } from "../../src/gateway/openai.js";
import { runPayload } from "../../src/gateway/runs.js";
import { principalOf } from "../../src/gateway/auth.js";
import { hashKey } from "../../src/gateway/keys.js";

/** A chat request as express hands it over: a parsed body and no headers (the key's secret here is its name). */
function requestOf(body: unknown, keyName?: string): Request {
  const principal = keyName === undefined ? undefined : principalOf({ name: keyName, hash: hashKey(keyName) });
  return { body, header: () => undefined, principal } as unknown as Request;
}

describe("gateway chat → agent payload (the contract between the OpenAI endpoint and an agent)", () => {
  it("openai - a stateless conversation reaches the agent as input plus history in roles, without a session; a named session sends the last message with the earlier turns to start it", () => {
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

    // a named session: the earlier turns come along, to start the session if the agent has no memory of it
    const named = chatRun(requestOf({ model: "helper", user: "conv-1", messages }), 60_000);
    const chat = parseRunRequest(named.kind, runPayload(named), Date.now());
    expect(chat).toMatchObject({ kind: "chat", input: "and now?", sessionId: named.sessionId, history: parsed.history });
    // one message: none
    const first = chatRun(requestOf({ model: "helper", user: "conv-1", messages: [{ role: "user", content: "hello" }] }), 60_000);
    expect(parseRunRequest(first.kind, runPayload(first), Date.now()).history).toBeUndefined();
  });

  it("openai - a named session's long conversation is not refused: the newest turns that fit (1,000, 256 KiB) come along, older ones are left to the agent's memory", () => {
    const many = Array.from({ length: MAX_HISTORY_TURNS + 500 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `turn ${i}` }));
    const long = chatRun(requestOf({ model: "helper", user: "conv-1", messages: [...many, { role: "user", content: "and now?" }] }), 60_000);
    const seeded = parseRunRequest(long.kind, runPayload(long), Date.now()).history!;
    expect(seeded).toHaveLength(MAX_HISTORY_TURNS);
    expect(seeded.at(-1)).toEqual({ role: "assistant", content: `turn ${MAX_HISTORY_TURNS + 499}` });
    const big = Array.from({ length: 10 }, (_, i) => ({ role: "user", content: `${i}`.padEnd(100_000, "x") }));
    const heavy = chatRun(requestOf({ model: "helper", user: "conv-1", messages: [...big, { role: "user", content: "and now?" }] }), 60_000);
    // two turns of 100 kB fit in 256 KiB, a third does not
    expect(parseRunRequest(heavy.kind, runPayload(heavy), Date.now()).history?.map((t) => t.content[0])).toEqual(["8", "9"]);
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

  it("openai - the run is for an end user: the key, or the client's own user id scoped by its key (fair share, user_max_tokens); max_tokens reaches a named session's chat too", () => {
    const messages = [{ role: "user", content: "hello" }];
    const parse = (body: Record<string, unknown>, key?: string) => {
      const run = chatRun(requestOf({ model: "helper", messages, ...body }, key), 60_000);
      return parseRunRequest(run.kind, runPayload(run), Date.now());
    };
    // A named session (the user field) of key team-a, with a token limit: both reach the agent.
    const alice = parse({ user: "alice@example.com", max_tokens: 50 }, "team-a");
    expect(alice).toMatchObject({ kind: "chat", maxTokens: 50 });
    expect(alice.user).toMatch(/^o[0-9a-f]{12}_/);
    // The same user id under another key is another user: no key can pass as another's users.
    const other = parse({ user: "alice@example.com" }, "team-b");
    expect(other.user).not.toBe(alice.user);
    expect(parse({ user: "alice@example.com" }, "team-a").user).toBe(alice.user);
    // No user field: the key is the user (its owner scope, never its name), for a stateless task as for a chat.
    const teamA = principalOf({ name: "team-a", hash: hashKey("team-a") }).sessionScope!.slice(0, -1);
    expect(parse({}, "team-a")).toMatchObject({ kind: "task", user: teamA });
    expect(parse({ max_tokens: 9 }, "team-a")).toMatchObject({ kind: "task", user: teamA, maxTokens: 9 });
    // A key of the same name with another secret is another principal, so another user.
    expect(parse({}, "team-a").user).not.toBe(
      parseRunRequest(
        "task_delegate",
        runPayload(
          chatRun(
            {
              body: { model: "helper", messages },
              header: () => undefined,
              principal: principalOf({ name: "team-a", hash: hashKey("another secret") }),
            } as unknown as Request,
            60_000,
          ),
        ),
        Date.now(),
      ).user,
    );
    // auth = "none" and no user field: no end user (the run counts as the gateway's).
    expect(parse({})).not.toHaveProperty("user");
  });
});
