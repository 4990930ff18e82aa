import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { waitForConsumer } from "../fixtures/bus/helpers.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

let tc: TestCluster;

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["a1", "a2"], actors: 4, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await poll(
    async () => {
      const a = await tc.agents();
      return a.size === 4 && [...a.values()].every((r) => r.state === "Idle");
    },
    { timeoutMs: 20_000, what: "initial placement", everyMs: 100, retryErrors: true },
  );
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

const events = (type: string, actor: string) => tc.events.filter((e) => e.runId === actor && e.type === type);

describe("cluster control (CLI against 2 node processes)", () => {
  it("cluster - pause, resume and kill change the state, visible in the registry and as events", async () => {
    const actor = "p-1";
    let r = await tc.cli(["signal", actor, "pause"]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/pause delivered to p-1/);
    await poll(
      async () => {
        const rec = (await tc.agents()).get(actor);
        return rec?.state === "Paused" && rec.desired === "paused";
      },
      { timeoutMs: 5000, what: "registry shows Paused", everyMs: 100, retryErrors: true },
    );
    expect(events("agent_signal", actor).length).toBe(1);
    await poll(async () => events("agent_state", actor).some((e) => (e.data as { state: string }).state === "Paused"), {
      timeoutMs: 3000,
      what: "Paused event",
      everyMs: 100,
      retryErrors: true,
    });

    // a paused actor takes no message: its node has it (delivered, unacked) and holds it
    const env = createEnvelope({ from: "tester", to: actor, type: "task_delegate", payload: {} });
    const sent = await tc.bus.send(env);
    await waitForConsumer(tc.bus, actor, "to hold the message at its node", (ci) => ci.delivered.stream_seq >= sent.seq && ci.num_ack_pending === 1);
    expect((await tc.info<ProbeState>(actor)).count).toBe(0);

    r = await tc.cli(["signal", actor, "resume"]);
    expect(r.code).toBe(0);
    await poll(async () => ((await tc.info<ProbeState>(actor)).count === 1 ? true : undefined), {
      timeoutMs: 5000,
      what: "message handled after resume",
      everyMs: 100,
      retryErrors: true,
    });
    expect((await tc.agents()).get(actor)?.desired).toBe("running");

    r = await tc.cli(["signal", actor, "kill"]);
    expect(r.code).toBe(0);
    await poll(
      async () => {
        const rec = (await tc.agents()).get(actor);
        const lease = (await tc.leases()).get(actor);
        return rec?.desired === "killed" && rec.node === null && lease?.node === null;
      },
      { timeoutMs: 5000, what: "killed actor unplaced and its lease released", everyMs: 100, retryErrors: true },
    );
    for (const n of ["a1", "a2"]) {
      const list = JSON.parse((await tc.cli(["node-agents", n, "--json"])).stdout) as Array<{ id: string }>;
      expect(list.map((a) => a.id)).not.toContain(actor);
    }
    expect(events("agent_signal", actor).map((e) => (e.data as { signal: string }).signal)).toEqual(["pause", "resume", "kill"]);
  }, 60000);

  it("cluster - kova spawn places a new actor; nodes ls, agents ls and status show the cluster", async () => {
    const r = await tc.cli(["spawn", "extra-1", "--type", "probe"]);
    expect(r.stdout).toMatch(/spawned extra-1 \(probe\) via node a[12]/);
    await poll(async () => ((await tc.agents()).get("extra-1")?.state === "Idle" ? true : undefined), {
      timeoutMs: 5000,
      what: "spawned actor Idle",
      everyMs: 100,
      retryErrors: true,
    });
    await tc.bus.send(createEnvelope({ from: "tester", to: "extra-1", type: "task_delegate", payload: {} }));
    await poll(async () => ((await tc.info<ProbeState>("extra-1")).count === 1 ? true : undefined), {
      timeoutMs: 5000,
      what: "spawned actor handles a message",
      everyMs: 100,
      retryErrors: true,
    });

    const nodes = await tc.cli(["nodes", "ls"]);
    expect(nodes.stdout).toMatch(/^NODE\s+STATE/m);
    expect(nodes.stdout).toMatch(/^a1\s+up/m);
    expect(nodes.stdout).toMatch(/^a2\s+up/m);
    const agents = JSON.parse((await tc.cli(["agents", "ls", "--json"])).stdout) as Array<{ id: string; state: string }>;
    expect(agents.map((a) => a.id).sort()).toEqual(["extra-1", "p-0", "p-1", "p-2", "p-3"]);
    const status = await tc.cli(["status"]);
    expect(status.stdout).toMatch(/2 node\(s\) answering, 5 agent\(s\)/);

    const bad = await tc.cli(["spawn", "x2", "--type", "nope"]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/unknown actor type "nope".*register it on every node/);
    const missing = await tc.cli(["signal", "ghost", "pause"]);
    expect(missing.stderr).toMatch(/no agent ghost .*kova agents ls/);
  }, 60000);

  it("cluster - every node answers $SRV.PING for kova-node", async () => {
    const inbox = `_INBOX.${Math.random().toString(36).slice(2)}`;
    const replies: Array<{ name: string; type: string; metadata?: Record<string, string> }> = [];
    const sub = tc.nc.subscribe(inbox);
    void (async () => {
      for await (const m of sub) replies.push(m.json());
    })();
    tc.nc.publish("$SRV.PING.kova-node", new Uint8Array(), { reply: inbox });
    await poll(async () => (replies.length >= 2 ? true : undefined), { timeoutMs: 3000, what: "two pings", everyMs: 100, retryErrors: true });
    sub.unsubscribe();
    expect(replies.every((p) => p.name === "kova-node" && p.type === "io.nats.micro.v1.ping_response")).toBe(true);
    expect(replies.map((p) => p.metadata?.node_id).sort()).toEqual(["a1", "a2"]);
  }, 60000);

  it("cluster - graceful stop cuts a turn that outlasts drain_timeout_ms; the message completes once on the other node", async () => {
    const agents = await tc.agents();
    const onA1 = [...agents.values()].find((r) => r.node === "a1" && r.desired === "running")!.id;
    const long = createEnvelope({ from: "tester", to: onA1, type: "task_delegate", payload: { sleepMs: 5000 } });
    await tc.bus.send(long);
    await poll(async () => tc.events.some((e) => e.type === "probe_start" && (e.data as { id: string }).id === long.id), {
      timeoutMs: 5000,
      what: "long turn started",
      everyMs: 100,
      retryErrors: true,
    });
    const t0 = performance.now();
    const exit = await tc.term("a1");
    expect(exit.code).toBe(0);
    expect(performance.now() - t0).toBeLessThan(4000); // drain_timeout_ms 1 s, not the 5 s turn
    const s = await poll(
      async () => {
        const st = await tc.info<ProbeState>(onA1);
        return st.ids.includes(long.id) ? st : undefined;
      },
      { timeoutMs: 30_000, what: "long message completed on a2", everyMs: 100, retryErrors: true },
    );
    expect(s.ids.filter((id) => id === long.id)).toHaveLength(1);
    const ends = tc.events.filter((e) => e.type === "probe_end" && (e.data as { id: string }).id === long.id);
    expect(ends.map((e) => (e.data as { node: string }).node)).toEqual(["a2"]);
  }, 60000);
});
