import { describe, expect, it } from "vitest";
import type { KovaEvent } from "../../src/bus/index.js";
import { publicError, publicText } from "../../src/core/public-error.js";
import { ModelCallError, ModelResponseTooLargeError } from "../../src/agents/model/errors.js";
import { runFailure, streamFailure } from "../../src/gateway/openai.js";
import type { KovaTaskMeta } from "../../src/gateway/task-projection.js";
import { projection } from "../fixtures/gateway/projection.js";
import { forView } from "../../src/gateway/web-session-events.js";
import { missingNote } from "../../src/swarm/synthesize.js";
import { missingReason } from "../../src/swarm/coordinator.js";

/**
 * Errors that reach end users (an answer, the OpenAI-compatible and A2A errors, the web view)
 * carry the code, the agent or model name and the fix; never an endpoint, a key, a file path
 * or a stack trace. Each user-facing path gets an error that carries all of them.
 */
const ENDPOINT = "http://10.1.2.3:8443/v1";
const KEY = "sk-proj-4f8a9c2b7d1e6f3a5b8c";
const PATH = "/home/ops/.config/kova/keys/openai.txt";
const LEAKY = [
  `model main (gpt-4o at ${ENDPOINT}) failed after 3 attempt(s): HTTP 401: key ${KEY} from ${PATH} refused`,
  "connect ECONNREFUSED 127.0.0.1:4222 (nats.internal.example:4222, [::1]:8080)",
  "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9abcdefghijklmnopqrstuvwxyz0123456789",
  "api_key=abc123secret password: hunter2 C:\\Users\\ops\\kova\\node.toml ~/kova/secrets.env",
  "Error: boom\n    at callModel (/opt/kova/dist/agents/model-turn.js:12:7)\n    at async runTurn (/opt/kova/dist/actors/turn-runner.js:40:3)",
].join("; ");

/** What must never be in text an end user reads. */
function expectNoInternals(text: string): void {
  for (const secret of [
    ENDPOINT,
    "10.1.2.3",
    "8443",
    KEY,
    PATH,
    "127.0.0.1",
    "4222",
    "nats.internal.example",
    "::1",
    "eyJhbGciOiJIUzI1NiJ9",
    "abc123secret",
    "hunter2",
    "C:\\Users",
    "~/kova",
    "/opt/kova",
    "model-turn.js",
    "    at ",
  ]) {
    expect(text, `leaks ${secret}`).not.toContain(secret);
  }
}

const ev = (type: string, data: unknown): KovaEvent => ({ type, sessionId: "c1", runId: "t1", ts: 1, data });

describe("errors that reach end users", () => {
  it("publicText - takes endpoints, keys, file paths and stack traces out and keeps what names the failure and its fix", () => {
    const text = publicText(LEAKY);
    expectNoInternals(text);
    expect(text).toContain("model main (gpt-4o at (endpoint)) failed after 3 attempt(s): HTTP 401");
    expect(text).toContain("(secret)");
    expect(text).toContain("(path)");
    // What users need stays: codes, names, ids, relative doc references, numbers.
    const plain =
      "agent researcher: the run ended failed: BUDGET_EXCEEDED: run-7 used 1200 tokens of 1000: raise [agents.researcher] budget or see docs/agents.md";
    expect(publicText(plain)).toBe(plain);
    expect(publicError({ code: "MODEL_CALL_FAILED", message: LEAKY }, { code: "X", message: "y" }).code).toBe("MODEL_CALL_FAILED");
    expect(publicError(undefined, { code: "RUN_FAILED", message: "the run failed" })).toEqual({ code: "RUN_FAILED", message: "the run failed" });
  });

  it("model errors - a failed model call names the model and the fix; its endpoint stays in data, for operators", () => {
    const err = new ModelCallError({ name: "main", model: "gpt-4o", endpoint: ENDPOINT, reason: "rejected", status: 401, attempts: 1 }, "invalid api key");
    expect(err.message).toBe(
      "model main (gpt-4o) failed after 1 attempt(s): HTTP 401: invalid api key; the API key was refused: check the variable or file named by api_key_env / api_key_file",
    );
    expect(err.data.endpoint).toBe(ENDPOINT);
    const big = new ModelResponseTooLargeError({ name: "main", model: "gpt-4o", endpoint: ENDPOINT, limitBytes: 10, receivedBytes: 20 });
    expect(big.message).not.toContain(ENDPOINT);
    expect(big.message).toContain("model main (gpt-4o)");
  });

  it("OpenAI-compatible API - a failed run's HTTP error and a streamed answer's error event name the agent and the code, without internals", () => {
    const failed = runFailure({ agentId: "researcher", runId: "r1", named: true }, { status: "failed", error: { code: "MODEL_CALL_FAILED", message: LEAKY } });
    expect(failed.status).toBe(502);
    expect(failed.code).toBe("MODEL_CALL_FAILED");
    expect(failed.message).toMatch(/^agent researcher: the run ended failed: model main/);
    expectNoInternals(failed.message);
    expectNoInternals(JSON.stringify(failed.data));
    const tooLarge = runFailure(
      { agentId: "researcher", runId: "r1", named: false },
      { status: "failed", error: { code: "PAYLOAD_TOO_LARGE", message: LEAKY } },
    );
    expect(tooLarge.status).toBe(413);
    expectNoInternals(tooLarge.message);
    const line = streamFailure("researcher", { code: "MODEL_CALL_FAILED", message: LEAKY }, "the run did not complete");
    const body = JSON.parse(line.slice("data: ".length)) as { error: { message: string; code: string } };
    expect(body.error.code).toBe("MODEL_CALL_FAILED");
    expect(body.error.message).toMatch(/^agent researcher: model main/);
    expectNoInternals(line);
  });

  it("A2A - a failed task's status message and a failed tool call's status data carry the code and a message without internals", () => {
    const p = projection();
    const tool = p.apply(
      ev("tool_result", {
        agentId: "a",
        callId: "c",
        tool: "file_read",
        ok: false,
        error: { code: "TOOL_FAILED", message: `cannot read ${PATH}`, data: { path: PATH } },
      }),
    );
    expectNoInternals(JSON.stringify(tool));
    expect(JSON.stringify(tool)).toContain("TOOL_FAILED");
    const end = p.apply(
      ev("run_failed", {
        agentId: "a",
        error: { code: "MODEL_CALL_FAILED", message: LEAKY, data: { endpoint: ENDPOINT } },
        usage: { inputTokens: 1, outputTokens: 0 },
      }),
    );
    expectNoInternals(JSON.stringify(end));
    expectNoInternals(JSON.stringify(p.task));
    expect((p.task.metadata?.kova as KovaTaskMeta | undefined)?.error?.code).toBe("MODEL_CALL_FAILED");
    expect(JSON.stringify(p.task.status)).toContain("MODEL_CALL_FAILED: model main");
  });

  it("web view - the events it shows carry each error's code and public message, not its data", () => {
    for (const e of [
      ev("run_failed", { agentId: "a", error: { code: "MODEL_CALL_FAILED", message: LEAKY, data: { endpoint: ENDPOINT } } }),
      ev("tool_result", { agentId: "a", callId: "c", tool: "shell_exec", ok: false, error: { code: "TOOL_FAILED", message: LEAKY } }),
      ev("step_failed", {
        stepId: "s",
        key: "s",
        error: { code: "PARALLEL_FAILED", message: LEAKY, data: { failed: [{ branch: "b", error: { message: LEAKY } }] } },
      }),
    ]) {
      const shown = forView(e);
      expectNoInternals(JSON.stringify(shown));
      expect((shown.data as { error: object }).error).toEqual({ code: (e.data as { error: { code: string } }).error.code, message: expect.any(String) });
    }
  });

  it("swarm answers - a subtask whose agent failed is named with the error's code and public message", () => {
    const reason = missingReason({ agentId: "analyst", reason: undefined }, {
      status: "failed",
      output: "",
      usage: { inputTokens: 0, outputTokens: 0 },
      error: { code: "MODEL_CALL_FAILED", message: LEAKY },
    } as never);
    expect(reason).toMatch(/^the agent's run failed: model main .*\[MODEL_CALL_FAILED\]$/s);
    const note = missingNote([{ index: 0, task: "summarise", agentId: "analyst", reason }]);
    expectNoInternals(note);
    expect(note).toContain("MODEL_CALL_FAILED");
  });
});
