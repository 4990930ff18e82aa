import { Kvm } from "@nats-io/kv";
import { describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const template = (name: string, idleAfter: string) => `[[actor_templates]]\nname = "${name}"\ntype = "probe"\nidle_after = "${idleAfter}"\n`;

/** Runs `fn` over `items`, `width` at a time. */
async function inBatches<T, R>(items: T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += width) out.push(...(await Promise.all(items.slice(i, i + width).map(fn))));
  return out;
}

/** Instance id → the node hosting it, from every live node's `agents` endpoint. */
async function hosting(tc: TestCluster, nodes: string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const n of nodes) for (const a of await tc.agentsOn(n, 5000)) out.set(a.id, n);
  return out;
}

describe("virtual actors across node processes", () => {
  it("1,000 instances of one template over 3 nodes: all answer, spread over the nodes; a SIGKILLed node's instances move with their state", async () => {
    await using tc = await TestCluster.create({ nodes: ["n1", "n2", "n3"], extraToml: template("inst", "0"), logLevel: "warn" });
    const ids = Array.from({ length: 1000 }, (_, i) => `inst--user-${i}`);
    const t0 = performance.now();
    const first = await inBatches(ids, 100, (id) =>
      tc.bus.ask<{ count: number }>(createEnvelope({ from: "tester", to: id, type: "task_delegate", payload: {} }), { timeoutMs: 60_000 }),
    );
    const askAllMs = performance.now() - t0;
    expect(first.map((r) => r.payload.count)).toEqual(ids.map(() => 1));

    const where = await poll(
      async () => {
        const h = await hosting(tc, ["n1", "n2", "n3"]);
        return h.size === 1000 ? h : undefined;
      },
      { timeoutMs: 30_000, retryErrors: true, what: "1,000 instances hosted" },
    );
    const perNode = (n: string) => [...where.values()].filter((v) => v === n).length;
    // Rendezvous hashing: about a third each.
    for (const n of ["n1", "n2", "n3"]) expect(perNode(n), `instances on ${n}`).toBeGreaterThan(250);
    console.log(`1,000 asks to never-seen instances: ${Math.round(askAllMs)} ms; per node ${["n1", "n2", "n3"].map(perNode).join("/")}`);

    // The CLI addresses an instance by template and key, and shows the templates.
    const cli = await tc.cli(["ask", "inst", "--key", "cli-1", "--type", "task_delegate", "--payload", "{}", "--timeout", "30000"]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout)).toMatchObject({ count: 1 });
    const status = await tc.cli(["status"]);
    expect(status.stdout).toContain("templates (virtual actors)");
    expect(status.stdout).toMatch(/n1\s+inst\s+probe\s+\d+\s+never/);

    const moved = ids.filter((id) => where.get(id) === "n3");
    const killedAt = performance.now();
    tc.kill("n3");
    await poll(
      async () => {
        const h = await hosting(tc, ["n1", "n2"]);
        return moved.every((id) => h.has(id));
      },
      { timeoutMs: 60_000, everyMs: 250, retryErrors: true, what: "n3's instances hosted by n1 and n2" },
    );
    const moveMs = performance.now() - killedAt;
    console.log(`${moved.length} instances moved off the killed node in ${Math.round(moveMs)} ms`);
    // Their state came along: the second message is their second.
    const again = await inBatches(moved, 100, (id) =>
      tc.bus.ask<{ count: number }>(createEnvelope({ from: "tester", to: id, type: "task_delegate", payload: {} }), { timeoutMs: 60_000 }),
    );
    expect(again.map((r) => r.payload.count)).toEqual(moved.map(() => 2));
    expect(await tc.dlqCount()).toBe(0);
  }, 240_000);

  it("passivation under load and SIGKILL: every message processed exactly once, instances passivated and re-activated many times", async () => {
    await using tc = await TestCluster.create({ nodes: ["n1", "n2"], extraToml: template("pv", "400ms"), logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
    const ids = Array.from({ length: 24 }, (_, i) => `pv--k${i}`);
    const sent = new Map<string, string[]>(ids.map((id) => [id, []]));
    let total = 0;
    const send = async (id: string) => {
      const env = createEnvelope({ from: "tester", to: id, type: "task_delegate", payload: { sleepMs: Math.random() < 0.3 ? 50 : 0 } });
      await tc.bus.send(env);
      sent.get(id)!.push(env.id);
      total++;
    };
    // Bursts with pauses longer and shorter than idle_after, so that messages arrive
    // while instances sit idle, while they are being passivated, and after.
    const started = performance.now();
    let killed = false;
    let restarted = false;
    while (performance.now() - started < 9_000) {
      const elapsed = performance.now() - started;
      if (!killed && elapsed > 3_000) {
        tc.kill("n2");
        killed = true;
      }
      if (killed && !restarted && elapsed > 5_500) {
        await tc.startNode("n2");
        restarted = true;
      }
      const burst = ids.filter(() => Math.random() < 0.25);
      await Promise.all(burst.map(send));
      await new Promise((r) => setTimeout(r, Math.random() * 700));
    }
    expect(restarted).toBe(true);

    const kv = await new Kvm(tc.nc).open(`kova_${tc.cluster}_checkpoints`);
    const agents = await new Kvm(tc.nc).open(`kova_${tc.cluster}_agents`);
    const leases = await new Kvm(tc.nc).open(`kova_${tc.cluster}_leases`);
    const stateOf = async (id: string) => (await kv.get(id))?.json<{ state: ProbeState }>().state;
    let short = "";
    const states = await poll(
      async () => {
        const all = await Promise.all(ids.map(async (id) => [id, await stateOf(id)] as const));
        const counted = all.reduce((n, [, s]) => n + (s?.count ?? 0), 0);
        const behind = all.filter(([id, s]) => (s?.count ?? 0) < sent.get(id)!.length);
        short = (
          await Promise.all(
            behind.map(async ([id, s]) => {
              const reg = await agents.get(id);
              const lease = await leases.get(id).catch(() => null);
              const consumer = await tc.bus.jsm.consumers.info(tc.bus.subjects.streams.a2a, tc.bus.subjects.consumer(id)).catch(() => undefined);
              return `${id} ${s?.count ?? 0}/${sent.get(id)!.length} registry ${reg ? `${reg.operation} ${reg.operation === "PUT" ? reg.string() : ""}` : "none"} lease ${lease ? `${lease.operation} ${lease.operation === "PUT" ? lease.string() : ""}` : "none"} consumer ${consumer ? `pending ${consumer.num_pending} ack_pending ${consumer.num_ack_pending}` : "none"}`;
            }),
          )
        ).join(", ");
        if (behind.length > 0) {
          const views = await Promise.all(
            ["n1", "n2"].map((n) =>
              tc.status(n, 1000).then(
                (st) => `${n}: healthy ${st.healthy} live ${st.liveNodes.join("+")} hosted ${st.actors.hosted} ${JSON.stringify(st.virtual)}`,
                (err: unknown) => `${n}: ${String(err)}`,
              ),
            ),
          );
          short += ` | ${views.join(" | ")}`;
        }
        return counted >= total ? all : undefined;
      },
      { timeoutMs: 90_000, everyMs: 500, retryErrors: true, what: () => `all ${total} messages counted (short: ${short}; logs in ${tc.dir})` },
    );
    for (const [id, s] of states) {
      const want = sent.get(id)!;
      expect(s?.count ?? 0, `${id} count`).toBe(want.length);
      expect([...(s?.ids ?? [])].sort(), `${id} ids`).toEqual([...want].sort());
      expect(s?.dupHandled ?? 0, `${id} handled an id twice`).toBe(0);
      expect(s?.maxInFlight ?? 0).toBeLessThanOrEqual(1);
    }
    const passivated = tc.events.filter((e) => e.type === "agent_passivated").length;
    const activated = tc.events.filter((e) => e.type === "agent_activated").length;
    console.log(`${total} messages to ${ids.length} instances: ${passivated} passivations, ${activated} activations`);
    expect(passivated).toBeGreaterThan(20);
    expect(activated).toBeGreaterThan(ids.length);
    expect(await tc.dlqCount()).toBe(0);
  }, 180_000);
});
