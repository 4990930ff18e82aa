import { describe, expect, it } from "vitest";
import { scriptedReply, startScriptedModelServer, type ScriptedRequest } from "../../src/testing/index.js";
import { supportTemplateToml } from "../fixtures/agents/support-template.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const OLD_PIECES = Array.from({ length: 10 }, (_, i) => `old-${i + 1} `);

/**
 * The first model call of the run streams slowly (a piece a second); any later call (the
 * run taken over by the other node) answers at once with other words, so every token
 * names the call it came from.
 */
function answer(req: ScriptedRequest) {
  if (req.index === 0) return scriptedReply.text(OLD_PIECES.join(""), { chunks: OLD_PIECES, chunkDelayMs: 1_000 });
  return scriptedReply.text("new answer", { chunks: ["new ", "answer"], chunkDelayMs: 50 });
}

describe("a model call cut by a takeover", () => {
  it("e2e - the host of an agent frozen in the middle of a streamed model call: its peer takes the run over and answers; once thawed, the old host publishes none of the tokens its model call still received", async () => {
    await using model = await startScriptedModelServer({ handler: answer });
    await using tc = await TestCluster.create({
      nodes: ["n1", "n2"],
      freezable: ["n1", "n2"],
      // Staleness well above the stalls of a loaded machine, so that the takeover is the
      // freeze's and not one that came before the first token.
      heartbeatMs: 500,
      staleAfterMs: 6_000,
      extraToml: supportTemplateToml(model.url),
      logLevel: "warn",
    });
    const ask = tc.cli(["ask", "support", "--key", "k1", "hello", "--session", "s"]);
    let cli: unknown;
    void ask.then((a) => (cli = a));
    // The old host's first token is out: it streams, and its heartbeat is fresh.
    await poll(() => tc.events.find((e) => e.type === "model_delta" && (e.data as { text?: string }).text?.startsWith("old-1")), {
      timeoutMs: 60_000,
      what: () => `the first token of the first model call (events: ${tc.events.map((e) => e.type).join(", ")}; cli: ${JSON.stringify(cli)})`,
    });
    const run = tc.events.find((e) => e.type === "model_delta")!.runId;
    const acquired = tc.events.filter((e) => e.type === "agent_acquired" && (e.data as { actorId: string }).actorId === "support--k1");
    const host = (acquired.at(-1)!.data as { node: string }).node;
    const peer = host === "n1" ? "n2" : "n1";
    await tc.freeze(host);
    // The peer counts the frozen host dead, takes the run over and calls the model again.
    const done = await poll(() => tc.events.find((e) => e.runId === run && e.type === "run_completed"), {
      timeoutMs: 60_000,
      what: "the run completed by the peer",
    });
    expect(done.data).toMatchObject({ output: "new answer" });
    expect(
      tc.events.some(
        (e) =>
          e.type === "agent_acquired" && (e.data as { node: string; reason: string }).node === peer && /takeover/.test((e.data as { reason: string }).reason),
      ),
    ).toBe(true);
    // Meanwhile the first call's later pieces wait in the frozen host's socket.
    expect(model.requests.length).toBeGreaterThanOrEqual(2);
    await new Promise((r) => setTimeout(r, (OLD_PIECES.length + 1) * 1_000));
    await tc.thaw(host);
    // Woken, the old host finds its lease gone and stops the actor.
    await poll(() => tc.events.find((e) => e.type === "agent_lost" && (e.data as { node: string; actorId: string }).node === host), {
      timeoutMs: 30_000,
      what: `${host} noticing that it lost support--k1`,
    });
    const a = await ask;
    expect(a.code, a.stderr).toBe(0);
    const texts = tc.events.filter((e) => e.runId === run && e.type === "model_delta").map((e) => String((e.data as { text?: string }).text ?? ""));
    // Only what the old host streamed before the freeze, then the new host's answer: none
    // of the old call's tokens read after the takeover reach the run's followers.
    expect(texts.join("").replace(/^old-1 /, "")).toBe("new answer");
  }, 180_000);
});
