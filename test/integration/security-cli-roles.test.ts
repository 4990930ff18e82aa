import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { ActorTypeRegistry } from "../../src/actors/index.js";
import { askAgent, type AgentResult } from "../../src/agents/index.js";
import { KovaClient, type KovaEvent } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger, silentLogger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { scriptedReply, startScriptedModelServer, type NatsServerHandle, type ScriptedModelServer } from "../../src/testing/index.js";
import { collectEvents } from "../fixtures/agents/rig.js";
import { poll } from "../fixtures/poll.js";
import {
  connectAs,
  expectPermissionDenied,
  expectSubscriptionsRefused,
  kovaArgv,
  kovaAs,
  nodeTomlAs,
  role,
  startAccountsServer,
  type Role,
} from "../fixtures/security/accounts.js";

// The commands that landed after deploy/nats/accounts.conf was first written, run from the
// CLI (bin/kova.js, from dist/: build first) under the role meant to use them, against a
// node (role `node`) hosting real LLM agents on a scripted model.
let server: NatsServerHandle;
let model: ScriptedModelServer;
let node: KovaNode;
let dir: string;
let admin: KovaClient;
let events: KovaEvent[];
let stopEvents: () => void;

const WORKFLOW = `[workflow]
id = "ops"
input = { topic = "string" }

[[steps]]
id = "draft"
agent = "helper"
task = "draft {{input.topic}}"

[[steps]]
id = "approve"
type = "wait"
for = "approval"
timeout = "1h"

[[steps]]
id = "go"
type = "wait"
for = "event"
event = "go"
timeout = "1h"
`;

async function kova(r: Role, args: string[]): Promise<string> {
  const res = await kovaAs(server, r, args);
  expect(res.code, `kova ${args.join(" ")} as ${r}: ${res.stderr}`).toBe(0);
  return res.stdout;
}

async function runStatus(runId: string): Promise<string> {
  return (JSON.parse(await kova("operator", ["workflow", "status", runId, "--json"])) as { status: string }).status;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "kova-cliroles-"));
  server = await startAccountsServer(dir);
  model = await startScriptedModelServer({
    handler: (r) => {
      const result = r.messages.find((m) => m.role === "tool");
      if (result) return scriptedReply.text("The answer is 42.");
      const text = String(r.lastMessage?.content ?? "");
      if (text.includes("6*7")) return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "6*7" } }]);
      return scriptedReply.text(`echo: ${text.slice(0, 40)}`, { usage: { inputTokens: 10, outputTokens: 5 } });
    },
  });
  const config = parseConfig(
    nodeTomlAs(server, join(dir, "node"), model.url, [
      `[[agents]]\nid = "helper"\nmodel = "main"\ncapabilities = ["chat"]`,
      `[[agents]]\nid = "worker"\nmodel = "main"\ntools = ["calculator"]\napproval = ["calculator"]`,
      `[[swarms]]\nid = "planner"\nmodel = "main"`,
    ]),
    { env: process.env },
  );
  node = await KovaNode.start({ config, logger: process.env.KOVA_TEST_LOGS ? createLogger() : silentLogger(), types: new ActorTypeRegistry() });
  admin = await KovaClient.connect({ servers: server.url, security: role("node") });
  ({ events, stop: stopEvents } = await collectEvents(admin.bus));
  for (const id of ["helper", "worker", "planner"]) {
    await poll(() => admin.request(id, "info_request", null).then(() => true), { timeoutMs: 20_000, retryErrors: true, what: `agent ${id} serving` });
  }
  await writeFile(join(dir, "ops.toml"), WORKFLOW);
}, 60_000);

afterAll(async () => {
  stopEvents?.();
  await admin?.close();
  await node?.stop();
  await model?.close();
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("security: the CLI under the roles of deploy/nats/accounts.conf", () => {
  it("operator cli - workflow run, status, approve, signal, ls and cancel, and the run tree from the events stream", async () => {
    const started = JSON.parse(await kova("operator", ["workflow", "run", join(dir, "ops.toml"), "--input", "topic=nats", "--json"])) as { runId: string };
    const runId = started.runId;
    await poll(async () => (await kova("operator", ["workflow", "status", runId])).includes("waiting for approval approve"), {
      timeoutMs: 30_000,
      what: "the run to wait for approval",
    });
    expect(await kova("operator", ["approve", runId, "approve", "--by", "ops"])).toContain(`approved approve of ${runId}`);
    await poll(async () => (await kova("operator", ["workflow", "status", runId])).includes("waiting for event go"), {
      timeoutMs: 30_000,
      what: "the run to wait for the event",
    });
    await kova("operator", ["workflow", "signal", runId, "go"]);
    // Ended runs are retired: their status comes from the checkpoint, read only.
    await poll(async () => (await runStatus(runId)) === "completed", { timeoutMs: 30_000, what: "the run to complete" });
    const tree = await kova("operator", ["events", "tail", "--session", runId, "--tree", "--until-done"]);
    expect(tree).toContain("helper");

    const cancelId = "wf-ops-cancel";
    await kova("operator", ["workflow", "run", join(dir, "ops.toml"), "--input", "topic=other", "--run-id", cancelId]);
    await poll(async () => (await kova("operator", ["workflow", "status", cancelId])).includes("waiting for approval"), {
      timeoutMs: 30_000,
      what: "the second run to wait",
    });
    expect(await kova("operator", ["workflow", "cancel", cancelId, "--reason", "not needed"])).toContain(`cancelled ${cancelId}`);
    await poll(async () => (await runStatus(cancelId)) === "cancelled", { timeoutMs: 30_000, what: "the second run cancelled" });

    const runs = JSON.parse(await kova("operator", ["workflow", "ls", "--json"])) as Array<{ runId: string; status: string }>;
    expect(runs.map((r) => [r.runId, r.status]).sort()).toEqual(
      [
        [runId, "completed"],
        [cancelId, "cancelled"],
      ].sort(),
    );
  }, 120_000);

  it("operator cli - an agent's tool call approved and rejected, schedules, swarm run, events tail, tools ls and agents usage", async () => {
    const pending: Promise<AgentResult> = askAgent(admin, "worker", "What is 6*7?", { runId: "appr-1", timeoutMs: 60_000 });
    const asked = await poll(() => events.find((e) => e.runId === "appr-1" && e.type === "approval_requested"), {
      timeoutMs: 20_000,
      what: "approval_requested",
    });
    const { approvalId } = asked.data as { approvalId: string };
    expect(await kova("operator", ["approve", "appr-1", approvalId, "--by", "ops"])).toContain(
      `approved ${approvalId} of appr-1 (agent worker, tool calculator)`,
    );
    expect(await pending).toMatchObject({ status: "completed", output: "The answer is 42." });
    const again = await kovaAs(server, "operator", ["reject", "appr-1", approvalId]);
    expect(again.stderr).toContain("APPROVAL_ALREADY_DECIDED");

    await kova("operator", ["schedules", "add", "nightly", "--cron", "0 3 * * *", "--to", "helper", "--input", "report"]);
    const schedules = JSON.parse(await kova("operator", ["schedules", "ls", "--json"])) as Array<{ spec: { id: string } }>;
    expect(schedules.map((s) => s.spec.id)).toEqual(["nightly"]);
    expect(await kova("operator", ["schedules", "rm", "nightly"])).toContain("removed schedule nightly");

    const swarm = JSON.parse(
      await kova("operator", ["swarm", "run", "summarize nats", "--coordinator", "planner", "--plan", '[{"task":"part one","capability":"chat"}]', "--json"]),
    ) as { output: string; runId: string };
    expect(swarm.output).toContain("echo:");

    // A live tail: started first, it prints the next event of the session.
    const tail = spawn(process.execPath, kovaArgv(server, "operator", ["events", "tail", "--session", "tail-s", "--max", "1"]), {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, KOVA_LOG_LEVEL: "warn" },
    });
    let out = "";
    let err = "";
    tail.stdout.on("data", (c: Buffer) => (out += c.toString()));
    tail.stderr.on("data", (c: Buffer) => (err += c.toString()));
    const exited = new Promise<number | null>((resolve) => tail.on("exit", resolve));
    await poll(() => err.includes("tailing"), { timeoutMs: 20_000, what: () => `the tail to subscribe (stderr: ${err})` });
    await askAgent(admin, "helper", "hello tail", { sessionId: "tail-s", timeoutMs: 30_000 });
    expect(await exited).toBe(0);
    expect((JSON.parse(out.trim()) as KovaEvent).sessionId).toBe("tail-s");

    const tools = JSON.parse(await kova("operator", ["tools", "ls", "worker", "--json"])) as { tools: Array<{ name: string; requiresApproval: boolean }> };
    expect(tools.tools).toContainEqual(expect.objectContaining({ name: "calculator", requiresApproval: true }));

    const usage = JSON.parse(await kova("operator", ["agents", "usage", "--json"])) as Array<{ agentId: string; usage: { runs: number } }>;
    expect(usage.find((u) => u.agentId === "worker")?.usage.runs).toBe(1);
    expect(usage.map((u) => u.agentId)).toContain("helper");
  }, 120_000);

  it("operator cli - kova ask follows the run's events (the answer streams) and prints the answer", async () => {
    const asked = await kovaAs(server, "operator", ["ask", "helper", "hello", "from", "an", "operator", "--verbose"]);
    expect(asked.code, asked.stderr).toBe(0);
    expect(asked.stdout.trim()).toBe("echo: hello from an operator");
    // It read the events (the client falls back to waiting for the result, saying so).
    expect(asked.stderr).not.toContain("may not read events");
    expect(asked.stderr).toContain("[completed · run ");
  }, 60_000);

  it("operator - still cannot write checkpoints, read a mailbox, or read another role's inbox", async () => {
    await using nc: NatsConnection = await connectAs(server, "operator");
    await expectPermissionDenied(nc.request("$KV.kova_default_checkpoints.helper", new TextEncoder().encode("{}"), { timeout: 2000 }));
    const jsm = await jetstreamManager(nc, { timeout: 2000 });
    await expectPermissionDenied(
      jsm.consumers.add("KOVA_DEFAULT_A2A", { durable_name: "steal", filter_subject: "kova.default.a2a.helper", ack_policy: AckPolicy.Explicit }),
    );
    // Consumers on EVENTS only with a filter on events subjects (what ordered readers use).
    await expectPermissionDenied(jsm.consumers.add("KOVA_DEFAULT_EVENTS", { durable_name: "keep", ack_policy: AckPolicy.Explicit }));
    await expectPermissionDenied(jsm.streams.delete("KV_kova_default_checkpoints"));
    await expectSubscriptionsRefused(nc, ["_INBOX_client.>", "_INBOX_gateway.>"]);
  }, 60_000);

  it("client cli - kova send, request and ask work without reading events; following events and workflows are refused before anything is sent", async () => {
    expect(await kova("client", ["send", "helper", "--type", "task_delegate", "--payload", '{"input":"from a client"}'])).toContain("sent ");
    expect(JSON.parse(await kova("client", ["request", "helper", "--type", "info_request"]))).toMatchObject({ agentId: "helper" });
    const asked = await kovaAs(server, "client", ["ask", "helper", "hello", "from", "a", "client", "--verbose"]);
    expect(asked.code, asked.stderr).toBe(0);
    expect(asked.stdout.trim()).toBe("echo: hello from a client");
    expect(asked.stderr).toContain("may not read events");

    await using kc = await KovaClient.connect({ servers: server.url, security: role("client"), ensureStreams: false });
    const before = model.requests.length;
    const err = await askAgent(kc, "helper", "never sent", { onEvent: () => undefined, timeoutMs: 10_000 }).catch((e: unknown) => e);
    expect(isKovaError(err, "PERMISSION_DENIED"), String(err)).toBe(true);
    expect(model.requests.length).toBe(before);

    const wf = await kovaAs(server, "client", ["workflow", "run", join(dir, "ops.toml"), "--input", "topic=x"]);
    expect(wf.code).not.toBe(0);
    expect(wf.stderr).toMatch(/permission/i);
  }, 60_000);
});
