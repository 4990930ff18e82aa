import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/**
 * One 3-node cluster through a life: SIGKILL of a node while messages flow, its restart
 * (WAL recovery abandons turns whose actors moved), then a graceful stop of another node.
 * The steps share the cluster because starting three processes is the slow part.
 */
let tc: TestCluster;
const sent = new Map<string, string[]>();
const NODES = ["n1", "n2", "n3"];

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: NODES, actors: 100, ackWaitMs: 3000, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await poll(
    async () => {
      const a = await tc.agents();
      return a.size === 100 && [...a.values()].every((r) => r.node !== null && r.state === "Idle");
    },
    { timeoutMs: 30_000, what: "initial placement", everyMs: 100, retryErrors: true },
  );
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

async function send(actorId: string, payload: unknown): Promise<string> {
  const env = createEnvelope({ from: "tester", to: actorId, type: "task_delegate", payload });
  await tc.bus.send(env);
  sent.set(actorId, [...(sent.get(actorId) ?? []), env.id]);
  return env.id;
}

async function round(sleepMs: number): Promise<void> {
  await Promise.all(tc.actorIds.map((a) => send(a, { sleepMs })));
}

/** Every acknowledged message processed, none twice, never two at once per process. */
async function expectAllProcessedOnce(timeoutMs: number): Promise<void> {
  let last: Array<readonly [string, ProbeState]> = [];
  const states = await poll(
    async () => {
      const all = await Promise.all(tc.actorIds.map(async (a) => [a, await tc.info<ProbeState>(a)] as const));
      last = all;
      return all.every(([a, s]) => s.count >= (sent.get(a)?.length ?? 0)) ? all : undefined;
    },
    { timeoutMs, what: "every acknowledged message processed", everyMs: 250, retryErrors: true },
  ).catch(async (err: unknown) => {
    const behind = last.filter(([a, s]) => s.count < (sent.get(a)?.length ?? 0));
    const agents = await tc.agents();
    for (const [a, s] of behind.slice(0, 5)) {
      const ci = await tc.bus.jsm.consumers.info(tc.bus.subjects.streams.a2a, tc.bus.subjects.consumer(a)).catch((e: Error) => e.message);
      console.error(
        `behind: ${a} count ${s.count}/${sent.get(a)?.length} on ${agents.get(a)?.node} ${agents.get(a)?.state}`,
        JSON.stringify(
          typeof ci === "string"
            ? ci
            : {
                pending: ci.num_pending,
                ackPending: ci.num_ack_pending,
                redelivered: ci.num_redelivered,
                waiting: ci.num_waiting,
                delivered: ci.delivered,
                ackFloor: ci.ack_floor,
              },
        ),
      );
    }
    console.error(`behind: ${behind.length} actors; logs in ${tc.dir}`);
    throw err;
  });
  for (const [a, s] of states) {
    const want = sent.get(a) ?? [];
    expect(new Set(s.ids).size, `${a} counted an id twice`).toBe(s.ids.length);
    expect(s.count).toBe(s.ids.length);
    expect([...s.ids].sort()).toEqual([...want].sort());
    expect(s.maxInFlight, `${a} ran two turns at once in one process`).toBeLessThanOrEqual(1);
    expect(s.dupHandled, `${a} started a turn for an id it had handled`).toBe(0);
  }
}

/** From the start/end events: a turn of an actor never starts on one node while another live node runs one. */
function expectNoConcurrentTurns(killed: Map<string, number>): void {
  const open = new Map<string, { node: string; id: string }>();
  for (const e of tc.events) {
    if (e.type !== "probe_start" && e.type !== "probe_end") continue;
    const d = e.data as { id: string; node: string };
    const actor = e.runId;
    const cur = open.get(actor);
    if (e.type === "probe_start") {
      if (cur && cur.node !== d.node) {
        const killedAt = killed.get(cur.node);
        expect(killedAt !== undefined && killedAt < e.at, `${actor}: turn ${d.id} on ${d.node} overlapped ${cur.id} on ${cur.node}`).toBe(true);
      }
      open.set(actor, { node: d.node, id: d.id });
    } else if (cur?.id === d.id) {
      open.delete(actor);
    }
  }
}

const killedAt = new Map<string, number>();
let slowActor = "";

describe("cluster failover (3 node processes, 100 actors)", () => {
  it("cluster - a node killed with SIGKILL while messages flow: its actors run elsewhere within 10 s, every acked message processed once", async () => {
    await round(5);
    await round(5);
    const agents = await tc.agents();
    const victimActors = tc.actorIds.filter((a) => agents.get(a)?.node === "n2");
    expect(victimActors.length).toBeGreaterThan(10);
    slowActor = victimActors[0]!;
    const slowId = await send(slowActor, { sleepMs: 4000 });
    await poll(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === slowId), {
      timeoutMs: 10_000,
      what: "slow turn started",
      everyMs: 100,
      retryErrors: true,
    });
    const more = round(5); // in flight while the node dies
    tc.kill("n2");
    const t0 = performance.now();
    killedAt.set("n2", t0);
    await more;
    await round(5);

    const takeoverMs = await poll(
      async () => {
        const a = await tc.agents();
        const l = await tc.leases();
        const done = victimActors.every((id) => {
          const r = a.get(id);
          return r && r.node !== "n2" && r.node !== null && l.get(id)?.node === r.node && (r.state === "Idle" || r.state === "Running");
        });
        return done ? performance.now() - t0 : undefined;
      },
      { timeoutMs: 15_000, what: "takeover of the killed node's actors", everyMs: 100, retryErrors: true },
    );
    console.info(`takeover after SIGKILL: ${Math.round(takeoverMs)} ms for ${victimActors.length} actors`);
    expect(takeoverMs).toBeLessThan(10_000);

    await expectAllProcessedOnce(30_000);
    expectNoConcurrentTurns(killedAt);
  }, 90000);

  it("cluster - the killed node restarted: WAL recovery skips turns whose actors moved, then actors rebalance back while messages flow", async () => {
    const before = tc.events.length;
    let flowing = true;
    // paced well below what two cores can handle, so the backlog stays small
    const traffic = (async () => {
      for (let i = 0; flowing && i < 12; i++) {
        await round(5);
        await new Promise((r) => setTimeout(r, 300));
      }
    })();
    await tc.startNode("n2");
    const status = await tc.status("n2");
    expect(status.recovery.pendingRecords).toBeGreaterThan(0);
    expect(status.recovery.abandoned).toContain(slowActor);
    expect(status.recovery.finished).toEqual([]);
    await poll(
      async () => {
        const a = await tc.agents();
        const onN2 = [...a.values()].filter((r) => r.node === "n2" && r.state === "Idle").length;
        return onN2 > 10 && [...a.values()].every((r) => r.node !== null && (r.state === "Idle" || r.state === "Running"));
      },
      { timeoutMs: 20_000, what: "rebalance onto the restarted node", everyMs: 100, retryErrors: true },
    );
    flowing = false;
    await traffic;
    await expectAllProcessedOnce(30_000);
    expectNoConcurrentTurns(killedAt);
    // a rebalance hands actors over gracefully: every message of this phase starts one turn
    const starts = new Map<string, number>();
    for (const e of tc.events.slice(before)) {
      if (e.type === "probe_start") {
        const id = (e.data as { id: string }).id;
        starts.set(id, (starts.get(id) ?? 0) + 1);
      }
    }
    expect([...starts.entries()].filter(([, n]) => n > 1)).toEqual([]);
  }, 90000);

  it("cluster - graceful stop (SIGTERM): the node's actors move and no message starts a second turn", async () => {
    const before = tc.events.length;
    const flowing = (async () => {
      for (let i = 0; i < 3; i++) await round(20);
    })();
    // stop n3 while messages flow: once turns of this phase have started
    await poll(() => tc.events.slice(before).some((e) => e.type === "probe_start"), { timeoutMs: 10_000, everyMs: 25, what: "the first turn of this phase" });
    const exit = await tc.term("n3");
    await flowing;
    expect(exit.code).toBe(0);
    await poll(
      async () => {
        const a = await tc.agents();
        return [...a.values()].every((r) => (r.node === "n1" || r.node === "n2") && r.state === "Idle");
      },
      { timeoutMs: 15_000, what: "actors moved off the stopped node", everyMs: 100, retryErrors: true },
    );
    await expectAllProcessedOnce(20_000);
    // after a graceful hand-over every message has exactly one turn start
    const starts = new Map<string, number>();
    for (const e of tc.events.slice(before)) {
      if (e.type === "probe_start") {
        const id = (e.data as { id: string }).id;
        starts.set(id, (starts.get(id) ?? 0) + 1);
      }
    }
    expect([...starts.values()].filter((n) => n > 1)).toEqual([]);
    expect(starts.size).toBe(300);
    expectNoConcurrentTurns(killedAt);
  }, 90000);
});
