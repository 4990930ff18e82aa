import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import type { CounterState } from "../../src/actors/index.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const ROOT = join(import.meta.dirname, "../..");
const CHILD = join(ROOT, "test/fixtures/actors/host-child.mjs");

/** A spawned host process and everything it printed. */
interface Child {
  proc: ChildProcess;
  lines: string[];
  exited: Promise<void>;
}

function spawnHost(env: Record<string, string>): Child {
  const proc = spawn(process.execPath, [CHILD], {
    env: { ...process.env, KOVA_LOG_LEVEL: "silent", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  let buf = "";
  proc.stdout!.on("data", (d: Buffer) => {
    buf += d.toString();
    const parts = buf.split("\n");
    buf = parts.pop()!;
    lines.push(...parts);
  });
  let stderr = "";
  proc.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) =>
    proc.on("exit", (code, sig) => {
      if (code) lines.push(`EXIT ${code} ${stderr.slice(0, 2000)}`);
      else lines.push(`EXIT ${sig ?? code}`);
      resolve();
    }),
  );
  return { proc, lines, exited };
}

async function line(child: Child, prefix: string, timeoutMs = 15_000): Promise<string> {
  return poll(
    () => {
      const exit = child.lines.find((l) => l.startsWith("EXIT ") && l !== "EXIT SIGKILL");
      if (exit) throw new Error(`child exited: ${exit}`);
      return child.lines.find((l) => l.startsWith(prefix));
    },
    { timeoutMs, what: () => `child line "${prefix}" (got: ${child.lines.join(" | ")})` },
  );
}

async function sigkill(child: Child): Promise<void> {
  child.proc.kill("SIGKILL");
  await child.exited;
}

let server: NatsServerHandle;
beforeAll(async () => {
  if (!existsSync(join(ROOT, "dist/actors/index.js"))) throw new Error("run `npm run build` first: the child host imports dist/");
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  await server?.stop();
});

describe("actor host across SIGKILL (spawned process)", () => {
  it("sigkill - a host killed mid-turn resumes the turn in Recovering on restart, reusing recorded steps, and the counter loses and repeats nothing", async () => {
    const cluster = uniqueCluster("ak");
    await using tmp = await tempDir("kova-actors-e2e-");
    const dir = tmp.path;
    const effects = join(dir, "effects.log");
    await writeFile(effects, "");
    const env = { NATS_URL: server.url, CLUSTER: cluster, WAL_DIR: join(dir, "wal"), EFFECTS_FILE: effects, ACTORS: "j1:journaled,j2:journaled,c1:counter" };
    await using bus = await connectBus(server.url, cluster);
    let child = spawnHost({ ...env, HOLD: "1" });
    await using _child = defer(() => (child.proc.exitCode === null && child.proc.signalCode === null ? sigkill(child) : undefined));
    await line(child, "READY");
    // Counter messages flow while the journaled actors are mid-turn when the kill comes:
    // a sender keeps publishing until a few messages after the kill, so the kill always
    // falls inside the flow, however fast the counter keeps up on this machine.
    const counted: ReturnType<typeof createEnvelope>[] = [];
    const sendOne = async () => {
      const e = createEnvelope({ from: "tester", to: "c1", type: "task_delegate", payload: null });
      counted.push(e);
      await bus.send(e);
    };
    for (let i = 0; i < 15; i++) await sendOne();
    const slow = createEnvelope({ from: "tester", to: "j1", type: "task_delegate", payload: "slow" });
    const charge = createEnvelope({ from: "tester", to: "j2", type: "task_delegate", payload: "charge" });
    await bus.send(slow);
    await bus.send(charge);
    const plan1 = await line(child, `PLAN ${slow.id}`);
    await line(child, `IN_SLOW ${slow.id}`);
    await line(child, `IN_CHARGE ${charge.id}`);
    let killed = false;
    const sending = (async () => {
      let afterKill = 0;
      while (afterKill < 5) {
        await sendOne();
        if (killed) afterKill++;
        await new Promise((r) => setTimeout(r, 5)); // paced: a flow, not a flood to drain later
      }
    })();
    const atKill = await poll(
      async () => {
        const i = await bus.request<CounterState>("c1", "info_request", null);
        return i.count >= 10 ? i : undefined;
      },
      { timeoutMs: 10_000, what: "counter progress", retryErrors: true },
    );
    await sigkill(child);
    killed = true;
    await sending;
    expect(atKill.count).toBeLessThan(counted.length);

    child = spawnHost({ ...env, HOLD: "0" });
    await line(child, "READY", 20_000);
    const states = (id: string) => child.lines.filter((l) => l.startsWith(`STATE ${id} `)).map((l) => l.split(" ")[2]);
    expect(states("j1").slice(0, 2)).toEqual(["Recovering", "Idle"]);
    expect(states("j2").slice(0, 2)).toEqual(["Recovering", "Idle"]);

    const j1 = await bus.request<{ results: Array<Record<string, unknown>> }>("j1", "info_request", null);
    expect(j1.results).toHaveLength(1);
    expect(j1.results[0]).toMatchObject({ id: slow.id, slow: "slow done", replaying: true });
    // The plan step's result (a recorded id and clock reading) is reused, not recomputed.
    expect(`PLAN ${slow.id} ${JSON.stringify(j1.results[0]!.plan)}`).toBe(plan1);
    const j2 = await bus.request<{ results: Array<Record<string, unknown>> }>("j2", "info_request", null);
    expect(j2.results[0]).toMatchObject({ id: charge.id, charge: "outcome unknown" });

    const log = readFileSync(effects, "utf8").trim().split("\n");
    const count = (l: string) => log.filter((x) => x === l).length;
    expect(count(`plan:${slow.id}`)).toBe(1);
    expect(count(`slow:${slow.id}`)).toBe(2); // idempotent: re-run once on recovery
    expect(count(`plan:${charge.id}`)).toBe(1);
    expect(count(`charge:${charge.id}`)).toBe(1); // not idempotent: never re-run

    const info = await poll(
      async () => {
        const i = await bus.request<CounterState>("c1", "info_request", null);
        return i.count >= counted.length ? i : undefined;
      },
      { timeoutMs: 20_000, what: "every acknowledged counter message", retryErrors: true },
    );
    expect(info.count).toBe(counted.length);
    expect(new Set(info.ids).size).toBe(info.ids.length);
    expect(new Set(info.ids)).toEqual(new Set(counted.map((e) => e.id)));
  }, 60_000);
});
