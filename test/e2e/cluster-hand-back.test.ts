import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { askAgent } from "../../src/agents/index.js";
import { ownerOf } from "../../src/node/placement/rendezvous.js";
import { scriptedReply, startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const NODES = ["n1", "n2"];
const AGENT = "worker";
const STALE_AFTER_MS = 5_000;
/** Reconcile passes (500 ms apart in test clusters) a peer gets to hand the agent back too early. */
const PASSES_WATCHED_MS = 3_000;

const lastText = (req: ScriptedRequest) => String(req.messages.at(-1)?.content);

describe("hand-back after a takeover (node processes, scripted model over HTTP)", () => {
  it("hand-back - the owner SIGKILLed mid-turn and restarted while the peer runs the redelivered turn (a slow model reply): the turn completes on the peer with one model call there, then the agent goes back to its owner", async () => {
    // The first request (on the owner) hangs until the kill; the redelivered turn's request
    // (on the peer) is answered only when the test says, long after the owner is back.
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    let firstCalls = 0;
    await using model = await startScriptedModelServer({
      handler: async (req) => {
        if (lastText(req) !== "first") return scriptedReply.text("second done");
        if (++firstCalls === 1) return scriptedReply.text("too late", { latencyMs: 120_000 });
        await answered;
        return scriptedReply.text("first done");
      },
    });
    const extraToml = [`[models.main]`, `base_url = "${model.url}"`, `model = "gpt-4o-mini"`, `[[agents]]`, `id = "${AGENT}"`, `model = "main"`].join("\n");
    await using tc = await TestCluster.create({ nodes: NODES, staleAfterMs: STALE_AFTER_MS, ackWaitMs: 60_000, extraToml });
    const owner = ownerOf(AGENT, NODES)!;
    const peer = NODES.find((n) => n !== owner)!;
    await poll(async () => (await tc.hostOf(AGENT)) === owner, { timeoutMs: 30_000, retryErrors: true, what: `${AGENT} hosted on its owner ${owner}` });

    const first = askAgent(tc.bus, AGENT, "first", { runId: "first-run", timeoutMs: 120_000 });
    await poll(() => firstCalls === 1, { timeoutMs: 20_000, what: "the first model request in flight on the owner" });
    tc.kill(owner);
    const killedAt = performance.now();
    await tc.procs.get(owner)!.exited;
    // The peer takes the agent over once the owner is stale and runs the redelivered turn,
    // whose model request waits.
    await poll(() => firstCalls === 2, { timeoutMs: STALE_AFTER_MS + 30_000, what: `${peer}'s model request of the redelivered turn` });

    // The owner comes back while that turn runs: rendezvous hashing makes it the owner again.
    await tc.startNode(owner);
    await sleep(PASSES_WATCHED_MS);
    // The peer keeps the agent while its turn runs: a hand-back now would drain the turn
    // (1 s here), cut it, and the owner would make the model call again.
    expect(await tc.hostOf(AGENT)).toBe(peer);
    expect(tc.placements(AGENT, killedAt).filter((p) => p.type === "agent_released")).toEqual([]);

    answer();
    expect(await first).toMatchObject({ status: "completed", output: "first done", runId: "first-run" });
    const completedAt = tc.events.find((e) => e.runId === "first-run" && e.type === "run_completed")!.at;
    // One model call on the owner (in flight at the kill) and one on the peer: none again.
    expect(firstCalls).toBe(2);

    // Then the agent goes back to its owner, by one graceful move after the turn.
    await poll(async () => (await tc.hostOf(AGENT)) === owner, { timeoutMs: 30_000, retryErrors: true, what: `${AGENT} handed back to ${owner}` });
    const released = tc.placements(AGENT, killedAt).filter((p) => p.type === "agent_released");
    expect(released.map((p) => `${p.node}: ${p.reason}`)).toEqual([`${peer}: rebalance to ${owner}`]);
    expect(released[0]!.at).toBeGreaterThan(completedAt);
    expect(
      tc
        .placements(AGENT, killedAt)
        .filter((p) => p.type === "agent_acquired")
        .map((p) => p.node)
        .slice(-2),
    ).toEqual([peer, owner]);

    // Its next message runs on the owner, with its one model call.
    expect(await askAgent(tc.bus, AGENT, "second", { runId: "second-run", timeoutMs: 60_000 })).toMatchObject({ status: "completed", output: "second done" });
    expect(model.requests.filter((r) => lastText(r) === "second")).toHaveLength(1);
    expect(await tc.hostOf(AGENT)).toBe(owner);
    expect(firstCalls).toBe(2);
  }, 180_000);
});
