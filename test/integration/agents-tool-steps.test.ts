import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { askAgent } from "../../src/agents/index.js";
import type { JournalEntry } from "../../src/actors/step-journal.js";
import { decodeValue } from "../../src/bus/codec.js";
import { scriptedReply, startScriptedModelServer } from "../../src/testing/index.js";
import { startAgentNode } from "../fixtures/agents/node-rig.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { defer, tempDir } from "../fixtures/disposable.js";

const nats = fileServer();

describe("tool calls as journaled steps (KovaNode in process, real NATS, scripted model)", () => {
  it("idempotency per call - each call's step is idempotent as its arguments decide: file_write overwrite (named or by default) and http GET are, file_write create and http POST are not and journal an intent before they run", async () => {
    await using root = await tempDir("kova-tool-steps-");
    const web = createServer((req, res) => res.end(`${req.method} answered`));
    await new Promise<void>((resolve) => web.listen(0, "127.0.0.1", resolve));
    await using _web = defer(() => new Promise((resolve) => web.close(resolve)));
    const site = `http://127.0.0.1:${(web.address() as AddressInfo).port}/`;
    const calls = [
      { id: "c-create", name: "file_write", arguments: { path: "a.txt", content: "a", mode: "create" } },
      { id: "c-overwrite", name: "file_write", arguments: { path: "b.txt", content: "b", mode: "overwrite" } },
      { id: "c-default", name: "file_write", arguments: { path: "c.txt", content: "c" } },
      { id: "c-get", name: "http_request", arguments: { url: site } },
      { id: "c-post", name: "http_request", arguments: { url: site, method: "POST", body: "{}" } },
    ];
    await using model = await startScriptedModelServer({
      handler: (req) => (req.messages.some((m) => m.role === "tool") ? scriptedReply.text("written and fetched") : scriptedReply.toolCalls(calls)),
    });
    const cluster = uniqueCluster("ats");
    await using rig = await startAgentNode(nats.url, cluster, {
      toml: [
        `[models.main]`,
        `base_url = "${model.url}"`,
        `model = "gpt-4o-mini"`,
        `[tools.file]`,
        `root = "${root.path}"`,
        `[tools.http]`,
        `allow_private = true`,
        `[[agents]]`,
        `id = "clerk"`,
        `model = "main"`,
        `tools = ["file_write", "http_request"]`,
      ].join("\n"),
      ready: ["clerk"],
    });
    // What the step journal on NATS receives (its entries are purged once the turn commits).
    const entries: JournalEntry[] = [];
    const sub = rig.client.nc.subscribe(rig.client.subjects.journal("clerk"), {
      callback: (_err, m) => void entries.push(decodeValue(m.data, "msgpack") as JournalEntry),
    });
    await using _sub = defer(() => sub.unsubscribe());
    await rig.client.nc.flush();

    const result = await askAgent(rig.client, "clerk", "write and fetch", { runId: "steps-run", timeoutMs: 30_000 });
    expect(result).toMatchObject({ status: "completed", output: "written and fetched" });
    const toolSteps = (kind: JournalEntry["k"]) =>
      Object.fromEntries(entries.filter((e) => e.k === kind && e.step?.name.startsWith("tool:")).map((e) => [e.step!.name, e.step!.idempotent]));
    expect(toolSteps("result")).toEqual({
      "tool:c-create": false,
      "tool:c-overwrite": true,
      "tool:c-default": true,
      "tool:c-get": true,
      "tool:c-post": false,
    });
    expect(toolSteps("intent")).toEqual({ "tool:c-create": false, "tool:c-post": false });
  }, 60_000);
});
