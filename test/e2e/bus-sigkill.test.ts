import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster, waitFor } from "../fixtures/bus/helpers.js";

const fixture = join(import.meta.dirname, "../fixtures/bus/consumer.mjs");
const dist = join(import.meta.dirname, "../../dist/bus/index.js");

interface Line { event: string; id?: string; deliveryCount?: number; pid: number }

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
    const bus = await connectBus(server.url, cluster);
    try {
      const first = host(server.url, cluster, "worker", 1_500);
      children.push(first.child);
      await waitFor(() => first.lines.some((l) => l.event === "ready"), 10_000, "first host ready");
      const env = createEnvelope({ from: "tester", to: "worker", type: "task_delegate", payload: { holdFirstMs: 60_000 } });
      await bus.send(env);
      await waitFor(() => first.lines.some((l) => l.event === "start" && l.id === env.id), 10_000, "handling in the first host");
      // Heartbeats keep the message with the first host while it is alive, well past ack_wait.
      await new Promise((r) => setTimeout(r, 2_000));
      const second = host(server.url, cluster, "worker", 1_500);
      children.push(second.child);
      await waitFor(() => second.lines.some((l) => l.event === "ready"), 10_000, "second host ready");
      expect(second.lines.some((l) => l.event === "start")).toBe(false);

      first.child.kill("SIGKILL");
      const done = await waitFor(() => second.lines.find((l) => l.event === "done" && l.id === env.id), 15_000, "redelivery to the second host");
      expect(done.deliveryCount).toBe(2);
      expect(first.lines.some((l) => l.event === "done")).toBe(false);
      await waitFor(async () => (await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages === 0, 5_000, "ack");
    } finally {
      await bus.close();
    }
  });
});
