import type { Context, Span, Tracer } from "@opentelemetry/api";
import type { Logger } from "../core/index.js";
import type { Bus, KovaEvent, EventStream } from "../bus/index.js";
import type { OtelConfig } from "./config.js";

/**
 * Optional OpenTelemetry export of runs as traces (`[gateway.otel]`): a run is a span, its
 * model calls and tool calls are child spans, a child run (agent as tool, swarm subtask)
 * is a child span of its parent run's, with GenAI token attributes and Kova's cost. Built
 * from the cluster's events, so nothing in the agents changes. The @opentelemetry packages
 * are imported only when configured.
 *
 * Every replica with `[gateway.otel]` exports every run it sees: configure it on one
 * gateway of a cluster (docs/gateway.md).
 */
export interface RunTraceExporter {
  stop(): Promise<void>;
}

interface OpenRun {
  span: Span;
  ctx: Context;
  lastTs: number;
  tools: Map<string, Span>;
  usage: { in: number; out: number; cost: number };
  at: number;
}

/**
 * The fields of run events the exporter reads (docs/protocol.md, "Agent runs"). A model
 * call's cost is `costUsd` beside its `usage`; a run's end event carries the run's totals
 * in `usage`, cost included.
 */
interface EventData {
  model?: string;
  usage?: { inputTokens?: number; outputTokens?: number; costUsd?: number };
  costUsd?: number;
  callId?: string;
  tool?: string;
  ok?: boolean;
  error?: { message?: string } | string;
  status?: string;
}

/** Runs kept open at most; past it the oldest is ended (an agent that never ended its run). */
const MAX_OPEN_RUNS = 10_000;

/**
 * Starts exporting. @throws when the OpenTelemetry packages cannot be loaded
 */
export async function startRunTraceExporter(bus: Bus, config: OtelConfig, log: Logger): Promise<RunTraceExporter> {
  const api = await import("@opentelemetry/api");
  const { TracerProvider, BatchSpanProcessor } = await import("@opentelemetry/sdk-trace");
  const { resourceFromAttributes } = await import("@opentelemetry/resources");
  const { OTLPTraceExporter } = await import("@opentelemetry/exporter-trace-otlp-http");
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": config.serviceName, "kova.cluster": bus.cluster }),
    spanProcessors: [
      new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: config.endpoint, headers: config.headers }), scheduledDelayMillis: 1000 }),
    ],
  });
  const tracer: Tracer = provider.getTracer("kova-gateway");
  const runs = new Map<string, OpenRun>();
  // Contexts of ended runs: a delegated child often starts after its parent ended (a
  // coordinator that sends and completes); it still belongs in the parent's trace.
  const ended = new Map<string, Context>();
  const events: EventStream = bus.subscribeEvents();

  const open = (e: KovaEvent): OpenRun => {
    let r = runs.get(e.runId);
    if (r) return r;
    const parentCtx = (e.parentRunId ? (runs.get(e.parentRunId)?.ctx ?? ended.get(e.parentRunId)) : undefined) ?? api.ROOT_CONTEXT;
    const data = (e.data ?? {}) as Record<string, unknown>;
    const span = tracer.startSpan(
      `run ${typeof data.agentId === "string" ? data.agentId : e.runId}`,
      {
        startTime: e.ts,
        attributes: {
          "kova.session_id": e.sessionId,
          "kova.run_id": e.runId,
          ...(e.parentRunId ? { "kova.parent_run_id": e.parentRunId } : {}),
          ...(typeof data.agentId === "string" ? { "kova.agent_id": data.agentId, "gen_ai.agent.name": data.agentId } : {}),
        },
      },
      parentCtx,
    );
    r = { span, ctx: api.trace.setSpan(parentCtx, span), lastTs: e.ts, tools: new Map(), usage: { in: 0, out: 0, cost: 0 }, at: e.ts };
    runs.set(e.runId, r);
    if (runs.size > MAX_OPEN_RUNS) {
      const [oldest] = runs.keys();
      if (oldest) end(oldest, "unknown", Date.now());
    }
    return r;
  };

  const end = (runId: string, status: string, ts: number, usage?: { inputTokens?: number; outputTokens?: number; costUsd?: number }, error?: string) => {
    const r = runs.get(runId);
    if (!r) return;
    runs.delete(runId);
    ended.set(runId, r.ctx);
    if (ended.size > MAX_OPEN_RUNS) {
      const [oldest] = ended.keys();
      if (oldest) ended.delete(oldest);
    }
    for (const t of r.tools.values()) t.end(ts);
    r.span.setAttributes({
      "kova.status": status,
      "gen_ai.usage.input_tokens": usage?.inputTokens ?? r.usage.in,
      "gen_ai.usage.output_tokens": usage?.outputTokens ?? r.usage.out,
      "kova.cost_usd": usage?.costUsd ?? r.usage.cost,
    });
    if (status === "failed") r.span.setStatus({ code: api.SpanStatusCode.ERROR, ...(error ? { message: error } : {}) });
    else if (status === "completed") r.span.setStatus({ code: api.SpanStatusCode.OK });
    r.span.end(ts);
  };

  const fold = (e: KovaEvent) => {
    const d = (e.data ?? {}) as EventData;
    switch (e.type) {
      case "run_started":
        open(e);
        return;
      case "model_delta":
        return;
      case "model_response": {
        const r = open(e);
        const u = d.usage ?? {};
        // The event marks the end of the call; the call began after the run's previous step.
        const s = tracer.startSpan(
          `chat ${String(d.model ?? "")}`,
          {
            startTime: r.lastTs,
            attributes: {
              "gen_ai.operation.name": "chat",
              "gen_ai.request.model": String(d.model ?? ""),
              "gen_ai.usage.input_tokens": u.inputTokens ?? 0,
              "gen_ai.usage.output_tokens": u.outputTokens ?? 0,
              ...(typeof d.costUsd === "number" ? { "kova.cost_usd": d.costUsd } : {}),
            },
          },
          r.ctx,
        );
        s.end(e.ts);
        r.usage.in += u.inputTokens ?? 0;
        r.usage.out += u.outputTokens ?? 0;
        r.usage.cost += typeof d.costUsd === "number" ? d.costUsd : 0;
        r.lastTs = e.ts;
        return;
      }
      case "tool_call": {
        const r = open(e);
        r.tools.set(
          String(d.callId),
          tracer.startSpan(
            `tool ${String(d.tool)}`,
            { startTime: e.ts, attributes: { "gen_ai.tool.name": String(d.tool), "gen_ai.tool.call.id": String(d.callId) } },
            r.ctx,
          ),
        );
        r.lastTs = e.ts;
        return;
      }
      case "tool_result": {
        const r = open(e);
        const t = r.tools.get(String(d.callId));
        if (t) {
          r.tools.delete(String(d.callId));
          t.setAttribute("kova.ok", d.ok !== false);
          if (d.ok === false)
            t.setStatus({ code: api.SpanStatusCode.ERROR, message: typeof d.error === "string" ? d.error : (d.error?.message ?? "tool failed") });
          t.end(e.ts);
        }
        r.lastTs = e.ts;
        return;
      }
      case "run_completed":
        end(e.runId, "completed", e.ts, d.usage);
        return;
      case "run_failed":
        end(e.runId, "failed", e.ts, d.usage, typeof d.error === "string" ? d.error : d.error?.message);
        return;
      case "run_cancelled":
        end(e.runId, "cancelled", e.ts, d.usage);
        return;
      case "run_stream_end":
        end(e.runId, String(d.status ?? "unknown"), e.ts);
        return;
      default: {
        const r = runs.get(e.runId);
        if (r) r.lastTs = e.ts;
      }
    }
  };

  const loop = (async () => {
    for await (const e of events) {
      try {
        fold(e);
      } catch (err) {
        log.warn({ err, type: e.type }, "could not trace an event");
      }
    }
  })();
  log.info({ endpoint: config.endpoint }, "exporting runs as OpenTelemetry traces");
  return {
    async stop() {
      events.stop();
      await loop;
      for (const id of [...runs.keys()]) end(id, "unknown", Date.now());
      await provider.shutdown().catch((err: unknown) => log.warn({ err }, "OTLP export failed at shutdown"));
    },
  };
}
