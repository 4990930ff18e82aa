import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope, type RpcReply } from "../../src/bus/index.js";
import { decodeValue, encodeValue } from "../../src/bus/codec.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

let tc: TestCluster;

interface Sample {
  /** performance.now() when the answer or error came back. */
  at: number;
  ids?: string[];
  dupHandled?: number;
  /** The node that answered (the reply's `node`). */
  node?: string;
  error?: string;
}

/**
 * Sends `info_request`s to `actor` from a few concurrent callers, each as soon as the last
 * one ended, until stopped; keeps every outcome, answer or error. Plain NATS requests, one
 * try each, so that each outcome is what the server and the nodes did with that request.
 */
function sampleFastPath(actor: string, callers = 4): { readonly samples: readonly Sample[]; stop(): Promise<Sample[]> } {
  const samples: Sample[] = [];
  let running = true;
  const subject = tc.bus.subjects.rpc(actor);
  const caller = async () => {
    while (running) {
      try {
        const env = createEnvelope({ from: "sampler", to: actor, type: "info_request", payload: {} });
        const msg = await tc.nc.request(subject, encodeValue(env, "msgpack"), { timeout: 1000 });
        const r = decodeValue(msg.data, "msgpack") as RpcReply<ProbeState>;
        if (r.ok) samples.push({ at: performance.now(), ids: r.result.ids, dupHandled: r.result.dupHandled, ...(r.node ? { node: r.node } : {}) });
        else samples.push({ at: performance.now(), error: r.error.code });
      } catch (err) {
        samples.push({ at: performance.now(), error: (err as { code?: string }).code ?? String(err) });
        // No responders come back at once: do not spin.
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  };
  const loops = Array.from({ length: callers }, caller);
  return {
    samples,
    stop: async () => {
      running = false;
      await Promise.all(loops);
      return samples;
    },
  };
}

function errorCounts(samples: Sample[]): string {
  const counts = new Map<string, number>();
  for (const x of samples) if (x.error) counts.set(x.error, (counts.get(x.error) ?? 0) + 1);
  return JSON.stringify(Object.fromEntries(counts));
}

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["f1", "f2"], actors: 6, ackWaitMs: 3000, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await poll(
    async () => {
      const a = await tc.agents();
      return a.size === 6 && [...a.values()].every((r) => r.state === "Idle") && [...a.values()].some((r) => r.node === "f2");
    },
    { timeoutMs: 20_000, what: "initial placement on both nodes", everyMs: 100, retryErrors: true },
  );
}, 60_000);
afterAll(async () => {
  const f2 = tc?.procs.get("f2")?.child;
  if (f2?.pid) f2.kill("SIGCONT");
  await tc?.stop();
});

describe("fencing", () => {
  it("cluster - a frozen node (SIGSTOP) whose actors moved does not finish its old turn, run them twice or answer their fast path from its stale copy when it wakes", async () => {
    const agents = await tc.agents();
    const actor = [...agents.values()].find((r) => r.node === "f2")!.id;
    const slow = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: { sleepMs: 1500 } });
    await tc.bus.send(slow);
    await poll(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === slow.id), {
      timeoutMs: 5000,
      what: "slow turn started on f2",
      everyMs: 100,
      retryErrors: true,
    });
    const f2 = tc.procs.get("f2")!.child;
    f2.kill("SIGSTOP");

    await poll(
      async () => {
        const r = (await tc.agents()).get(actor);
        return r?.node === "f1" && r.state === "Idle";
      },
      { timeoutMs: 10_000, what: "takeover by f1", everyMs: 100, retryErrors: true },
    );
    const later = [];
    for (let i = 0; i < 3; i++) {
      const env = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: {} });
      await tc.bus.send(env);
      later.push(env.id);
    }
    await poll(async () => ((await tc.info<ProbeState>(actor)).count === 4 ? true : undefined), {
      timeoutMs: 15_000,
      what: "all four handled on f1",
      everyMs: 100,
      retryErrors: true,
    });

    // Ask the fast path without pause from before f2 wakes until the actor has settled:
    // every request also reaches f2's rpc subscription (no queue group), and the ones it
    // received while frozen are read when it wakes: those are what a node answering from
    // its stale copy would answer first.
    const want = [slow.id, ...later].sort();
    const sampler = sampleFastPath(actor);
    let samples: Sample[];
    let woke = Number.NaN;
    try {
      await new Promise((r) => setTimeout(r, 1500));
      f2.kill("SIGCONT");
      woke = performance.now();
      // f2 wakes: its frozen turn meets the fence at its next step; then rendezvous hashing
      // hands its actors back to it by a graceful release from f1.
      await poll(
        async () => {
          const [rec, lease] = [(await tc.agents()).get(actor), (await tc.leases()).get(actor)];
          if (!rec?.node || rec.state !== "Idle" || lease?.node !== rec.node) return undefined;
          const lists = await Promise.all(["f1", "f2"].map((n) => tc.agentsOn(n)));
          return lists.filter((l) => l.some((a) => a.id === actor)).length === 1 ? true : undefined;
        },
        { timeoutMs: 20_000, what: "actor hosted exactly once after f2 woke", everyMs: 300, retryErrors: true },
      );
      // Keep asking until the settled host has answered after the wake: that answer, and
      // every other one, must come from the actor's real state.
      await poll(() => sampler.samples.some((x) => x.ids !== undefined && x.at > woke), {
        timeoutMs: 10_000,
        what: () => `a fast-path answer after f2 woke (${errorCounts([...sampler.samples])})`,
        everyMs: 50,
      });
    } finally {
      samples = await sampler.stop();
    }
    // Every answer comes from the actor's real host: a node that cannot prove it still
    // holds the lease stays silent instead of answering from memory.
    const answers = samples.filter((x) => x.ids !== undefined);
    const stale = answers.filter((x) => [...x.ids!].sort().join() !== want.join() || x.dupHandled !== 0);
    const seen = `${answers.length} answers, errors ${errorCounts(samples)}`;
    console.info(`fast path from 1.5 s before f2 woke until the actor settled: ${seen}`);
    const first = stale[0] && `${Math.round(stale[0].at - woke)} ms after SIGCONT: ids ${JSON.stringify(stale[0].ids)}`;
    expect(stale.length, `fast-path answers from a stale copy (${seen}; first ${first})`).toBe(0);
    expect(answers.length, `no fast-path answer while f2 woke (${seen})`).toBeGreaterThan(0);
    // While f2 was frozen, f1 (the lease holder) answered each request: none waited on f2.
    const beforeWake = samples.filter((x) => x.at < woke);
    expect(beforeWake.length).toBeGreaterThan(0);
    expect(
      beforeWake.every((x) => x.node === "f1"),
      `answers before the wake: ${JSON.stringify(beforeWake.slice(0, 5))}`,
    ).toBe(true);
    const s = await tc.info<ProbeState>(actor);
    expect([...s.ids].sort()).toEqual(want);
    expect(s.dupHandled).toBe(0);
    const slowEnds = tc.events.filter((e) => e.type === "probe_end" && (e.data as { id: string }).id === slow.id);
    expect(slowEnds.map((e) => (e.data as { node: string }).node)).toEqual(["f1"]);
  }, 90000);
});
