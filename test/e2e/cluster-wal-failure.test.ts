import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

/**
 * A node whose WAL fails for real (its process runs under RLIMIT_FSIZE, so LMDB's commit
 * fails with EFBIG once the data file would outgrow it, as on a full disk) hands its
 * actors over and exits; their messages wait in the mailboxes (docs/cluster.md).
 *
 * "Hands over" means it gives its leases up (releases them and leaves the membership):
 * its peer takes the actors at once, not when the dead node's heartbeats go stale. With
 * no release and no leave the actors reached n2 about stale_after_ms after n1's exit (2.0 s
 * at 2 s: its heartbeats go on until its teardown), with them within ~50 ms. So the
 * staleness window here is long (6 s) and the actors must be on n2 within a third of it
 * after the exit: only given-up leases get them there that soon.
 */
let tc: TestCluster;
const sent = new Map<string, string[]>();
/** When n1's process exited (performance.now()), read from its exit event. */
let n1ExitedAt: Promise<number>;
const STALE_AFTER_MS = 6_000;
/** How soon after n1's exit its actors must be hosted by n2: well inside the staleness window. */
const MOVED_WITHIN_MS = STALE_AFTER_MS / 3;
/** Room for the WAL of a started node with a few small turns, not for the big ones below. */
const FILE_SIZE_LIMIT = 2 * 1024 * 1024;
const BIG = "x".repeat(400 * 1024);

beforeAll(async () => {
  tc = await TestCluster.create({
    nodes: ["n1", "n2"],
    actors: 8,
    start: false,
    staleAfterMs: STALE_AFTER_MS,
    logLevel: process.env.KOVA_LOG_LEVEL ?? "warn",
  });
  const n1 = await tc.startNode("n1", 20_000, { fileSizeLimitBytes: FILE_SIZE_LIMIT });
  n1ExitedAt = n1.exited.then(() => performance.now());
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
  it("cluster - the WAL fails (EFBIG): the node exits non-zero and gives its leases up, its actors are on the other node well before the node's heartbeats would go stale, every message is processed once and none is dead-lettered", async () => {
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

    const exitedAt = await n1ExitedAt;

    await poll(
      async () => {
        const a = await tc.agents();
        return tc.actorIds.every((id) => a.get(id)?.node === "n2") ? true : undefined;
      },
      { timeoutMs: 20_000, what: "every actor hosted by n2", everyMs: 50, retryErrors: true },
    );
    // An upper bound: the poll saw them there this long after the exit (or sooner).
    const movedMs = Math.round(performance.now() - exitedAt);
    console.info(`WAL failure: n1 exited ${exitedMs} ms after the big messages began, its actors were on n2 ${movedMs} ms after the exit`);
    expect(movedMs, `actors on n2 ${movedMs} ms after n1's exit (stale_after_ms ${STALE_AFTER_MS})`).toBeLessThan(MOVED_WITHIN_MS);
    const states = await tc.processed(sent, 60_000);
    for (const [a, s] of states) {
      expect(new Set(s.ids).size, `${a} counted an id twice`).toBe(s.ids.length);
      expect([...s.ids].sort()).toEqual([...(sent.get(a) ?? [])].sort());
      expect(s.dupHandled).toBe(0);
    }
    expect(await tc.dlqCount(), "messages dead-lettered because a node's WAL failed").toBe(0);
  }, 150_000);
});
