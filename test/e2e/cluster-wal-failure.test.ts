import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/**
 * A node whose WAL fails for real (its process runs under RLIMIT_FSIZE, so LMDB's commit
 * fails with EFBIG once the data file would outgrow it, as on a full disk) hands its
 * actors over and exits; their messages wait in the mailboxes (issue 8, item 7).
 */
let tc: TestCluster;
const sent = new Map<string, string[]>();
/** Room for the WAL of a started node with a few small turns, not for the big ones below. */
const FILE_SIZE_LIMIT = 2 * 1024 * 1024;
const BIG = "x".repeat(400 * 1024);

beforeAll(async () => {
  tc = await TestCluster.create({ nodes: ["n1", "n2"], actors: 8, start: false, logLevel: process.env.KOVA_LOG_LEVEL ?? "warn" });
  await tc.startNode("n1", 20_000, { fileSizeLimitBytes: FILE_SIZE_LIMIT });
  await tc.startNode("n2");
  await poll(
    async () => {
      const a = await tc.agents();
      const nodes = new Set([...a.values()].map((r) => r.node));
      return a.size === 8 && nodes.has("n1") && nodes.has("n2") && [...a.values()].every((r) => r.state === "Idle");
    },
    { timeoutMs: 30_000, what: "initial placement on both nodes", everyMs: 100, retryErrors: true },
  );
}, 60_000);
afterAll(async () => {
  await tc?.stop();
});

async function send(actorId: string, payload: unknown): Promise<void> {
  const env = createEnvelope({ from: "tester", to: actorId, type: "task_delegate", payload });
  await tc.bus.send(env);
  sent.set(actorId, [...(sent.get(actorId) ?? []), env.id]);
}

describe("a node whose WAL fails", () => {
  it("cluster - the WAL fails (EFBIG): the node exits non-zero, its actors move to the other node, every message is processed once and none is dead-lettered", async () => {
    for (const a of tc.actorIds) await send(a, { n: 0 });
    const agents = await tc.agents();
    const onN1 = tc.actorIds.filter((a) => agents.get(a)?.node === "n1");
    expect(onN1.length).toBeGreaterThan(0);
    // Big turn records grow n1's WAL past its file size limit within a few turns.
    const t0 = performance.now();
    for (let i = 1; i <= 4; i++) for (const a of tc.actorIds) await send(a, { n: i, big: BIG });

    const exit = await Promise.race([
      tc.procs.get("n1")!.exited,
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error("n1 did not exit after its WAL failed")), 60_000)),
    ]);
    const exitedMs = Math.round(performance.now() - t0);
    expect(exit.signal).toBeNull();
    expect(exit.code).not.toBe(0);

    await poll(
      async () => {
        const a = await tc.agents();
        return tc.actorIds.every((id) => a.get(id)?.node === "n2") ? true : undefined;
      },
      { timeoutMs: 20_000, what: "every actor hosted by n2", everyMs: 100, retryErrors: true },
    );
    console.info(`WAL failure: n1 exited ${exitedMs} ms after the big messages began, its actors were on n2 ${Math.round(performance.now() - t0)} ms after`);
    const states = await tc.processed(sent, 60_000);
    for (const [a, s] of states) {
      expect(new Set(s.ids).size, `${a} counted an id twice`).toBe(s.ids.length);
      expect([...s.ids].sort()).toEqual([...(sent.get(a) ?? [])].sort());
      expect(s.dupHandled).toBe(0);
    }
    expect(await tc.dlqCount(), "messages dead-lettered because a node's WAL failed").toBe(0);
  }, 150_000);
});
