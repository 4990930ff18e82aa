import { describe, expect, it } from "vitest";
import { createEnvelope, type A2AEnvelope } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { Wal, WalFailedError } from "../../src/wal/index.js";
import { ActorHost, ActorTypeRegistry, defineActor, TURN_KIND, type ActorWal } from "../../src/actors/index.js";
import { NatsStepJournal, type JournalEntry } from "../../src/actors/step-journal.js";
import { newTurnRecord } from "../../src/actors/turn-record.js";
import { decodeValue } from "../../src/bus/index.js";
import { actorEvents, fileServer, startRig, uniqueCluster, walWith } from "../fixtures/actors/helpers.js";
import { connectBus } from "../fixtures/bus/helpers.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();
const silent = createLogger({ level: "silent" });

interface WorkerState {
  log: string[];
}

/**
 * A turn of two steps: `fetch` (not idempotent, finishes) and `act` (idempotent when the
 * payload says so), which blocks on host A until `gate` opens. Every call of a step's
 * function is counted in `calls` with the host that ran it.
 */
function worker(node: string, calls: string[], gate: Promise<void>) {
  return defineActor<WorkerState>({
    type: "worker",
    initialState: () => ({ log: [] }),
    handlers: {
      task_delegate: async (ctx) => {
        const t = ctx.now();
        const fetched = await ctx.step("fetch", () => {
          calls.push(`${node}:fetch`);
          return `fetched by ${node} at ${t}`;
        });
        let acted: string;
        try {
          acted = await ctx.step(
            "act",
            async () => {
              calls.push(`${node}:act`);
              if (node === "A") await gate;
              return `acted by ${node}`;
            },
            { idempotent: ctx.message.payload === "idempotent" },
          );
        } catch (err) {
          acted = `outcome ${(err as { outcome?: string }).outcome ?? (err as Error).message}`;
        }
        ctx.state.log.push(`${fetched} | ${acted} | t=${t}`);
        return ctx.state.log.at(-1);
      },
    },
    rpc: { info_request: (_env, state) => state },
  });
}

function opened() {
  let open: () => void = () => {};
  const gate = new Promise<void>((r) => (open = r));
  return { gate, open };
}

describe("step journal on NATS (takeover by another node)", () => {
  it("takeover - the new host reuses recorded results, reports a started non-idempotent step unknown and re-runs an idempotent one, with the recorded clock", async () => {
    const cluster = uniqueCluster("tj");
    const calls: string[] = [];
    const { gate, open } = opened();
    await using a = await startRig(server.url, cluster, [worker("A", calls, gate)], { nodeId: "A" });
    await using _release = defer(open);
    await a.host.start("w1", "worker");
    await a.host.start("w2", "worker");
    await a.bus.send(createEnvelope({ from: "tester", to: "w1", type: "task_delegate", payload: "charge" }));
    await a.bus.send(createEnvelope({ from: "tester", to: "w2", type: "task_delegate", payload: "idempotent" }));
    await poll(() => calls.filter((c) => c === "A:act").length === 2, { timeoutMs: 10_000, what: "both turns inside act on A" });
    // A dies: its connection goes (no more heartbeats, appends or acks), its handlers hang.
    await a.bus.nc.close();

    await using b = await startRig(server.url, cluster, [worker("B", calls, gate)], { nodeId: "B" });
    await b.host.start("w1", "worker");
    await b.host.start("w2", "worker");
    const state = async (id: string) =>
      poll(
        async () => {
          const s = await b.bus.request<WorkerState>(id, "info_request", null);
          return s.log.length > 0 ? s : undefined;
        },
        { timeoutMs: 15_000, what: `${id} to finish its turn on B`, retryErrors: true },
      );
    const w1 = await state("w1");
    const w2 = await state("w2");
    const t1 = /t=(\d+)$/.exec(w1.log[0]!)![1];
    expect(w1.log).toEqual([`fetched by A at ${t1} | outcome unknown | t=${t1}`]);
    const t2 = /t=(\d+)$/.exec(w2.log[0]!)![1];
    expect(w2.log).toEqual([`fetched by A at ${t2} | acted by B | t=${t2}`]);
    // fetch ran once per turn (on A), act once on A for each, and again on B only when idempotent.
    expect(calls.sort()).toEqual(["A:act", "A:act", "A:fetch", "A:fetch", "B:act"]);
    // The turns are done, and nothing was written after their checkpoints: each subject's last
    // entry is B's result, until the actor's next turn.
    const lastEntry = async (id: string) => {
      const m = await b.bus.jsm.streams.getMessage(b.bus.subjects.streams.journal, { last_by_subj: b.bus.subjects.journal(id) });
      return decodeValue(m!.data, "msgpack") as JournalEntry;
    };
    for (const id of ["w1", "w2"]) expect(await lastEntry(id)).toMatchObject({ k: "result", node: "B" });
    // The next turn's first entry rolls the spent turns up: the subject then holds that turn's entries only.
    await b.bus.send(createEnvelope({ from: "tester", to: "w2", type: "task_delegate", payload: "idempotent" }));
    await poll(async () => (await b.bus.request<WorkerState>("w2", "info_request", null)).log.length === 2, { timeoutMs: 15_000, what: "w2's next turn" });
    const info = await b.bus.jsm.streams.info(b.bus.subjects.streams.journal, { subjects_filter: b.bus.subjects.journal("w2") });
    expect(info.state.subjects?.[b.bus.subjects.journal("w2")]).toBe(3); // fetch's intent and result, act's result
    // A host claiming w1's journal with its checkpoint finds its last turn done, not open.
    const ids = (await b.bus.request<WorkerState>("w1", "info_request", null)).log;
    expect(ids).toHaveLength(1);
    const claimed = await new NatsStepJournal({ bus: b.bus, nodeId: "C", log: silent }).open("w1", () => true);
    expect(claimed.openTurn()).toBeUndefined();
    expect(await lastEntry("w1")).toMatchObject({ k: "claim", node: "C" });
    expect(
      (await b.bus.jsm.streams.info(b.bus.subjects.streams.journal, { subjects_filter: b.bus.subjects.journal("w1") })).state.subjects?.[
        b.bus.subjects.journal("w1")
      ],
    ).toBe(1);
  }, 60_000);

  it("fencing - once another host claimed the journal, the old host's next append fails, its turn stops and its record is abandoned", async () => {
    const cluster = uniqueCluster("tf");
    const calls: string[] = [];
    const { gate, open } = opened();
    await using a = await startRig(server.url, cluster, [worker("A", calls, gate)], { nodeId: "A" });
    await using _release = defer(open);
    await a.host.start("f1", "worker");
    const env = createEnvelope({ from: "tester", to: "f1", type: "task_delegate", payload: "charge" });
    await a.bus.send(env);
    await poll(() => calls.includes("A:act"), { timeoutMs: 10_000, what: "the turn inside act on A" });

    // A second node claims the actor's journal (as its first turn there would).
    await using bus = await connectBus(server.url, cluster);
    const claimed = await new NatsStepJournal({ bus, nodeId: "B", log: silent }).open("f1");
    expect(claimed.openTurn(env.id)).toMatchObject({ envelopeId: env.id, nodes: ["A"] });
    expect(claimed.openTurn(env.id)?.steps.map((s) => [s.name, s.status])).toEqual([
      ["fetch", "done"],
      ["act", "started"],
    ]);

    open();
    // A's result append is refused: the turn ends lease_lost, its record abandoned, the actor leaves A.
    await poll(() => a.host.status("f1") === undefined, { timeoutMs: 10_000, what: "f1 to leave A" });
    expect(a.states.filter(([id]) => id === "f1").at(-1)).toEqual(["f1", "Completed", { reason: "lease_lost" }]);
    expect(a.wal.pendingFor("f1")).toEqual([]);
    // Nothing A did after the claim reached the journal.
    const last = await bus.jsm.streams.getMessage(bus.subjects.streams.journal, { last_by_subj: bus.subjects.journal("f1") });
    expect((decodeValue(last!.data, "msgpack") as JournalEntry).k).toBe("claim");

    // The next host resumes from what A recorded before the claim.
    await using b = await startRig(server.url, cluster, [worker("B", calls, gate)], { nodeId: "B" });
    await b.host.start("f1", "worker");
    const s = await poll(
      async () => {
        const st = await b.bus.request<WorkerState>("f1", "info_request", null);
        return st.log.length > 0 ? st : undefined;
      },
      { timeoutMs: 15_000, what: "f1 to finish on B", retryErrors: true },
    );
    expect(s.log[0]).toMatch(/^fetched by A at \d+ \| outcome unknown/);
    expect(calls.sort()).toEqual(["A:act", "A:fetch"]);
  }, 60_000);
});

describe("dead-lettered turns and failed completions", () => {
  it("dead letters - a pending turn whose message left the mailbox unprocessed is completed at start, never run; one whose message is still there runs", async () => {
    const cluster = uniqueCluster("td");
    await using tmp = await tempDir("kova-actors-dlq-");
    const ran: string[] = [];
    const def = defineActor<{ n: number }>({
      type: "once",
      initialState: () => ({ n: 0 }),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("work", () => void ran.push(ctx.message.id));
          ctx.state.n++;
        },
      },
    });
    await using bus = await connectBus(server.url, cluster);
    const gone = createEnvelope({ from: "tester", to: "d1", type: "task_delegate", payload: null });
    const kept = createEnvelope({ from: "tester", to: "d2", type: "task_delegate", payload: null });
    const goneSeq = (await bus.send(gone)).seq;
    const keptSeq = (await bus.send(kept)).seq;
    // What the DLQ mover does after max_deliver: the message leaves the work queue.
    await bus.jsm.streams.deleteMessage(bus.subjects.streams.a2a, goneSeq);
    {
      const wal = await Wal.open({ dir: tmp.path, sync: "full", ringBits: 8 });
      await wal.append(TURN_KIND, newTurnRecord("d1", "once", gone, goneSeq), { owner: "d1" });
      await wal.append(TURN_KIND, newTurnRecord("d2", "once", kept, keptSeq), { owner: "d2" });
      await wal.close();
    }
    await using rig = await startRig(server.url, cluster, [def], { dir: tmp.path });
    await rig.host.start("d1", "once");
    await rig.host.start("d2", "once");
    expect(ran).toEqual([kept.id]);
    expect(rig.wal.pendingFor("d1")).toEqual([]);
    expect(rig.wal.pendingFor("d2")).toEqual([]);
    expect(rig.states.filter(([id]) => id === "d1").map(([, s]) => s)).toEqual(["Recovering", "Idle"]);
  });

  it("dead letters - a turn left PENDING whose message used up max_deliver is moved to the DLQ by the real mover (advisory), and the next start completes it unrun with actor_turn_dropped", async () => {
    const cluster = uniqueCluster("tm");
    await using tmp = await tempDir("kova-actors-mover-");
    await using bus = await connectBus(server.url, cluster);
    const mover = bus.startDlqMover();
    await using _mover = defer(() => mover.stop());
    const wal = await Wal.open({ dir: tmp.path, sync: "normal", ringBits: 8 });
    await using _wal = defer(() => wal.close());
    const entered: string[] = [];
    const worked: string[] = [];
    const def = defineActor<{ n: number }>({
      type: "once",
      initialState: () => ({ n: 0 }),
      handlers: {
        task_delegate: async (ctx) => {
          entered.push(ctx.message.id);
          await ctx.step("work", () => void worked.push(ctx.message.id));
          ctx.state.n++;
        },
      },
    });
    // Every step write fails (the WAL's disk trouble, injected): each delivery appends the
    // turn's PENDING record (or resumes it) and naks, until max_deliver runs out.
    const failing = walWith(wal, {
      replace: async () => {
        throw new WalFailedError(new Error("injected step write failure"));
      },
    });
    const newHost = (w: ActorWal) =>
      new ActorHost({
        bus,
        wal: w,
        nodeId: "n1",
        types: new ActorTypeRegistry([def]),
        logger: silent,
        mailbox: { ackWaitMs: 10_000, backoffMs: [100], maxDeliver: 2 },
        supervision: { maxAttempts: 1 },
      });
    const host = newHost(failing);
    await using _host = defer(() => host.stopAll());
    await host.start("d3", "once");
    const env = createEnvelope({ from: "tester", to: "d3", type: "task_delegate", payload: null });
    const { seq } = await bus.send(env);
    const dead = await poll(async () => (await bus.listDlq({ reason: "max_deliver" })).find((d) => d.headers["Kova-Dlq-Msg-Id"] === env.id), {
      timeoutMs: 15_000,
      what: "the message moved to the DLQ by the mover",
      retryErrors: true,
    });
    expect(dead.headers["Kova-Dlq-Deliveries"]).toBe("2");
    expect(await bus.inboxHolds("d3", seq, env.id)).toBe(false);
    expect(entered).toEqual([env.id, env.id]);
    expect(wal.pendingFor("d3")).toHaveLength(1);
    await host.stopAll();

    // The next start (the WAL healthy again) finds the record, its message gone and its id
    // not processed: completed without running, an actor_turn_dropped event.
    await using watch = actorEvents(bus);
    const again = newHost(wal);
    await using _again = defer(() => again.stopAll());
    await again.start("d3", "once");
    expect(wal.pendingFor("d3")).toEqual([]);
    const dropped = await poll(() => watch.events.find((e) => e.type === "actor_turn_dropped"), { timeoutMs: 5_000, what: "the actor_turn_dropped event" });
    expect(dropped).toMatchObject({ runId: "d3", data: { envelopeId: env.id, reason: "message_gone" } });
    expect([entered, worked]).toEqual([[env.id, env.id], []]);
    expect(again.status("d3")).toMatchObject({ state: "Idle", handled: 0 });
  }, 40_000);

  it("completion - a committed turn whose WAL completion fails is acked anyway and never runs again: the next start settles its PENDING record, after more turns than the processed window", async () => {
    const cluster = uniqueCluster("tp");
    await using tmp = await tempDir("kova-actors-park-");
    await using bus = await connectBus(server.url, cluster);
    const wal = await Wal.open({ dir: tmp.path, sync: "normal", ringBits: 8 });
    await using _wal = defer(() => wal.close());
    const first = createEnvelope({ from: "tester", to: "k1", type: "task_delegate", payload: 0 });
    let failOnce = true;
    // The WAL fails the first completion (injected; a real commit failure also puts the WAL
    // in its failed state): the turn is committed on NATS (checkpoint saved, message acked)
    // but its record stays PENDING.
    const flaky = walWith(wal, {
      complete: async (s, o) => {
        if (failOnce && o?.kv) {
          failOnce = false;
          throw new WalFailedError(new Error("injected completion failure"));
        }
        return wal.complete(s, o);
      },
    });
    const handled: string[] = [];
    const adder = defineActor<{ sum: number; seen: string[] }>({
      type: "adder",
      initialState: () => ({ sum: 0, seen: [] }),
      handlers: {
        task_delegate: async (ctx) => {
          await ctx.step("add", () => handled.push(ctx.message.id), { idempotent: true });
          ctx.state.sum += 1;
          ctx.state.seen.push(ctx.message.id);
        },
      },
      rpc: { info_request: (_env, s) => s },
    });
    const newHost = () =>
      new ActorHost({
        bus,
        wal: flaky,
        nodeId: "n1",
        types: new ActorTypeRegistry([adder]),
        logger: silent,
        processedWindow: 2,
        mailbox: { ackWaitMs: 10_000 },
      });
    const host = newHost();
    await host.start("k1", "adder");
    await bus.send(first);
    const later: A2AEnvelope[] = [];
    for (let i = 1; i <= 3; i++) {
      const e = createEnvelope({ from: "tester", to: "k1", type: "task_delegate", payload: i });
      later.push(e);
      await bus.send(e);
    }
    const info = () => bus.request<{ sum: number; seen: string[] }>("k1", "info_request", null);
    await poll(async () => (await info()).seen.length === 4, { timeoutMs: 20_000, what: "every message handled", retryErrors: true });
    // The first turn's record is still PENDING; its message was acked, so nothing redelivers it.
    const stuck = wal.pendingFor("k1");
    expect(stuck.map((r) => (r.payload as { envelope: { id: string } }).envelope.id)).toEqual([first.id]);
    await host.stopAll();

    // The next start (the window of two ids no longer names the first message) finds the
    // message gone from the mailbox and completes the record without running it.
    const again = newHost();
    await using _again = defer(() => again.stopAll());
    await again.start("k1", "adder");
    expect(wal.pendingFor("k1")).toEqual([]);
    expect(handled).toEqual([first.id, ...later.map((e) => e.id)]);
    const end = await poll(() => info().catch(() => undefined), { timeoutMs: 5_000, what: "k1 answers after the restart" });
    expect(end.sum).toBe(4);
  }, 40_000);
});
