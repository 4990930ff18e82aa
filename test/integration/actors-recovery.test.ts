import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { Wal } from "../../src/wal/index.js";
import { defineActor, TURN_KIND, type TurnRecord } from "../../src/actors/index.js";
import { newTurnRecord } from "../../src/actors/turn-record.js";
import { startNatsServer } from "../../src/testing/index.js";
import { fileServer, startRig, uniqueCluster, waitFor } from "../fixtures/actors/helpers.js";

const server = fileServer();

interface StepperState {
  t?: number;
  reply?: string;
  fetched?: string;
  charge?: string;
  replaying?: boolean;
}

function stepper() {
  const calls: string[] = [];
  const def = defineActor<StepperState>({
    type: "stepper",
    initialState: () => ({}),
    handlers: {
      task_delegate: async (ctx) => {
        calls.push("handler");
        ctx.state.replaying = ctx.replaying;
        ctx.state.t = ctx.now();
        ctx.state.reply = await ctx.step("llm", async () => {
          calls.push("llm");
          return "fresh reply";
        });
        ctx.state.fetched = await ctx.step("fetch", async () => {
          calls.push("fetch");
          return "fetched again";
        }, { idempotent: true });
        try {
          ctx.state.charge = await ctx.step("charge", async () => {
            calls.push("charge");
            return "charged";
          });
        } catch (err) {
          ctx.state.charge = `outcome ${(err as { outcome?: string }).outcome}`;
        }
      },
    },
  });
  return { def, calls };
}

/** Leaves the WAL as a SIGKILL mid-turn would: a PENDING turn record with some steps recorded. */
async function crashedWal(dir: string, record: TurnRecord): Promise<void> {
  const wal = await Wal.open({ dir, sync: "full", ringBits: 8 });
  await wal.append(TURN_KIND, record, { owner: record.actorId });
  await wal.close();
}

describe("actor recovery from the WAL", () => {
  it("recovery - a host started on a WAL with a pending turn resumes it in Recovering, reusing recorded steps, re-running idempotent ones and reporting unknown outcomes", async () => {
    const cluster = uniqueCluster();
    const dir = await mkdtemp(join(tmpdir(), "kova-actors-rec-"));
    const env = createEnvelope({ from: "tester", to: "s1", type: "task_delegate", payload: "job" });
    const record = newTurnRecord("s1", "stepper", env);
    record.clock.push(1_234_567);
    record.steps.push(
      { name: "llm", status: "done", idempotent: false, result: "recorded reply" },
      { name: "fetch", status: "started", idempotent: true },
    );
    await crashedWal(dir, record);
    const charged = newTurnRecord("s2", "stepper", createEnvelope({ from: "tester", to: "s2", type: "task_delegate", payload: "job" }));
    charged.steps.push(
      { name: "llm", status: "done", idempotent: false, result: "r2" },
      { name: "fetch", status: "done", idempotent: true, result: "f2" },
      { name: "charge", status: "started", idempotent: false },
    );
    await crashedWal(dir, charged);

    const s = stepper();
    const rig = await startRig(server.url, cluster, [s.def], { dir });
    try {
      // The message was never acked before the crash, so it is still in the mailbox.
      await rig.bus.send(env);
      await rig.host.start("s1", "stepper");
      expect(rig.states.filter(([id]) => id === "s1").map(([, st]) => st)).toEqual(["Recovering", "Idle"]);
      const state = await rig.bus.request<StepperState>("s1", "info_request", null).catch(() => undefined);
      expect(state).toMatchObject({ actorId: "s1", state: "Idle", handled: 1 });
      expect(s.calls).toEqual(["handler", "fetch", "charge"]);
      expect(rig.wal.pendingFor("s1")).toEqual([]);

      s.calls.length = 0;
      await rig.host.start("s2", "stepper");
      expect(s.calls).toEqual(["handler"]);

      // The redelivered message of s1 is recognised and starts no second turn.
      await new Promise((r) => setTimeout(r, 300));
      expect(s.calls).toEqual(["handler"]);
      expect(rig.host.status("s1")?.handled).toBe(1);
    } finally {
      await rig.close();
    }
    // Both recovered states are checkpointed; a fresh host on the same WAL sees them.
    const again = await startRig(server.url, cluster, [
      defineActor<StepperState>({ ...s.def, rpc: { info_request: (_e, st) => st } }),
    ], { dir });
    try {
      await again.host.start("s1", "stepper");
      await again.host.start("s2", "stepper");
      const s1 = await again.bus.request<StepperState>("s1", "info_request", null);
      expect(s1).toEqual({ replaying: true, t: 1_234_567, reply: "recorded reply", fetched: "fetched again", charge: "charged" });
      const s2 = await again.bus.request<StepperState>("s2", "info_request", null);
      expect(s2).toMatchObject({ reply: "r2", fetched: "f2", charge: "outcome unknown" });
      expect(again.states.map(([, st]) => st)).toEqual(["Idle", "Idle"]);
    } finally {
      await again.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("recovery - a turn whose process died during every attempt ends Failed without running again, its message dead-lettered", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-actors-loop-"));
    const env = createEnvelope({ from: "tester", to: "x1", type: "task_delegate", payload: null });
    const record = newTurnRecord("x1", "stepper", env);
    record.attempt = 3; // the third attempt was running when the process died
    await crashedWal(dir, record);
    const s = stepper();
    const rig = await startRig(server.url, uniqueCluster(), [s.def], { dir });
    try {
      await rig.host.start("x1", "stepper");
      expect(s.calls).toEqual([]);
      expect(rig.host.status("x1")?.state).toBe("Failed");
      expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Failed"]);
      const dead = await waitFor(async () => (await rig.bus.listDlq({ reason: "handler_failed" }))[0], 5_000, "dead letter");
      expect(dead.headers["Kova-Dlq-Msg-Id"]).toBe(env.id);
      expect(dead.headers["Kova-Dlq-Error"]).toContain("the process ended during every attempt");
      expect(rig.wal.pendingFor("x1")).toEqual([]);
    } finally {
      await rig.close(true);
    }
  });

  it("recovery - pause during Recovering holds the recovered turn at its next step; resume returns to Recovering, then Idle", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-actors-rp-"));
    const env = createEnvelope({ from: "tester", to: "rp", type: "task_delegate", payload: null });
    await crashedWal(dir, newTurnRecord("rp", "twostep", env));
    let release: () => void = () => {};
    const released = new Promise<void>((r) => (release = r));
    const log: string[] = [];
    const twostep = defineActor({
      type: "twostep",
      initialState: () => ({}),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("a", async () => {
            log.push("a");
            await released;
          });
          await ctx.step("b", () => void log.push("b"));
        },
      },
    });
    const rig = await startRig(server.url, uniqueCluster(), [twostep], { dir });
    try {
      const starting = rig.host.start("rp", "twostep");
      await waitFor(() => log.includes("a"), 5_000, "recovered turn running");
      await rig.host.signal("rp", "pause");
      release();
      await new Promise((r) => setTimeout(r, 200));
      expect(log).toEqual(["a"]);
      expect(rig.host.status("rp")?.state).toBe("Paused");
      await rig.host.signal("rp", "resume");
      await starting;
      expect(log).toEqual(["a", "b"]);
      expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Paused", "Recovering", "Idle"]);
    } finally {
      await rig.close(true);
    }
  });

  it("recovery - an actor paused while it starts holds its recovered turn before the first step until resume", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-actors-ps-"));
    const env = createEnvelope({ from: "tester", to: "ps", type: "task_delegate", payload: "job" });
    await crashedWal(dir, newTurnRecord("ps", "stepper", env));
    const s = stepper();
    const rig = await startRig(server.url, uniqueCluster(), [s.def], { dir });
    try {
      const starting = rig.host.start("ps", "stepper");
      await rig.host.signal("ps", "pause");
      await new Promise((r) => setTimeout(r, 300));
      expect(s.calls).toEqual(["handler"]);
      expect(rig.host.status("ps")?.state).toBe("Paused");
      await rig.host.signal("ps", "resume");
      await starting;
      expect(s.calls).toEqual(["handler", "llm", "fetch", "charge"]);
      expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Paused", "Recovering", "Idle"]);
    } finally {
      await rig.close(true);
    }
  });

  it("recovery - abandon() completes the pending turns of an actor that moved, so they never run here", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-actors-ab-"));
    const env = createEnvelope({ from: "tester", to: "m1", type: "task_delegate", payload: null });
    await crashedWal(dir, newTurnRecord("m1", "counter", env));
    const rig = await startRig(server.url, uniqueCluster(), [], { dir });
    try {
      expect(rig.host.pendingActors()).toEqual(["m1"]);
      expect(await rig.host.abandon("m1")).toBe(1);
      expect(rig.host.pendingActors()).toEqual([]);
      await rig.host.start("m1", "counter");
      expect(rig.states.map(([, st]) => st)).toEqual(["Idle"]);
      const info = await waitFor(() => rig.bus.request<{ count: number }>("m1", "info_request", null), 5_000, "rpc");
      expect(info.count).toBe(0);
    } finally {
      await rig.close(true);
    }
  });
});

describe("actor turns across a NATS outage", () => {
  it("outage - a turn whose checkpoint cannot be written keeps its WAL record and the redelivery resumes it without re-running steps", async () => {
    const own = await startNatsServer({ allowExternal: false });
    let release: () => void = () => {};
    const released = new Promise<void>((r) => (release = r));
    let charged = 0;
    const payer = defineActor<{ paid: number }>({
      type: "payer",
      initialState: () => ({ paid: 0 }),
      handlers: {
        task_delegate: async (ctx) => {
          await released;
          await ctx.step("pay", () => ++charged);
          ctx.state.paid++;
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    const rig = await startRig(own.url, uniqueCluster(), [payer]);
    try {
      await rig.host.start("pay1", "payer");
      await rig.bus.send(task1("pay1"));
      await waitFor(() => rig.host.status("pay1")?.state === "Running", 5_000, "turn running");
      await own.kill();
      release();
      // The step is recorded locally; the checkpoint to NATS fails while the server is down.
      await waitFor(() => charged === 1 && rig.wal.pendingFor("pay1").length === 1, 5_000, "step recorded");
      await own.restart();
      const state = await waitFor(async () => {
        const s = await rig.bus.request<{ paid: number }>("pay1", "info_request", null);
        return s.paid === 1 ? s : undefined;
      }, 30_000, "turn committed after the outage");
      expect(state).toEqual({ paid: 1 });
      expect(charged).toBe(1);
      expect(rig.wal.pendingFor("pay1")).toEqual([]);
      expect(rig.host.status("pay1")).toMatchObject({ state: "Idle", handled: 1 });
    } finally {
      await rig.close(true);
      await own.stop();
    }
  }, 60_000);
});

function task1(to: string) {
  return createEnvelope({ from: "tester", to, type: "task_delegate", payload: null });
}
