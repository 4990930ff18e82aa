import { describe, expect, it } from "vitest";
import { scriptedReply } from "../../src/testing/index.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";

/** `{"a":{"a":…1…}}` nested `depth` objects deep, as JSON text (never built as a value: no recursion here either). */
function nestedJson(depth: number): string {
  return `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
}

/** Posts "hi" to the helper agent on the OpenAI endpoint, with `extra` fields in the body. */
function chatWith(rig: { url: string; key: string }) {
  return (extra: Record<string, unknown>) =>
    fetch(`${rig.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "helper", messages: [{ role: "user", content: "hi" }], ...extra }),
    });
}

describe("gateway: request validation", () => {
  it("requests - bodies nested too deep are refused before any run starts: 400 on the OpenAI endpoint, JSON-RPC -32600 on A2A", async () => {
    await using rig = await startGatewayRig({ handler: () => scriptedReply.text("answered") });
    const post = (path: string, body: string, headers: Record<string, string> = {}) =>
      fetch(`${rig.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json", ...headers }, body });

    const chat = await post("/v1/chat/completions", `{"model":"helper","messages":[{"role":"user","content":"hi"}],"metadata":${nestedJson(3000)}}`);
    expect(chat.status).toBe(400);
    expect(await chat.json()).toMatchObject({ error: { code: "BODY_TOO_DEEP", type: "invalid_request_error", message: expect.stringContaining("64 levels") } });

    const v1 = { "A2A-Version": "1.0" };
    const deepMetadata = await post(
      "/agents/helper/a2a/jsonrpc",
      `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}],"metadata":${nestedJson(3000)}}}}`,
      v1,
    );
    expect(((await deepMetadata.json()) as { error: { code: number } }).error.code).toBe(-32600);
    const deepId = await post(
      "/agents/helper/a2a/jsonrpc",
      `{"jsonrpc":"2.0","id":${"[".repeat(100_000)}${"]".repeat(100_000)},"method":"GetTask","params":{"id":"x"}}`,
      v1,
    );
    expect(deepId.status).toBeLessThan(500);
    expect(((await deepId.json()) as { error: { code: number } }).error.code).toBe(-32600);
    const legacy = await post(
      "/a2a/jsonrpc",
      `{"jsonrpc":"2.0","id":2,"method":"message/send","params":{"message":{"kind":"message","messageId":"m2","role":"user","parts":[{"kind":"text","text":"hi"}],"metadata":${nestedJson(2000)}}}}`,
    );
    expect(((await legacy.json()) as { error: { code: number } }).error.code).toBe(-32600);
    // nothing ran
    expect(rig.model.requests).toHaveLength(0);

    // an ordinary nested body still works
    const fine = await post("/v1/chat/completions", `{"model":"helper","messages":[{"role":"user","content":"hi"}],"metadata":${nestedJson(10)}}`);
    expect(fine.status).toBe(200);
  }, 60_000);

  it("requests - a web view cookie that is not URI-encoded is an invalid key (401), not an internal error", async () => {
    await using rig = await startGatewayRig();
    const res = await fetch(`${rig.url}/ui/api/cluster`, { headers: { cookie: "kova_key=%E0%A4%A" } });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: { code: "UNAUTHORIZED" } });
    // the right key in the cookie still opens the view
    const ok = await fetch(`${rig.url}/ui/api/cluster`, { headers: { cookie: `other=1; kova_key=${encodeURIComponent(rig.key)}` } });
    expect(ok.status).toBe(200);
  }, 60_000);

  it("requests - max_tokens and max_completion_tokens that are not positive integers get 400 naming the field, and no run starts", async () => {
    await using rig = await startGatewayRig({ handler: () => scriptedReply.text("answered") });
    const chat = chatWith(rig);
    for (const [field, value] of [
      ["max_tokens", -1],
      ["max_tokens", 0],
      ["max_tokens", 1.5],
      ["max_tokens", "100"],
      ["max_completion_tokens", 0],
    ] as const) {
      const res = await chat({ [field]: value });
      expect(res.status, `${field} = ${value}`).toBe(400);
      expect(await res.json()).toMatchObject({
        error: { code: "BAD_REQUEST", type: "invalid_request_error", message: expect.stringContaining(field), data: { param: field } },
      });
    }
    expect(rig.model.requests).toHaveLength(0);
    const ok = await chat({ max_tokens: 50 });
    expect(ok.status).toBe(200);
  }, 60_000);

  it("requests - fields asking for what an agent cannot give (n > 1, JSON response_format, a forced tool_choice, logprobs, audio) get 400 naming the field; tuning fields and a client's tools are accepted", async () => {
    await using rig = await startGatewayRig({ handler: () => scriptedReply.text("answered") });
    const chat = chatWith(rig);
    const weather = { type: "function", function: { name: "weather", parameters: { type: "object", properties: {} } } };
    for (const [param, extra] of [
      ["n", { n: 3 }],
      ["n", { n: 0 }],
      ["response_format", { response_format: { type: "json_object" } }],
      ["response_format", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } } } }],
      ["response_format", { response_format: "json" }],
      ["tool_choice", { tools: [weather], tool_choice: "required" }],
      ["tool_choice", { tools: [weather], tool_choice: { type: "function", function: { name: "weather" } } }],
      ["logprobs", { logprobs: true }],
      ["logprobs", { top_logprobs: 2 }],
      ["audio", { audio: { voice: "alloy", format: "wav" } }],
      ["modalities", { modalities: ["text", "audio"] }],
    ] as const) {
      const res = await chat(extra);
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(await res.json()).toMatchObject({ error: { code: "BAD_REQUEST", type: "invalid_request_error", data: { param } } });
    }
    expect(rig.model.requests).toHaveLength(0);
    // What only tunes or offers is accepted, and the agent answers.
    const ok = await chat({
      n: 1,
      temperature: 0.2,
      top_p: 0.9,
      seed: 7,
      stop: ["\n\n"],
      response_format: { type: "text" },
      tools: [weather],
      tool_choice: "auto",
      logprobs: false,
      modalities: ["text"],
    });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe("answered");
    expect(rig.model.requests).toHaveLength(1);
  }, 60_000);

  it("requests - a stateless conversation too large for one bus message gets 413 saying to name a session, and no run starts", async () => {
    await using rig = await startGatewayRig({ handler: () => scriptedReply.text("answered"), gateway: { max_body_bytes: 4 * 1024 * 1024 } });
    const turn = "x".repeat(100_000);
    const messages = Array.from({ length: 20 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: turn }));
    const res = await chatWith(rig)({ messages: [...messages, { role: "user", content: "and now?" }] });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({
      error: { code: "PAYLOAD_TOO_LARGE", type: "invalid_request_error", message: expect.stringContaining("name a session") },
    });
    expect(rig.model.requests).toHaveLength(0);
    // with a session, the same new message goes through
    const ok = await chatWith(rig)({ user: "conv-1", messages: [...messages, { role: "user", content: "and now?" }] });
    expect(ok.status).toBe(200);
  }, 60_000);
});
