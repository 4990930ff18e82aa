import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Bus } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { createToolLoopLoad, startNatsServer, type NatsServerHandle, type ToolLoopLoad } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

/**
 * The tool-loop load sends an agent its next job once the last one ended, which it reads
 * from the run's stored events. A node frozen during a model call publishes that call's
 * model_response when it wakes, after the agent's new host ended the run: the run's last
 * event is then not its end, and the load must still find the end (else the agent gets no
 * job again and its job counts as lost).
 */
let server: NatsServerHandle;
let bus: Bus;
let nc: NatsConnection;
let load: ToolLoopLoad;

beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false });
  bus = await Bus.connect({ servers: server.url, cluster: `t${randomUUID().replaceAll("-", "").slice(0, 10)}`, logger: createLogger({ level: "silent" }) });
  await bus.ensureStreams();
  nc = await connect({ servers: server.url });
  await new Kvm(nc).create(bus.subjects.kv.leases);
  load = await createToolLoopLoad({ agents: 1 });
}, 30_000);

afterAll(async () => {
  await load?.dispose();
  await bus?.close();
  await nc?.close();
  await server?.stop();
});

describe("tool-loop load", () => {
  it("tool-loop load - a job whose run ended is found ended when an event of the run was stored after its end, and the agent gets its next job", async () => {
    await load.start(bus, nc);
    const job = await poll(() => [...load.jobs.values()][0], { timeoutMs: 10_000, what: "the first job acknowledged" });
    const event = (type: string, data: Record<string, unknown>) => bus.publishEvent({ type, sessionId: job.id, runId: job.id, ts: Date.now(), data });
    await event("run_completed", { agentId: job.agent, output: `done ${job.id}` });
    await event("run_stream_end", { status: "completed" });
    // The late model_response of a woken node: now the run's last stored event.
    await event("model_response", { agentId: job.agent, turn: 1 });
    const end = await poll(() => job.end, { timeoutMs: 30_000, everyMs: 100, what: `job ${job.id} found ended` });
    expect(end).toBe("run_completed");
    const next = await poll(() => [...load.jobs.values()].find((j) => j.id !== job.id), { timeoutMs: 10_000, what: "the agent's next job" });
    expect(next.agent).toBe(job.agent);
    await load.stopSending();
    const report = await load.report();
    expect(report.done).toBe(1);
    expect(report.open).toEqual([next.id]);
  }, 60_000);
});
