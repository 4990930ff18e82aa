import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { A2AEnvelope } from "../../src/bus/index.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";
import { holdPort } from "../fixtures/ports.js";

const run = promisify(execFile);
const kova = join(import.meta.dirname, "../../bin/kova.js");

let server: NatsServerHandle;
beforeAll(async () => {
  if (!existsSync(join(import.meta.dirname, "../../dist/cli/main.js"))) throw new Error("run `npm run build` first: the CLI test runs bin/kova.js");
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  await server?.stop();
});

function cli(args: string[]) {
  return run(process.execPath, [kova, ...args], { env: { ...process.env, NATS_URL: "" }, timeout: 20_000 });
}

describe("kova CLI bus commands", () => {
  it("cli - kova send delivers to the mailbox and kova ask prints the agent's reply", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    const got: A2AEnvelope[] = [];
    await bus.openMailbox("researcher", async (env) => {
      got.push(env);
      if (env.replyTo) await bus.respond(env, { answer: 42, asked: env.payload });
    });
    const sent = await cli([
      "send",
      "researcher",
      "--type",
      "task_delegate",
      "--payload",
      '{"topic":"nats"}',
      "-s",
      server.url,
      "--cluster",
      cluster,
      "--id",
      "cli-1",
    ]);
    expect(sent.stdout).toContain(`sent cli-1 to kova.${cluster}.a2a.researcher`);
    await poll(() => got.length === 1, { timeoutMs: 5_000, what: "delivery" });
    expect(got[0]).toMatchObject({ id: "cli-1", from: "kova-cli", to: "researcher", type: "task_delegate", payload: { topic: "nats" } });

    const again = await cli(["send", "researcher", "--type", "task_delegate", "-s", server.url, "--cluster", cluster, "--id", "cli-1"]);
    expect(again.stdout).toContain("duplicate");

    const asked = await cli([
      "ask",
      "researcher",
      "--type",
      "task_delegate",
      "--payload",
      '"why?"',
      "-s",
      server.url,
      "--cluster",
      cluster,
      "--timeout",
      "5000",
    ]);
    expect(JSON.parse(asked.stdout)).toEqual({ answer: 42, asked: "why?" });
  });

  it("cli - kova events tail prints a session's events and kova dlq ls lists dead letters", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    const tail = spawn(process.execPath, [kova, "events", "tail", "--session", "s1", "--max", "1", "-s", server.url, "--cluster", cluster], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    tail.stdout.on("data", (c: Buffer) => (out += c.toString()));
    tail.stderr.on("data", (c: Buffer) => (err += c.toString()));
    const exited = new Promise<number | null>((r) => tail.once("exit", r));
    await poll(() => err.includes("tailing"), { timeoutMs: 30_000, what: "tail to subscribe" });
    const event = { type: "run_started", sessionId: "s1", runId: "r1", ts: 1 };
    await bus.publishEvent(event);
    expect(await exited).toBe(0);
    expect(JSON.parse(out.trim())).toEqual(event);

    const nc = await connect({ servers: server.url });
    await nc.request(bus.subjects.a2a("victim"), new TextEncoder().encode("not msgpack \xc1"), { timeout: 5_000 });
    await nc.close();
    await bus.openMailbox("victim", async () => {});
    await poll(async () => (await bus.listDlq()).length === 1, { timeoutMs: 5_000, what: "dead letter" });
    const ls = await cli(["dlq", "ls", "-s", server.url, "--cluster", cluster]);
    expect(ls.stdout).toMatch(/SEQ\s+TIME\s+REASON/);
    expect(ls.stdout).toMatch(/malformed_msgpack\s+victim/);
  });

  it("cli - an unreachable server and bad input give errors that say what to do", async () => {
    // Held, not only picked free: another test's nats-server could take a free port and answer.
    await using dead = await holdPort();
    const url = `nats://127.0.0.1:${dead.port}`;
    const down = await cli(["send", "a", "--type", "task_delegate", "-s", url]).catch((e: { code: number; stderr: string }) => e);
    expect((down as { code: number }).code).toBe(1);
    expect((down as { stderr: string }).stderr).toContain(`NATS unreachable at URL ${url}: start nats-server or set NATS_URL`);
    const badType = await cli(["send", "a", "--type", "shout", "-s", server.url]).catch((e: { stderr: string }) => e);
    expect((badType as { stderr: string }).stderr).toMatch(/not a message type: use one of task_delegate/);
    const badJson = await cli(["send", "a", "--type", "task_delegate", "--payload", "{nope", "-s", server.url]).catch((e: { stderr: string }) => e);
    expect((badJson as { stderr: string }).stderr).toContain("--payload: is not valid JSON");
  });
});
