import { describe, expect, it } from "vitest";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { KovaClient } from "../../src/bus/index.js";
import { controlRequest, nodeSubject } from "../../src/cluster/control.js";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { endingsScript, FIRST_CALL, SECOND_CALL } from "../fixtures/gateway/endings.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";
import { poll } from "../fixtures/poll.js";

interface OtlpSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
  status?: { code?: number };
}

/** A local OTLP/HTTP (JSON) receiver: every span posted to /v1/traces. */
async function otlpReceiver() {
  const spans: OtlpSpan[] = [];
  const contentTypes: string[] = [];
  const server = createServer(async (req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    contentTypes.push(String(req.headers["content-type"]));
    if (req.url === "/v1/traces") {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> };
      for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    spans,
    contentTypes,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

function attr(span: OtlpSpan | undefined, key: string): unknown {
  const v = span?.attributes.find((a) => a.key === key)?.value;
  if (!v) return undefined;
  if ("intValue" in v) return Number(v.intValue);
  if ("doubleValue" in v) return Number(v.doubleValue);
  return v.stringValue ?? v.boolValue;
}

const handler: ScriptedHandler = (r) => {
  const last = r.lastMessage;
  if (last?.role === "tool") return scriptedReply.text("found 5 facts", { usage: { inputTokens: 40, outputTokens: 8 } });
  if (String(last?.content ?? "").includes("researcher"))
    return scriptedReply.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { inputTokens: 25, outputTokens: 5 } });
  return scriptedReply.text("a short essay", { usage: { inputTokens: 12, outputTokens: 30 } });
};

describe("gateway: OpenTelemetry export", () => {
  it("otel - runs are exported as traces: run spans nest by parent run, model and tool calls are child spans with token attributes", async () => {
    const receiver = await otlpReceiver();
    await using _receiver = defer(() => receiver.close());
    await using rig = await startGatewayRig({
      handler,
      agents: ["researcher", "writer"],
      gateway: { otel: { endpoint: receiver.url, service_name: "kova-test" } },
    });
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    // The children start only after the coordinator's run ended (it delegates and
    // completes, as a fire-and-forget coordinator does): their spans still join its trace.
    const signal = (actorId: string, s: "pause" | "resume") => controlRequest(client.bus.nc, nodeSubject(rig.cluster, "n1", "signal"), { actorId, signal: s });
    for (const a of ["researcher", "writer"]) await signal(a, "pause");
    const events = client.events({ sessionId: "otel-1" });
    await using _events = defer(() => events.stop());
    await client.send("coordinator", "task_delegate", {
      input: "write about NATS",
      sessionId: "otel-1",
      runId: "root-run",
      children: ["researcher", "writer"],
    });
    for await (const e of events) if (e.runId === "root-run" && e.type === "run_stream_end") break;
    for (const a of ["researcher", "writer"]) await signal(a, "resume");

    const spans = await poll(
      () => {
        const byName = (n: string) => receiver.spans.filter((s) => s.name === n);
        return byName("run researcher").length === 1 &&
          byName("run writer").length === 1 &&
          byName("run coordinator").length === 1 &&
          byName("tool add").length === 1
          ? receiver.spans
          : undefined;
      },
      { timeoutMs: 20_000, what: () => `the spans (have: ${receiver.spans.map((s) => s.name).join(", ")})` },
    );
    expect(receiver.contentTypes[0]).toContain("json");
    const root = spans.find((s) => s.name === "run coordinator")!;
    const researcher = spans.find((s) => s.name === "run researcher")!;
    const writer = spans.find((s) => s.name === "run writer")!;
    expect(attr(root, "kova.run_id")).toBe("root-run");
    expect(attr(root, "kova.status")).toBe("completed");
    // one trace; the children's parent is the coordinator's run span
    for (const child of [researcher, writer]) {
      expect(child.traceId).toBe(root.traceId);
      expect(child.parentSpanId).toBe(root.spanId);
      expect(attr(child, "kova.parent_run_id")).toBe("root-run");
    }
    expect(attr(researcher, "gen_ai.usage.input_tokens")).toBe(65);
    expect(attr(researcher, "gen_ai.usage.output_tokens")).toBe(13);
    expect(attr(writer, "gen_ai.usage.output_tokens")).toBe(30);
    expect(Number(attr(researcher, "kova.cost_usd"))).toBeGreaterThan(0);
    // model calls and the tool call hang under the researcher's run span
    const underResearcher = spans
      .filter((s) => s.parentSpanId === researcher.spanId)
      .map((s) => s.name)
      .sort();
    expect(underResearcher).toEqual(["chat scripted-model", "chat scripted-model", "tool add"]);
    const modelCall = spans.find((s) => s.parentSpanId === writer.spanId);
    expect(attr(modelCall, "gen_ai.operation.name")).toBe("chat");
    expect(attr(modelCall, "gen_ai.request.model")).toBe("scripted-model");
    expect(attr(modelCall, "gen_ai.usage.input_tokens")).toBe(12);
  }, 60_000);

  it("otel - a real priced [[agents]] agent's model-call spans and run span carry its tokens and cost, also when the run fails or is cancelled; a run span takes its end event's totals", async () => {
    const receiver = await otlpReceiver();
    await using _receiver = defer(() => receiver.close());
    const { handler: endings, run } = endingsScript();
    await using rig = await startGatewayRig({
      handler: endings,
      agents: [],
      llmAgents: [{ id: "calc", tools: ["calculator"] }],
      gateway: { otel: { endpoint: receiver.url, service_name: "kova-test" } },
    });
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    for (const ending of ["ok", "fail", "cancel"] as const) await run(client, rig, "calc", ending);
    // A run's end event carries its totals, which can exceed its model_response events (a
    // memory summary's call publishes none): the span reports the end event's.
    const ts = Date.now();
    const ev = (type: string, data: unknown) => client.bus.publishEvent({ type, sessionId: "calc-summary", runId: "calc-summary-run", ts, data });
    await ev("run_started", { agentId: "calc", input: "x", kind: "chat" });
    await ev("model_response", {
      agentId: "calc",
      model: "main",
      turn: 0,
      usage: FIRST_CALL,
      costUsd: 0.000035,
      finishReason: "stop",
      attempts: 1,
      toolCalls: 0,
    });
    await ev("run_cancelled", { agentId: "calc", usage: { inputTokens: 125, outputTokens: 15, costUsd: 0.000155 } });

    const runSpan = (runId: string) => receiver.spans.find((s) => s.name === "run calc" && attr(s, "kova.run_id") === runId);
    const spans = await poll(
      () => (["calc-ok-run", "calc-fail-run", "calc-cancel-run", "calc-summary-run"].every((id) => runSpan(id)) ? receiver.spans : undefined),
      { timeoutMs: 20_000, what: () => `the run spans (have: ${receiver.spans.map((s) => `${s.name} ${String(attr(s, "kova.run_id") ?? "")}`).join(", ")})` },
    );
    const calls = (run: OtlpSpan | undefined) =>
      spans
        .filter((s) => s.parentSpanId === run?.spanId && s.name === "chat main")
        .map((s) => [attr(s, "gen_ai.usage.input_tokens"), attr(s, "gen_ai.usage.output_tokens"), attr(s, "kova.cost_usd")])
        // in the order of the calls (the first has fewer input tokens), whatever order the batches came in
        .sort((a, b) => Number(a[0]) - Number(b[0]));
    // at 1 USD per million input tokens and 2 per million output tokens (the rig's price)
    const ok = runSpan("calc-ok-run");
    expect(calls(ok)).toEqual([
      [FIRST_CALL.inputTokens, FIRST_CALL.outputTokens, 0.000035],
      [SECOND_CALL.inputTokens, SECOND_CALL.outputTokens, 0.000056],
    ]);
    expect([attr(ok, "kova.status"), attr(ok, "gen_ai.usage.input_tokens"), attr(ok, "gen_ai.usage.output_tokens"), attr(ok, "kova.cost_usd")]).toEqual([
      "completed",
      65,
      13,
      0.000091,
    ]);
    // a run that ends early still reports what its one answered call cost
    for (const [runId, status] of [
      ["calc-fail-run", "failed"],
      ["calc-cancel-run", "cancelled"],
    ] as const) {
      const span = runSpan(runId);
      expect(calls(span), runId).toEqual([[FIRST_CALL.inputTokens, FIRST_CALL.outputTokens, 0.000035]]);
      expect(
        [attr(span, "kova.status"), attr(span, "gen_ai.usage.input_tokens"), attr(span, "gen_ai.usage.output_tokens"), attr(span, "kova.cost_usd")],
        runId,
      ).toEqual([status, FIRST_CALL.inputTokens, FIRST_CALL.outputTokens, 0.000035]);
    }
    expect(runSpan("calc-fail-run")?.status?.code).toBe(2);
    const summarized = runSpan("calc-summary-run");
    expect([attr(summarized, "gen_ai.usage.input_tokens"), attr(summarized, "gen_ai.usage.output_tokens"), attr(summarized, "kova.cost_usd")]).toEqual([
      125, 15, 0.000155,
    ]);
  }, 60_000);
});
