import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { askAgent } from "../../src/agents/index.js";
import { scriptedReply, startScriptedModelServer, type RecordedRequest } from "../../src/testing/index.js";
import { tempDir } from "../fixtures/disposable.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

// Exports `charge` (not idempotent) and `lookup` (idempotent): each logs its runs in the
// directory its arguments name, and the first run of each blocks until its turn is cut.
const TOOLS_MODULE = join(import.meta.dirname, "../fixtures/agents/cut-tools.mjs");
const AGENT = [`[[agents]]`, `id = "clerk"`, `model = "main"`, `tools = ["charge", "lookup"]`].join("\n");

/** The process ids that started a tool of cut-tools.mjs, in order, across every node process. */
async function starts(dir: string, tool: string): Promise<number[]> {
  const log = await readFile(join(dir, `${tool}.log`), "utf8").catch(() => "");
  return log.split("\n").filter(Boolean).map(Number);
}

async function runs(dir: string, tool: string): Promise<number> {
  return (await starts(dir, tool)).length;
}

/** The tool results one model request carried, by call id. */
function toolResults(req: RecordedRequest): Record<string, unknown> {
  return Object.fromEntries(req.messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, JSON.parse(String(m.content))]));
}

/**
 * One run whose single model response calls `charge` and `lookup` at once; while both are
 * in flight, `cut` ends the agent's node (SIGKILL or SIGTERM) and says where the agent is
 * expected next. Whoever resumes the turn must give the model "outcome unknown" for the
 * charge (never run it again) and run the lookup again; the run completes.
 */
async function cutDuringCalls(nodes: string[], cut: (tc: TestCluster, host: string) => Promise<void>): Promise<{ host: string; after: string }> {
  await using dir = await tempDir("kova-cut-tools-");
  await using model = await startScriptedModelServer({
    handler: (req) =>
      req.messages.some((m) => m.role === "tool")
        ? scriptedReply.text("Charged, or not: checking with the customer.")
        : scriptedReply.toolCalls([
            { id: "call-charge", name: "charge", arguments: { dir: dir.path, amount: 42 } },
            { id: "call-lookup", name: "lookup", arguments: { dir: dir.path, customer: "c-7" } },
          ]),
  });
  await using tc = await TestCluster.create({
    nodes,
    modules: [TOOLS_MODULE],
    extraToml: [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, AGENT].join("\n"),
  });
  await poll(async () => (await tc.agents()).get("clerk")?.node ?? undefined, { timeoutMs: 20_000, what: "clerk hosted" });
  const pending = askAgent(tc.bus, "clerk", "Charge customer c-7 42 euros.", { runId: "cut-run", timeoutMs: 90_000 });
  // Both calls are inside their tools: the charge's start is journaled (it runs only after).
  const first = await poll(
    async () => {
      const [charge, lookup] = [await starts(dir.path, "charge"), await starts(dir.path, "lookup")];
      return charge.length === 1 && lookup.length === 1 && { charge, lookup };
    },
    { timeoutMs: 20_000, what: "both tool calls in flight" },
  );
  expect(first.lookup).toEqual(first.charge);
  // The node that runs them, from the process itself: the registry may still name the node
  // that hosted the agent first, before placement settled (or a frozen node's peer, briefly).
  const host = [...tc.procs.values()].find((p) => p.child.pid === first.charge[0])?.id ?? "";
  expect(host, `the node process ${first.charge[0]} that runs the calls`).not.toBe("");
  await cut(tc, host);
  const result = await pending;
  expect(result).toMatchObject({ status: "completed", runId: "cut-run", output: "Charged, or not: checking with the customer." });
  // The recorded model response was reused: one more request, carrying both results.
  expect(model.requests).toHaveLength(2);
  const results = toolResults(model.requests[1]!);
  expect(results["call-charge"]).toMatchObject({ error: { code: "TOOL_OUTCOME_UNKNOWN" } });
  expect((results["call-charge"] as { error: { message: string } }).error.message).toContain("the call of charge started before a crash");
  expect(results["call-lookup"]).toEqual({ customer: "c-7", tier: "gold" });
  expect(await runs(dir.path, "charge")).toBe(1);
  expect(await runs(dir.path, "lookup")).toBe(2);
  const events = tc.events.filter((e) => e.runId === "cut-run");
  expect(events.filter((e) => e.type === "run_completed")).toHaveLength(1);
  const charged = events.filter((e) => e.type === "tool_result" && (e.data as { callId: string }).callId === "call-charge");
  expect(charged.at(-1)?.data).toMatchObject({ ok: false, error: { code: "TOOL_OUTCOME_UNKNOWN" } });
  const after = (await tc.agents()).get("clerk")?.node ?? "";
  return { host, after };
}

describe("a tool call cut short by its node's end (node processes, scripted model over HTTP)", () => {
  it("sigkill restart - the node is SIGKILLed while a non-idempotent and an idempotent call run; restarted on its WAL, the model hears outcome unknown for the first, the second runs again, the run completes", async () => {
    await cutDuringCalls(["n1"], async (tc, host) => {
      tc.kill(host);
      await tc.procs.get(host)!.exited;
      await tc.startNode(host);
    });
  }, 120_000);

  it("sigkill takeover - the node is SIGKILLed during the calls and does not come back; the node that takes the agent over (step journal on NATS) gives outcome unknown for the non-idempotent call and runs the idempotent one again", async () => {
    const { host, after } = await cutDuringCalls(["n1", "n2"], async (tc, host) => {
      tc.kill(host);
    });
    expect(after).not.toBe(host);
  }, 120_000);

  it("graceful stop restart - SIGTERM during the calls cuts them at the drain timeout; restarted on its WAL, the node gives outcome unknown for the non-idempotent call, runs the idempotent one again, and the run completes", async () => {
    await cutDuringCalls(["n1"], async (tc, host) => {
      expect(await tc.term(host)).toEqual({ code: 0, signal: null });
      await tc.startNode(host);
    });
  }, 120_000);

  it("graceful stop takeover - SIGTERM during the calls cuts them at the drain timeout; the node that takes the agent over gives outcome unknown for the non-idempotent call, runs the idempotent one again, and the run completes", async () => {
    const { host, after } = await cutDuringCalls(["n1", "n2"], async (tc, host) => {
      expect(await tc.term(host)).toEqual({ code: 0, signal: null });
    });
    expect(after).not.toBe(host);
  }, 120_000);
});
