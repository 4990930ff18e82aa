import { describe, expect, it } from "vitest";
import { connect as tcpConnect } from "node:net";
import { Bus, KovaClient, type KovaEvent } from "../../src/bus/index.js";
import { scriptedReply } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";
import { poll } from "../fixtures/poll.js";

/** Sends a GET with the key and closes the socket at once, before any answer. */
function abortedGet(url: string, path: string, key: string): Promise<void> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = tcpConnect(Number(port), hostname, () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${key}\r\nAccept: text/event-stream\r\n\r\n`, () => {
        socket.destroy();
        resolve();
      });
    });
    socket.on("error", () => resolve());
  });
}

/** The session's events as the web view streams them to `key`, up to its caught_up mark. */
async function viewedEvents(url: string, sessionId: string, key: string): Promise<KovaEvent[]> {
  const ac = new AbortController();
  // Ends the stream once read (or when the deadline passed).
  await using _stream = defer(() => ac.abort());
  const res = await fetch(`${url}/ui/api/sessions/${sessionId}/events`, { headers: { authorization: `Bearer ${key}` }, signal: ac.signal });
  expect(res.status).toBe(200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  const deadline = setTimeout(() => ac.abort(), 10_000);
  await using _deadline = defer(() => clearTimeout(deadline));
  while (!text.includes("event: caught_up")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => JSON.parse(block.slice("data: ".length)) as KovaEvent);
}

describe("gateway: web view session streams", () => {
  it("web - a key restricted to some agents sees only the events of their runs in its session; an admin key sees all", async () => {
    await using rig = await startGatewayRig({
      agents: ["helper", "writer"],
      handler: (r) => scriptedReply.text(`answer to ${String(r.lastMessage?.content ?? "")}`),
      keys: { narrow: ["helper"] },
    });
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    // The narrow key's own session (its scope), started by a service on the bus.
    const session = `${rig.scope("narrow")}shared-1`;
    await client.send("coordinator", "task_delegate", { input: "secret plan", sessionId: session, runId: "root-run", children: ["helper", "writer"] });
    // An event of a run that names no agent (no run_started): nobody can tell whose it is.
    const bus = await Bus.connect({ servers: rig.nats.url, cluster: rig.cluster, name: "test-publisher" });
    await using _bus = defer(() => bus.close());
    await bus.publishEvent({ type: "note", sessionId: session, runId: "orphan-run", ts: Date.now(), data: { text: "unattributed" } });

    const all = await poll(
      async () => {
        const events = await viewedEvents(rig.url, session, rig.key);
        return events.filter((e) => e.type === "run_completed").length === 3 && events;
      },
      { timeoutMs: 20_000, what: "the coordinator and both children to complete" },
    );
    const agentsOf = (events: KovaEvent[]) =>
      events
        .filter((e) => e.type === "run_started")
        .map((e) => (e.data as { agentId: string }).agentId)
        .sort();
    expect(agentsOf(all)).toEqual(["coordinator", "helper", "writer"]);
    expect(all.some((e) => e.runId === "orphan-run")).toBe(true);

    const narrow = await viewedEvents(rig.url, session, rig.keys.narrow!);
    expect(agentsOf(narrow)).toEqual(["helper"]);
    const helperRun = narrow.find((e) => e.type === "run_started")!.runId;
    // every event it got is of the helper's run: not the coordinator's input, not the writer's, not the orphan
    expect(narrow.length).toBeGreaterThan(1);
    expect(narrow.every((e) => e.runId === helperRun)).toBe(true);
    expect(JSON.stringify(narrow)).not.toContain("(part for writer)");
  }, 60_000);

  it("web - session streams aborted right after the request leave no consumer on EVENTS behind", async () => {
    await using rig = await startGatewayRig();
    const bus = await Bus.connect({ servers: rig.nats.url, cluster: rig.cluster, name: "test-observer" });
    await using _bus = defer(() => bus.close());
    const consumers = async () => (await bus.jsm.streams.info(bus.subjects.streams.events)).state.consumer_count;
    const baseline = await consumers();

    for (let batch = 0; batch < 4; batch++) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => abortedGet(rig.url, `/ui/api/sessions/s-${batch}-${i}/events`, rig.key)));
    }
    // One stream read to its end the ordinary way, then closed by the client.
    const ac = new AbortController();
    const open = await fetch(`${rig.url}/ui/api/sessions/s-open/events`, { headers: { authorization: `Bearer ${rig.key}` }, signal: ac.signal });
    expect(open.status).toBe(200);
    expect(await consumers()).toBeGreaterThan(baseline);
    ac.abort();

    await poll(async () => (await consumers()) === baseline, {
      timeoutMs: 15_000,
      what: () => `the EVENTS consumers to return to ${baseline}`,
    });
  }, 60_000);
});
