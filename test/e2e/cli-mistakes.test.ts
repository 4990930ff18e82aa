import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import { runSwarm } from "../../src/swarm/index.js";
import { scriptedReply, startScriptedModelServer, type ScriptedModelServer } from "../../src/testing/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/**
 * What a new user gets wrong: a mistyped or misused id, a payload of the wrong shape. Each
 * must fail at once (exit 1) with an error that says what to do, not after a timeout. One
 * node process; the tests share it because starting it is the slow part. The cluster has
 * an agent `helper`, a template `support` and a swarm `planner`.
 */
let model: ScriptedModelServer;
let tc: TestCluster;

beforeAll(async () => {
  model = await startScriptedModelServer({
    handler: (req) => (req.lastMessage?.content === "fail" ? scriptedReply.error(400, { message: "scripted refusal" }) : scriptedReply.text("ok")),
  });
  const toml = [
    `[models.main]`,
    `base_url = "${model.url}"`,
    `model = "gpt-4o-mini"`,
    `max_retries = 0`,
    `[[agents]]`,
    `id = "helper"`,
    `model = "main"`,
    `system = "You help."`,
    `[[agent_templates]]`,
    `name = "support"`,
    `model = "main"`,
    `system = "You help."`,
    `[[swarms]]`,
    `id = "planner"`,
    `model = "main"`,
  ].join("\n");
  tc = await TestCluster.create({ nodes: ["n1"], logLevel: "warn", extraToml: toml });
  await poll(async () => (await tc.agents()).get("helper")?.node === "n1", { timeoutMs: 20_000, what: "helper hosted on n1" });
}, 60_000);
afterAll(async () => {
  await tc?.stop();
  await model?.close();
});

/** How many messages the A2A stream holds for `agentId`. */
async function storedFor(agentId: string): Promise<number> {
  const subject = tc.bus.subjects.a2a(agentId);
  const info = await tc.bus.jsm.streams.info(tc.bus.subjects.streams.a2a, { subjects_filter: subject });
  return info.state.subjects?.[subject] ?? 0;
}

describe("unknown ids fail at once", () => {
  it("swarm - kova swarm run and runSwarm with a mistyped coordinator fail at once with UNKNOWN_AGENT and store nothing", async () => {
    const started = Date.now();
    const cli = await tc.cli(["swarm", "run", "x", "--coordinator", "planr"]);
    expect(cli.code, cli.stderr).toBe(1);
    expect(cli.stderr).toContain("UNKNOWN_AGENT");
    expect(cli.stderr).toContain("no agent planr is declared");
    const err = await runSwarm(tc.bus, "planr", "x").catch((e: unknown) => e);
    expect(isKovaError(err) && err.code).toBe("UNKNOWN_AGENT");
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(await storedFor("planr")).toBe(0);
  });
});

describe("raw task_delegate asks", () => {
  it("agents - kova ask --type task_delegate exits 1 when the run fails, and a payload without input is told to set payload.input", async () => {
    const ok = await tc.cli(["ask", "helper", "--type", "task_delegate", "--payload", '{"input":"hi"}']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ status: "completed", output: "ok" });

    const wrongShape = await tc.cli(["ask", "helper", "--type", "task_delegate", "--payload", '{"topic":"nats"}']);
    expect(wrongShape.code).toBe(1);
    expect(JSON.parse(wrongShape.stdout)).toMatchObject({ status: "failed", error: { code: "AGENT_INPUT_INVALID" } });
    expect(wrongShape.stderr).toContain("payload.input must be a non-empty string (a task_delegate to an agent carries { input, sessionId?, constraints? }");
    expect(wrongShape.stderr).toContain("got the fields topic");

    const failing = await tc.cli(["ask", "helper", "--type", "task_delegate", "--payload", '{"input":"fail"}']);
    expect(failing.code).toBe(1);
    expect(failing.stderr).toMatch(/run [\w-]+ failed: .*scripted refusal/);
  });
});

describe("files and ids a new user gets wrong", () => {
  it("workflow - kova workflow run on an empty file names the file and says what a workflow file starts with", async () => {
    const file = join(tc.dir, "t.toml");
    await writeFile(file, "");
    const r = await tc.cli(["workflow", "run", file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${file}: is empty: a workflow file starts with a [workflow] table`);
    expect(r.stderr).not.toContain("undefined");
  });

  it("config - kova node start --config with bad TOML names the file", async () => {
    const file = join(tc.dir, "k.toml");
    await writeFile(file, "[node]\nid = n1\n");
    const r = await tc.cli(["node", "start", "--config", file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${file}: invalid TOML at line 2`);
    expect(r.stderr).toContain("INVALID_CONFIG");
  });

  it("templates - kova ask <template name> says it is a template and to pass --key", async () => {
    const r = await tc.cli(["ask", "support", "hi"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("support is a template, not an agent");
    expect(r.stderr).toContain("kova ask support --key <key>");
    expect(r.stderr).toContain("UNKNOWN_AGENT");
    expect(await storedFor("support")).toBe(0);
  });

  it("agents - kova agents usage <unknown id> fails with UNKNOWN_AGENT as ask does", async () => {
    const r = await tc.cli(["agents", "usage", "helpr"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("no agent helpr is declared");
    expect(r.stderr).toContain("UNKNOWN_AGENT");
    expect(r.stderr).not.toContain("no responders");
    const known = await tc.cli(["agents", "usage", "helper", "--json"]);
    expect(known.code, known.stderr).toBe(0);
  });

  it("bus - kova send to an undeclared id fails at once and stores nothing, unless --allow-unknown; an instance id of a template is activated and sent to", async () => {
    const r = await tc.cli(["send", "helpr", "--type", "task_delegate", "--payload", '{"input":"hi"}']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("no agent helpr is declared");
    expect(r.stderr).toContain("nothing was sent");
    expect(r.stderr).toContain("--allow-unknown");
    expect(r.stderr).toContain("UNKNOWN_AGENT");
    expect(await storedFor("helpr")).toBe(0);
    const forced = await tc.cli(["send", "helpr", "--type", "task_delegate", "--payload", '{"input":"hi"}', "--allow-unknown"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(await storedFor("helpr")).toBe(1);
    const instance = await tc.cli(["send", "support", "--key", "u7", "--type", "task_delegate", "--payload", '{"input":"hi from u7"}']);
    expect(instance.code, instance.stderr).toBe(0);
    expect(instance.stdout).toContain("sent ");
    // (the instance takes the message and acks it, so it is not counted in the stream: its model call shows it arrived)
    await poll(() => model.requests.some((r) => r.lastMessage?.content === "hi from u7"), { timeoutMs: 20_000, what: "the instance's run" });
  });

  it("schedules - kova schedules add --to an undeclared id adds the schedule and warns on stderr that its messages would wait unanswered", async () => {
    const r = await tc.cli(["schedules", "add", "typo", "--every", "1h", "--to", "helpr", "--input", "report"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("added schedule typo");
    expect(r.stderr).toContain("warning: no agent helpr is declared");
    expect(r.stderr).toContain("unknown_agent");
    for (const to of ["helper", "support--u8"]) {
      const ok = await tc.cli(["schedules", "add", `fine-${to.length}`, "--every", "1h", "--to", to, "--input", "report"]);
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stderr).toBe("");
    }
    const noTemplate = await tc.cli(["schedules", "add", "typo2", "--every", "1h", "--to", "suport--u8"]);
    expect(noTemplate.stderr).toContain("nor a template suport");
  });
});
