import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Wal } from "../../src/wal/index.js";
import { walInternals } from "../../src/wal/wal.js";
import { walDirs } from "./wal-helpers.js";
import { WalErrorCode } from "../../src/wal/errors.js";

const CHILD = join(import.meta.dirname, "../fixtures/wal/fsize-child.mjs");
const DIST = join(import.meta.dirname, "../../dist/wal/index.js");

const dir = walDirs();

type Point = "after-log" | "in-execute" | "after-execute" | "none";

/**
 * One step of log → execute → complete with a throw injected at `point`; the WAL is
 * then abandoned without completing (as a crash would leave it).
 */
async function step(wal: Wal, id: number, point: Point, effects: number[]): Promise<void> {
  const seq = await wal.append("step", { id }, { owner: "agent" });
  if (point === "after-log") throw new Error("crash after log");
  await (async () => {
    if (point === "in-execute") throw new Error("crash in execute");
    effects.push(id);
  })();
  if (point === "after-execute") throw new Error("crash after execute");
  await wal.complete(seq);
}

describe("wal faults", () => {
  it("wal - a throw at each point of log → execute → complete: recovery re-executes exactly what was pending", async () => {
    const d = dir("faults");
    const points: Point[] = ["none", "after-log", "none", "in-execute", "after-execute", "none", "after-log"];
    const wal = await Wal.open({ dir: d, ringBits: 4 });
    const effects: number[] = [];
    const failedIds: number[] = [];
    for (const [id, point] of points.entries()) {
      await step(wal, id, point, effects).catch(() => failedIds.push(id));
    }
    // Through run(): a throwing exec leaves the record PENDING and rethrows.
    await expect(wal.run("step", { id: 7 }, async () => Promise.reject(new Error("exec failed")), { owner: "agent" })).rejects.toThrow("exec failed");
    failedIds.push(7);
    expect(await wal.run("step", { id: 8 }, async (seq) => `done ${seq}`, { owner: "agent" })).toMatch(/^done \d+$/);
    await wal.close();

    const again = await Wal.open({ dir: d });
    const pendingIds = again.recovery.pending.map((p) => (p.payload as { id: number }).id);
    expect(pendingIds).toEqual(failedIds);
    expect(again.recovery.complete).toBe(points.length + 2 - failedIds.length);
    // Re-execute with the seq as idempotency key, then complete: nothing is left.
    for (const p of again.recovery.pending) await again.complete(p.seq);
    await again.close();
    const third = await Wal.open({ dir: d });
    expect(third.recovery.pending).toEqual([]);
    await third.close();
  });

  it("wal - a failed commit puts the WAL in a failed state: every later append rejects with WAL_FAILED", async () => {
    expect(existsSync(DIST), "run `npm run build` first: the child runs dist/").toBe(true);
    const d = dir("failed");
    // A real LMDB commit failure: the child runs under a 200 KiB file-size limit, so the
    // commit that grows data.mdb past it fails (EFBIG/EIO) inside LMDB.
    const out = execFileSync("sh", ["-c", `ulimit -f 400; exec "${process.execPath}" "${CHILD}" "${d}" full`], {
      encoding: "utf8",
      env: { ...process.env, KOVA_LOG_LEVEL: "silent" },
      timeout: 20_000,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const lines = out
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { ok?: boolean; seq?: number; code?: string; done?: boolean; failure?: string });
    // wal.failure resolved once, with the first failure (what a node fails over on).
    expect(lines.filter((l) => l.failure !== undefined)).toEqual([{ failure: WalErrorCode.WAL_FAILED }]);
    const oks = lines.filter((l) => l.ok === true);
    const failures = lines.filter((l) => l.ok === false);
    expect(oks.length).toBeGreaterThan(0);
    expect(failures).toHaveLength(4); // the failing append and every one after it
    for (const f of failures) expect(f.code).toBe(WalErrorCode.WAL_FAILED);
    expect(lines.at(-1)).toEqual({ done: true }); // close did not hang after the failure
    // Without the limit, the WAL reopens with every resolved append intact.
    const again = await Wal.open({ dir: d, maxPending: 1 << 16 });
    expect(again.recovery.corrupt).toEqual([]);
    const pending = new Set(again.recovery.pending.map((p) => p.seq));
    for (const ok of oks) expect(pending.has(ok.seq!)).toBe(true);
    await again.close();
  });

  it("wal - lock order violations at run time throw LockOrderError and leave the WAL usable", async () => {
    const d = dir("locks");
    const wal = await Wal.open({ dir: d, sync: "normal" });
    const { locks } = walInternals(wal);
    const held = locks.buffer();
    // An append while the Buffer lock is held elsewhere is an order violation, not a deadlock.
    await expect(wal.append("step", {})).rejects.toMatchObject({ code: WalErrorCode.LOCK_ORDER });
    held.release();
    // No WAL lock may be taken inside an LMDB transaction callback (LMDB's lock is innermost).
    await walInternals(wal).storage.env.transaction(() => {
      expect(() => locks.insideLmdbCallback(() => locks.buffer())).toThrow(/inside an LMDB transaction callback/);
    });
    expect(await wal.append("step", { after: true })).toBe(1);
    await wal.close();
  });
});
