import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import { TEST_AGENTS_MODULE, WORKFLOW_FIXTURES, type AgentCounts } from "../fixtures/workflow/rig.js";

// Spawns node processes from dist/: run `npm run build` first.
describe("workflow subject waits across node processes", () => {
  it("workflow - a message published on a waited subject while no node runs ends the wait once the run's node is back", async () => {
    await using tc = await TestCluster.create({ nodes: ["n1"], modules: [TEST_AGENTS_MODULE], extraToml: '[[actors]]\nid = "writer"\ntype = "wf-agent"' });
    await poll(async () => (await tc.agents()).get("writer")?.node ?? undefined, { timeoutMs: 10_000, what: "the writer hosted" });
    const start = await tc.cli(["workflow", "run", join(WORKFLOW_FIXTURES, "paid.toml"), "--input", "order=o-7", "--json"]);
    expect(start.code, start.stderr).toBe(0);
    const { runId } = JSON.parse(start.stdout) as { runId: string };
    // The wait has begun (its subject captured) when status lists it.
    await poll(
      async () => {
        const r = await tc.cli(["workflow", "status", runId]);
        return r.stdout.includes("paid: waiting for a message on orders.o-7.paid") ? true : undefined;
      },
      { timeoutMs: 20_000, what: "the run to wait on orders.o-7.paid" },
    );

    tc.kill("n1");
    await tc.procs.get("n1")!.exited;
    // Nobody is subscribed now: only the capture stream keeps this message.
    const ack = await tc.bus.js.publish("orders.o-7.paid", JSON.stringify({ amount: 42 }));
    expect(ack.stream).toBe(`KOVA_${tc.cluster.toUpperCase()}_WAITS`);
    await tc.startNode("n1");

    const ended = await poll(() => tc.events.find((e) => e.runId === runId && e.type === "run_stream_end"), { timeoutMs: 30_000, what: "the run to end" });
    expect(ended.data).toMatchObject({ status: "completed" });
    const done = tc.events.find((e) => e.runId === runId && e.type === "run_completed")!;
    expect((done.data as { output: string }).output).toBe("writer(ship o-7 for 42)");
    expect(tc.events.find((e) => e.runId === runId && e.type === "signal_received")?.data).toMatchObject({ subject: "orders.o-7.paid", stepId: "paid" });
    const writer = await poll(() => tc.bus.request<AgentCounts>("writer", "info_request", {}, { timeoutMs: 1000 }), {
      timeoutMs: 10_000,
      retryErrors: true,
      what: "the writer's counts",
    });
    expect(writer.inputs).toEqual(["ship o-7 for 42"]);
  }, 90_000);
});
