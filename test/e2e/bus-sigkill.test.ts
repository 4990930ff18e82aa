import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const fixture = join(import.meta.dirname, "../fixtures/bus/consumer.mjs");
const ACK_WAIT_MS = 1_500;
const dist = join(import.meta.dirname, "../../dist/bus/index.js");

interface Line {
  event: string;
  id?: string;
  deliveryCount?: number;
  pid: number;
}

function host(url: string, cluster: string, agentId: string, ackWaitMs: number): { child: ChildProcess; lines: Line[] } {
  const child = spawn(process.execPath, [fixture, url, cluster, agentId, String(ackWaitMs)], { stdio: ["ignore", "pipe", "inherit"] });
  const lines: Line[] = [];
  createInterface({ input: child.stdout! }).on("line", (l) => lines.push(JSON.parse(l) as Line));
  return { child, lines };
}

let server: NatsServerHandle;
const children: ChildProcess[] = [];
beforeAll(async () => {
  if (!existsSync(dist)) throw new Error("run `npm run build` first: the consumer fixture runs the compiled bus from dist/");
  server = await startNatsServer({ allowExternal: false });
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await server?.stop();
});

describe("bus mailbox across a killed host process", () => {
  it("mailbox - a message whose host is SIGKILLed mid-handling is redelivered to the next host and processed", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    // The hosts' progress acks (+WPI) for the agent's messages, as the server receives them.
    const heartbeats: number[] = [];
    const acks = bus.nc.subscribe(`$JS.ACK.${bus.subjects.streams.a2a}.${bus.subjects.consumer("worker")}.>`);
    void (async () => {
      for await (const m of acks) if (m.string() === "+WPI") heartbeats.push(performance.now());
    })();
    await bus.nc.flush();
    const first = host(server.url, cluster, "worker", ACK_WAIT_MS);
    children.push(first.child);
    await poll(() => first.lines.some((l) => l.event === "ready"), { timeoutMs: 10_000, what: "first host ready" });
    const env = createEnvelope({ from: "tester", to: "worker", type: "task_delegate", payload: { holdFirstMs: 60_000 } });
    await bus.send(env);
    await poll(() => first.lines.some((l) => l.event === "start" && l.id === env.id), { timeoutMs: 10_000, what: "handling in the first host" });
    const handling = performance.now();
    const second = host(server.url, cluster, "worker", ACK_WAIT_MS);
    children.push(second.child);
    await poll(() => second.lines.some((l) => l.event === "ready"), { timeoutMs: 10_000, what: "second host ready" });
    // Heartbeats keep the message with the first host while it is alive, well past ack_wait:
    // wait until they have covered twice ack_wait (a redelivery, with the second host
    // pulling, would have come by then), then ask the server how often it delivered.
    await poll(() => heartbeats.some((t) => t > handling + 2 * ACK_WAIT_MS), { timeoutMs: 10_000, what: "heartbeats past twice ack_wait" });
    const held = await bus.jsm.consumers.info(bus.subjects.streams.a2a, bus.subjects.consumer("worker"));
    expect(held.delivered.consumer_seq).toBe(1);
    expect(held.num_ack_pending).toBe(1);
    expect(second.lines.some((l) => l.event === "start")).toBe(false);
    acks.unsubscribe();

    first.child.kill("SIGKILL");
    const done = await poll(() => second.lines.find((l) => l.event === "done" && l.id === env.id), {
      timeoutMs: 15_000,
      what: "redelivery to the second host",
    });
    expect(done.deliveryCount).toBe(2);
    expect(first.lines.some((l) => l.event === "done")).toBe(false);
    await poll(async () => (await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages === 0, { timeoutMs: 5_000, what: "ack" });
  });
});
