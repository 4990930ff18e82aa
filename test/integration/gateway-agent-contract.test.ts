import { describe, expect, it } from "vitest";
import { KovaClient, type KovaEvent } from "../../src/bus/index.js";
import { endingsScript, type Ending } from "../fixtures/gateway/endings.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";

/**
 * The gateway's tests run mostly against the stand-in agent (test/fixtures/gateway/agents.ts).
 * Its events once drifted from a real agent's (a model call's cost inside `usage`), and the
 * readers that followed the stand-in missed every real cost. Here both run the same script
 * and their stored events must match: the same types in the same order, the same fields of
 * the same kinds, and the same usage and cost.
 */
const { handler, run } = endingsScript();

/** Fields whose values both agents must agree on; the rest must only be of the same kind. */
const SAME_VALUE = new Set(["usage", "costUsd", "turn", "finishReason", "attempts", "toolCalls", "ok", "status", "kind"]);
/** Fields that differ by the agents' tools (the arguments of `add` and `calculator`). */
const OPAQUE = new Set(["args"]);

function shape(value: unknown, key?: string): unknown {
  if (key !== undefined && SAME_VALUE.has(key)) return value;
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value !== "object" || (key !== undefined && OPAQUE.has(key))) return typeof value;
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => [k, shape(v, k)]),
  );
}

/** Live-only events (plain publishes): the stand-in sends tokens, not the request notice. */
const LIVE_ONLY = new Set(["model_request", "model_delta", "schedule_blocked", "rate_limited"]);

describe("gateway: the stand-in agent keeps the agent protocol", () => {
  it("contract - the stand-in agent publishes each run event with the fields, usage and cost of a real [[agents]] agent: completed with a tool call, failed, cancelled", async () => {
    await using rig = await startGatewayRig({ handler, agents: ["stand-in"], llmAgents: [{ id: "real", tools: ["calculator"] }] });
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    const normalized = (events: KovaEvent[]) => events.filter((e) => !LIVE_ONLY.has(e.type)).map((e) => ({ type: e.type, data: shape(e.data) }));

    const realRuns: Partial<Record<Ending, KovaEvent[]>> = {};
    for (const ending of ["ok", "fail", "cancel"] as const) {
      const [real, standIn] = await Promise.all([run(client, rig, "real", ending), run(client, rig, "stand-in", ending)]);
      expect(normalized(standIn), `the stand-in's events in the ${ending} run`).toEqual(normalized(real));
      realRuns[ending] = real;
    }
    // the comparison covered what the gateway reads: a call's cost beside its usage, a run's totals in usage
    const ok = realRuns.ok!;
    const responses = ok.filter((e) => e.type === "model_response").map((e) => e.data as Record<string, unknown>);
    expect(responses.map((d) => [d.usage, d.costUsd])).toEqual([
      [{ inputTokens: 25, outputTokens: 5 }, 0.000035],
      [{ inputTokens: 40, outputTokens: 8 }, 0.000056],
    ]);
    expect(ok.find((e) => e.type === "run_completed")?.data).toMatchObject({ usage: { inputTokens: 65, outputTokens: 13, costUsd: 0.000091 } });
    for (const [ending, end] of [
      ["fail", "run_failed"],
      ["cancel", "run_cancelled"],
    ] as const)
      expect(realRuns[ending]!.find((e) => e.type === end)?.data).toMatchObject({ usage: { inputTokens: 25, outputTokens: 5, costUsd: 0.000035 } });
  }, 60_000);
});
