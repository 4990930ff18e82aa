import { describe, expect, it } from "vitest";
import { KovaClient, type KovaEvent } from "../../src/bus/index.js";
import { tailTree } from "../../src/cli/workflow-commands.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

/** What a piped `kova events tail --tree` writes: snapshots separated by blank lines. */
function pipe(): { write(text: string): boolean; isTTY: false; text: string; snapshots(): string[][] } {
  return {
    isTTY: false,
    text: "",
    write(text: string) {
      this.text += text;
      return true;
    },
    snapshots() {
      return this.text
        .trim()
        .split("\n\n")
        .map((s) => s.split("\n"));
    },
  };
}

/** A run of one agent in session `s`, started at `t`, ended unless `open`. */
async function run(client: KovaClient, s: string, runId: string, t: number, open = false): Promise<void> {
  const at = (type: string, dt: number, data: unknown): KovaEvent => ({ type, sessionId: s, runId, ts: t + dt, data });
  await client.bus.publishEvent(at("run_started", 0, { agentId: "helper", input: runId }));
  if (open) return;
  await client.bus.publishEvent(at("run_completed", 1_000, { agentId: "helper", output: "ok", usage: { inputTokens: 3, outputTokens: 2 } }));
  await client.bus.publishEvent(at("run_stream_end", 1_000, { status: "completed" }));
}

describe("kova events tail --tree --until-done", () => {
  it("tree - a session of three runs one after another: every run is shown, and the tail ends once the last one has (not at the first end)", async () => {
    await using client = await KovaClient.connect({ servers: nats.url, cluster: uniqueCluster() });
    const t = Date.now() - 60_000;
    for (const [i, r] of ["r1", "r2", "r3"].entries()) await run(client, "sess", r, t + i * 10_000);
    const out = pipe();
    await tailTree(client, "sess", { untilDone: true, out: out as unknown as NodeJS.WriteStream });
    expect(out.snapshots().at(-1)).toEqual([
      "helper  r1  completed  1.0s  tokens 3/2",
      "helper  r2  completed  1.0s  tokens 3/2",
      "helper  r3  completed  1.0s  tokens 3/2",
    ]);
  });

  it("tree - a run still going when the history is read keeps the tail open until it ends, live", async () => {
    await using client = await KovaClient.connect({ servers: nats.url, cluster: uniqueCluster() });
    const t = Date.now();
    await run(client, "live", "a1", t);
    await run(client, "live", "a2", t + 100, true);
    const out = pipe();
    let returned = false;
    const tail = tailTree(client, "live", { untilDone: true, out: out as unknown as NodeJS.WriteStream }).then(() => (returned = true));
    // The history is read (the first run's end is drawn) and the tail waits for a2.
    await poll(() => out.text.includes("a1  completed"), { timeoutMs: 5_000, what: "the history drawn" });
    expect(returned).toBe(false);
    await client.bus.publishEvent({ type: "run_stream_end", sessionId: "live", runId: "a2", ts: t + 2_100, data: { status: "completed" } });
    await tail;
    expect(out.snapshots().at(-1)).toEqual(["helper  a1  completed  1.0s  tokens 3/2", "helper  a2  completed  2.0s"]);
  });
});
