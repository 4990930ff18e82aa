import { describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { Wal } from "../../src/wal/index.js";
import { defineActor, TURN_KIND, type TurnRecord } from "../../src/actors/index.js";
import { newTurnRecord } from "../../src/actors/turn-record.js";
import { startNatsServer } from "../../src/testing/index.js";
import { fileServer, startRig, uniqueCluster } from "../fixtures/actors/helpers.js";
import { connectBus, waitForConsumer } from "../fixtures/bus/helpers.js";
import { tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";
import { captureLogs } from "../fixtures/capture-logs.js";

const server = fileServer();

interface StepperState {
  t?: number;
  reply?: string;
  fetched?: string;
  charge?: string;
  replaying?: boolean;
}

/** @param paused whether the actor is paused now: a step that runs while it is gets marked so. */
function stepper(paused: () => boolean = () => false) {
  const calls: string[] = [];
  const mark = (step: string) => calls.push(paused() ? `${step} while paused` : step);
  const def = defineActor<StepperState>({
    type: "stepper",
    initialState: () => ({}),
    handlers: {
      task_delegate: async (ctx) => {
        calls.push("handler");
        ctx.state.replaying = ctx.replaying;
        ctx.state.t = ctx.now();
        ctx.state.reply = await ctx.step("llm", async () => {
          mark("llm");
          return "fresh reply";
        });
        ctx.state.fetched = await ctx.step(
          "fetch",
          async () => {
            mark("fetch");
            return "fetched again";
          },
          { idempotent: true },
        );
        try {
          ctx.state.charge = await ctx.step("charge", async () => {
            mark("charge");
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
    await using tmp = await tempDir("kova-actors-rec-");
    const dir = tmp.path;
    const env = createEnvelope({ from: "tester", to: "s1", type: "task_delegate", payload: "job" });
    const record = newTurnRecord("s1", "stepper", env);
    record.clock.push(1_234_567);
    record.steps.push({ name: "llm", status: "done", idempotent: false, result: "recorded reply" }, { name: "fetch", status: "started", idempotent: true });
    await crashedWal(dir, record);
    const charged = newTurnRecord("s2", "stepper", createEnvelope({ from: "tester", to: "s2", type: "task_delegate", payload: "job" }));
    charged.steps.push(
      { name: "llm", status: "done", idempotent: false, result: "r2" },
      { name: "fetch", status: "done", idempotent: true, result: "f2" },
      { name: "charge", status: "started", idempotent: false },
    );
    await crashedWal(dir, charged);

    const s = stepper();
    {
      await using rig = await startRig(server.url, cluster, [s.def], { dir });
      // The message was never acked before the crash, so it is still in the mailbox.
      const sent = await rig.bus.send(env);
      await rig.host.start("s1", "stepper");
      expect(rig.states.filter(([id]) => id === "s1").map(([, st]) => st)).toEqual(["Recovering", "Idle"]);
      const state = await rig.bus.request<StepperState>("s1", "info_request", null).catch(() => undefined);
      expect(state).toMatchObject({ actorId: "s1", state: "Idle", handled: 1 });
      expect(s.calls).toEqual(["handler", "fetch", "charge"]);
      expect(rig.wal.pendingFor("s1")).toEqual([]);

      s.calls.length = 0;
      await rig.host.start("s2", "stepper");
      expect(s.calls).toEqual(["handler"]);

      // The redelivered message of s1 is recognised and starts no second turn: once the
      // server counts it acked, the mailbox has handled it.
      await waitForConsumer(rig.bus, "s1", "to ack the recovered turn's message", (ci) => ci.ack_floor.stream_seq >= sent.seq && ci.num_ack_pending === 0);
      expect(s.calls).toEqual(["handler"]);
      expect(rig.host.status("s1")?.handled).toBe(1);
    }
    // Both recovered states are checkpointed; a fresh host on the same WAL sees them.
    await using again = await startRig(server.url, cluster, [defineActor<StepperState>({ ...s.def, rpc: { info_request: (_e, st) => st } })], { dir });
    await again.host.start("s1", "stepper");
    await again.host.start("s2", "stepper");
    const s1 = await again.bus.request<StepperState>("s1", "info_request", null);
    expect(s1).toEqual({ replaying: true, t: 1_234_567, reply: "recorded reply", fetched: "fetched again", charge: "charged" });
    const s2 = await again.bus.request<StepperState>("s2", "info_request", null);
    expect(s2).toMatchObject({ reply: "r2", fetched: "f2", charge: "outcome unknown" });
    expect(again.states.map(([, st]) => st)).toEqual(["Idle", "Idle"]);
  });

  it("recovery - a pending turn of a reply published to a replyTo inbox (no Nats-Msg-Id) is finished, not dropped as if its message were gone", async () => {
    const cluster = uniqueCluster();
    await using tmp = await tempDir("kova-actors-reply-");
    // An agent's answer to a run's task: published to the run's inbox by core NATS, stored by the A2A stream.
    await using publisher = await connectBus(server.url, cluster);
    const inbox = publisher.subjects.a2a("run-1");
    const task = createEnvelope({ from: "run-1", to: "agent-1", type: "task_delegate", payload: "step", replyTo: inbox });
    const reply = await publisher.respond(task, { output: "done" });
    const stored = await poll(() => publisher.jsm.streams.getMessage(publisher.subjects.streams.a2a, { last_by_subj: inbox }), {
      timeoutMs: 5_000,
      retryErrors: true,
      what: "the reply stored",
    });
    expect(stored!.header?.get("Nats-Msg-Id") ?? "").toBe("");
    await crashedWal(tmp.path, newTurnRecord("run-1", "collector", reply, stored!.seq));

    const handled: string[] = [];
    const collector = defineActor<{ results: unknown[] }>({
      type: "collector",
      initialState: () => ({ results: [] }),
      handlers: {
        result_notify: async (ctx) => {
          handled.push(ctx.message.id);
          ctx.state.results.push(ctx.message.payload);
        },
      },
      rpc: { info_request: (_e, st) => st },
    });
    await using rig = await startRig(server.url, cluster, [collector], { dir: tmp.path });
    await rig.host.start("run-1", "collector");
    expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Idle"]);
    expect(handled).toEqual([reply.id]);
    expect(rig.wal.pendingFor("run-1")).toEqual([]);
    // Its delivery is then recognised as handled: acked, no second turn.
    await waitForConsumer(rig.bus, "run-1", "to ack the recovered reply", (ci) => ci.ack_floor.stream_seq >= stored!.seq && ci.num_ack_pending === 0);
    expect(handled).toEqual([reply.id]);
    expect(await rig.bus.request("run-1", "info_request", null)).toEqual({ results: [{ output: "done" }] });
  });

  it("recovery - a turn whose process died during every attempt ends Failed without running again, its message dead-lettered", async () => {
    await using tmp = await tempDir("kova-actors-loop-");
    const dir = tmp.path;
    const env = createEnvelope({ from: "tester", to: "x1", type: "task_delegate", payload: null });
    const record = newTurnRecord("x1", "stepper", env);
    record.attempt = 3; // the third attempt was running when the process died
    await crashedWal(dir, record);
    const s = stepper();
    await using rig = await startRig(server.url, uniqueCluster(), [s.def], { dir });
    await rig.host.start("x1", "stepper");
    expect(s.calls).toEqual([]);
    expect(rig.host.status("x1")?.state).toBe("Failed");
    expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Failed"]);
    const dead = await poll(async () => (await rig.bus.listDlq({ reason: "handler_failed" }))[0], { timeoutMs: 5_000, what: "dead letter", retryErrors: true });
    expect(dead.headers["Kova-Dlq-Msg-Id"]).toBe(env.id);
    expect(dead.headers["Kova-Dlq-Error"]).toContain("the process ended during every attempt");
    expect(rig.wal.pendingFor("x1")).toEqual([]);
  });

  it("recovery - pause during Recovering holds the recovered turn at its next step; resume returns to Recovering, then Idle", async () => {
    await using tmp = await tempDir("kova-actors-rp-");
    const dir = tmp.path;
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
          // Logged in the same synchronous run that asks the pause gate for step b.
          log.push("at b");
          await ctx.step("b", () => void log.push(rig.host.status("rp")?.paused ? "b while paused" : "b"));
        },
      },
    });
    await using rig = await startRig(server.url, uniqueCluster(), [twostep], { dir });
    const starting = rig.host.start("rp", "twostep");
    await poll(() => log.includes("a"), { timeoutMs: 5_000, what: "recovered turn running" });
    await rig.host.signal("rp", "pause");
    release();
    // The positive signal: step a is done and the turn has reached the gate of step b.
    await poll(() => log.includes("at b"), { timeoutMs: 5_000, what: "the recovered turn to reach step b" });
    expect(log).toEqual(["a", "at b"]);
    expect(rig.host.status("rp")?.state).toBe("Paused");
    await rig.host.signal("rp", "resume");
    await starting;
    expect(log).toEqual(["a", "at b", "b"]);
    expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Paused", "Recovering", "Idle"]);
  });

  it("recovery - an actor paused while it starts holds its recovered turn before the first step until resume", async () => {
    await using tmp = await tempDir("kova-actors-ps-");
    const dir = tmp.path;
    const env = createEnvelope({ from: "tester", to: "ps", type: "task_delegate", payload: "job" });
    await crashedWal(dir, newTurnRecord("ps", "stepper", env));
    const s = stepper(() => rig.host.status("ps")?.paused === true);
    await using rig = await startRig(server.url, uniqueCluster(), [s.def], { dir });
    const starting = rig.host.start("ps", "stepper");
    await rig.host.signal("ps", "pause");
    // The handler logs "handler" in the same synchronous run that asks the gate for its
    // first step; a step run before resume would be logged "… while paused".
    await poll(() => s.calls.includes("handler"), { timeoutMs: 5_000, what: "the recovered turn to reach its first step" });
    expect(s.calls).toEqual(["handler"]);
    expect(rig.host.status("ps")?.state).toBe("Paused");
    await rig.host.signal("ps", "resume");
    await starting;
    expect(s.calls).toEqual(["handler", "llm", "fetch", "charge"]);
    expect(rig.states.map(([, st]) => st)).toEqual(["Recovering", "Paused", "Recovering", "Idle"]);
  });

  it("recovery - abandon() completes the pending turns of an actor that moved, so they never run here", async () => {
    await using tmp = await tempDir("kova-actors-ab-");
    const dir = tmp.path;
    const env = createEnvelope({ from: "tester", to: "m1", type: "task_delegate", payload: null });
    await crashedWal(dir, newTurnRecord("m1", "counter", env));
    await using rig = await startRig(server.url, uniqueCluster(), [], { dir });
    expect(rig.host.pendingActors()).toEqual(["m1"]);
    expect(await rig.host.abandon("m1")).toBe(1);
    expect(rig.host.pendingActors()).toEqual([]);
    await rig.host.start("m1", "counter");
    expect(rig.states.map(([, st]) => st)).toEqual(["Idle"]);
    const info = await poll(() => rig.bus.request<{ count: number }>("m1", "info_request", null), { timeoutMs: 5_000, what: "rpc", retryErrors: true });
    expect(info.count).toBe(0);
  });
});

describe("actor turns across a NATS outage", () => {
  it("outage - a turn whose checkpoint cannot be written keeps its WAL record and the redelivery resumes it without re-running steps", async () => {
    await using own = await startNatsServer({ allowExternal: false });
    let release: () => void = () => {};
    const released = new Promise<void>((r) => (release = r));
    let charged = 0;
    const payer = defineActor<{ paid: number }>({
      type: "payer",
      initialState: () => ({ paid: 0 }),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("pay", () => ++charged);
          await released;
          ctx.state.paid++;
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    const logs = captureLogs();
    await using rig = await startRig(own.url, uniqueCluster(), [payer], { host: { logger: logs.logger } });
    await rig.host.start("pay1", "payer");
    await rig.bus.send(task1("pay1"));
    // The step is recorded (in the WAL and the step journal on NATS) before the server goes.
    await poll(() => charged === 1 && rig.wal.pendingFor("pay1").length === 1, { timeoutMs: 5_000, what: "step recorded" });
    await own.kill();
    // The checkpoint to NATS fails while the server is down: the turn is not journaled to
    // the end, and its WAL record stays for the redelivery.
    release();
    await poll(() => logs.text().includes("turn could not be journaled"), { timeoutMs: 20_000, what: "the checkpoint save to fail during the outage" });
    expect(rig.wal.pendingFor("pay1")).toHaveLength(1);
    await own.restart();
    const state = await poll(
      async () => {
        const s = await rig.bus.request<{ paid: number }>("pay1", "info_request", null);
        return s.paid === 1 ? s : undefined;
      },
      { timeoutMs: 30_000, what: "turn committed after the outage", retryErrors: true },
    );
    expect(state).toEqual({ paid: 1 });
    expect(charged).toBe(1);
    // The state is readable once the checkpoint is saved; the turn ends after its WAL completion.
    await poll(() => rig.host.status("pay1")?.handled === 1, { timeoutMs: 5_000, what: "the turn ended" });
    expect(rig.wal.pendingFor("pay1")).toEqual([]);
    expect(rig.host.status("pay1")).toMatchObject({ state: "Idle", handled: 1 });
  }, 60_000);
});

function task1(to: string) {
  return createEnvelope({ from: "tester", to, type: "task_delegate", payload: null });
}
