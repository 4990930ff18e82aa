import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import type { AgentInfo } from "../../src/agents/index.js";
import { REPO, TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

function agentToml(modelUrl: string): string {
  return [
    `[models.main]`,
    `base_url = "${modelUrl}"`,
    `model = "gpt-4o-mini"`,
    `max_concurrency = 4`,
    `price = { input_per_mtok = 0.4, output_per_mtok = 1.6 }`,
    `[models.alt]`,
    `base_url = "${modelUrl}"`,
    `model = "gpt-4.1"`,
    `[[agents]]`,
    `id = "helper"`,
    `model = "main"`,
    `system = "You help."`,
    `tools = ["calculator", "clock_now"]`,
    `capabilities = ["math"]`,
    `memory = { policy = "fifo", max_tokens = 8000 }`,
  ].join("\n");
}

describe("agents from kova.toml, driven by the kova CLI (node processes, scripted model over HTTP)", () => {
  it("e2e - a config-declared agent answers kova ask with a streamed answer after a tool loop of 3 calls; usage, events tail --profile and a model switch by signal work", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) => {
        const tools = req.messages.filter((m) => m.role === "tool").length;
        if (req.model === "gpt-4.1") return scriptedReply.text("switched answer");
        if (tools === 0)
          return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "19*2" } }], { usage: { inputTokens: 40, outputTokens: 9 } });
        if (tools === 1)
          return scriptedReply.toolCalls(
            [
              { name: "calculator", arguments: { expression: "38+4" } },
              { name: "clock_now", arguments: {} },
            ],
            { usage: { inputTokens: 60, outputTokens: 12 } },
          );
        return scriptedReply.text("The answer is 42.", {
          chunks: ["The ", "answer ", "is ", "42."],
          // 150 ms apart: a node sends the pieces that arrive together as one delta, and a
          // process stalled on a loaded machine reads pieces 20 ms apart together.
          chunkDelayMs: 150,
          usage: { inputTokens: 90, outputTokens: 6 },
        });
      },
    });
    await using tc = await TestCluster.create({ nodes: ["n1"], extraToml: agentToml(model.url) });
    await poll(async () => (await tc.agents()).get("helper")?.node === "n1", { timeoutMs: 20_000, what: "helper hosted on n1" });

    // events tail, chat profile, on the session the ask uses
    const tail = spawn(
      process.execPath,
      [join(REPO, "bin/kova.js"), "events", "tail", "--session", "cli-s", "--profile", "chat", "--max", "7", "-s", tc.server.url, "--cluster", tc.cluster],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let tailed = "";
    tail.stdout.on("data", (d: Buffer) => (tailed += d.toString()));
    let tailErr = "";
    tail.stderr.on("data", (d: Buffer) => (tailErr += d.toString()));
    await poll(() => tailErr.includes("tailing"), { timeoutMs: 30_000, what: "events tail to subscribe" });

    const asked = await tc.cli(["ask", "helper", "What", "is", "19*2+4?", "--session", "cli-s"]);
    expect(asked.stderr).toMatch(/\[completed · run [\w-]+ · session cli-s · 190 in \/ 27 out, \$0\.000119\]/);
    expect(asked.code).toBe(0);
    expect(asked.stdout).toBe("The answer is 42.\n");
    expect(model.requests).toHaveLength(3);
    expect(model.requests[2]!.messages.filter((m) => m.role === "tool")).toHaveLength(3);

    await poll(() => tailed.trim().split("\n").length >= 7, { timeoutMs: 30_000, what: () => `7 chat events (got ${tailed})` });
    const lines = tailed
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { type: string; data: { text?: string } });
    const types = lines.map((l) => l.type);
    expect(types[0]).toBe("run_started");
    // One delta per piece as the model streamed them, their text the answer.
    expect(types.filter((t) => t === "model_delta")).toHaveLength(4);
    expect(
      lines
        .filter((l) => l.type === "model_delta")
        .map((l) => l.data.text)
        .join(""),
    ).toBe("The answer is 42.");
    expect(types.slice(-2)).toEqual(["run_completed", "run_stream_end"]);
    expect(types).not.toContain("tool_call"); // the chat profile leaves tools out

    const usage = await tc.cli(["agents", "usage", "helper", "--json"]);
    expect(usage.code).toBe(0);
    const info = JSON.parse(usage.stdout) as AgentInfo;
    expect(info).toMatchObject({ agentId: "helper", model: "main", capabilities: ["math"] });
    expect(info.usage).toMatchObject({ runs: 1, modelCalls: 3, toolCalls: 3, inputTokens: 190, outputTokens: 27 });
    expect(info.usage.byTool.calculator?.calls).toBe(2);
    const table = await tc.cli(["agents", "usage"]);
    expect(table.stdout).toMatch(/helper\s+main\s+1\s+3\s+190\s+27/);

    const sig = await tc.cli(["signal", "helper", "model=alt"]);
    expect(sig.code, sig.stderr).toBe(0);
    const second = await tc.cli(["ask", "helper", "again", "--session", "cli-s", "--chat"]);
    expect(second.stdout).toBe("switched answer\n");
    expect(model.requests.at(-1)!.model).toBe("gpt-4.1");
    // The conversation was kept: the second question arrives after the first answer.
    expect(model.requests.at(-1)!.messages.map((m) => m.role)).toEqual([
      "system",
      "user",
      "assistant",
      "tool",
      "assistant",
      "tool",
      "tool",
      "assistant",
      "user",
    ]);
    const bad = await tc.cli(["signal", "helper", "model=nope"]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("UNKNOWN_MODEL");
    tail.kill();
  }, 90_000);

  it("e2e - kova signal <agent> interrupt aborts the model call in flight: kova ask ends cancelled (exit 1) and the agent takes its next message", async () => {
    await using model = await startScriptedModelServer({
      handler: (req) => (req.lastMessage?.content === "hang" ? scriptedReply.text("never", { latencyMs: 60_000 }) : scriptedReply.text("here")),
    });
    await using tc = await TestCluster.create({ nodes: ["n1"], extraToml: agentToml(model.url) });
    await poll(async () => (await tc.agents()).get("helper")?.node === "n1", { timeoutMs: 20_000, what: "helper hosted on n1" });
    const asking = tc.cli(["ask", "helper", "hang"]);
    await model.waitForRequests(1, 20_000);
    const sig = await tc.cli(["signal", "helper", "interrupt"]);
    expect(sig.code, sig.stderr).toBe(0);
    const asked = await asking;
    expect(asked.code).toBe(1);
    expect(asked.stderr).toMatch(/\[cancelled · run /);
    await poll(() => model.requests[0]!.clientClosed, { timeoutMs: 10_000, what: "the provider request aborted" });
    const next = await tc.cli(["ask", "helper", "again"]);
    expect(next.stdout).toBe("here\n");
  }, 90_000);
});
