import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Wal } from "../../src/wal/index.js";
import { walDirs } from "./wal-helpers.js";

const CHILD = join(import.meta.dirname, "../fixtures/wal/deferred-child.mjs");
const dir = walDirs();

/** Runs the child until it SIGKILLs itself; what it printed. */
function killedChild(d: string, mode: string): { done: number; next?: number } {
  try {
    execFileSync(process.execPath, [CHILD, d, mode], { encoding: "utf8" });
  } catch (err) {
    const e = err as { signal?: string; stdout?: string; stderr?: string };
    if (e.signal !== "SIGKILL") throw new Error(`child failed: ${e.stderr}`);
    return JSON.parse(e.stdout!.trim());
  }
  throw new Error("the child was expected to kill itself");
}

describe("wal deferred completions", () => {
  it("wal - a deferred completion is complete in memory at once and written with the next append, in its transaction", async () => {
    const d = dir("deferred");
    {
      await using wal = await Wal.open({ dir: d, sync: "full" });
      const a = await wal.append("turn", { n: 1 }, { owner: "a" });
      const completed = wal.complete(a, { kv: [{ key: "cp:a", value: 1 }], defer: true });
      expect(wal.pendingFor("a")).toEqual([]);
      expect(wal.pendingCount).toBe(0);
      // Completing it again is a no-op, deferred or not.
      await wal.complete(a);
      await wal.append("turn", { n: 2 }, { owner: "a" });
      await completed;
      expect(wal.getKv("cp:a")).toBe(1);
    }
    await using again = await Wal.open({ dir: d });
    expect(again.recovery.pending.map((r) => r.payload)).toEqual([{ n: 2 }]);
    expect(again.getKv("cp:a")).toBe(1);
  });

  it("wal - putKv writes side-table entries without a record, deferred like a completion and in order with them; alone, shortly after", async () => {
    const d = dir("deferred-kv");
    {
      await using wal = await Wal.open({ dir: d, sync: "full" });
      const a = await wal.append("turn", { n: 1 }, { owner: "a" });
      const completed = wal.complete(a, { kv: [{ key: "cp:a", value: 1 }], defer: true });
      // Deferred after the completion: in the same transaction, later, so it wins.
      const put = wal.putKv([{ key: "cp:a", value: 2 }]);
      expect(wal.pendingCount).toBe(0);
      await Promise.all([completed, put]);
      expect(wal.getKv("cp:a")).toBe(2);
      // Alone (no append follows): written on its own.
      await wal.putKv([{ key: "cp:b", value: 3 }]);
      expect(wal.nextSeq).toBe(a + 1);
    }
    await using again = await Wal.open({ dir: d });
    expect(again.recovery.pending).toEqual([]);
    expect([again.getKv("cp:a"), again.getKv("cp:b")]).toEqual([2, 3]);
  });

  it("wal - with no other write, deferred completions are written on their own shortly after, and by close", async () => {
    const d = dir("deferred-alone");
    {
      await using wal = await Wal.open({ dir: d, sync: "full" });
      const seqs = await Promise.all([1, 2, 3].map((n) => wal.append("turn", { n }, { owner: `o${n}` })));
      const t0 = performance.now();
      await Promise.all(seqs.slice(0, 2).map((s, i) => wal.complete(s, { kv: [{ key: `cp:${i}`, value: i }], defer: true })));
      expect(performance.now() - t0).toBeLessThan(10_000); // on their own, not held until the close
      // The last one is still deferred when the WAL closes: the close writes it.
      void wal.complete(seqs[2]!, { defer: true });
    }
    await using again = await Wal.open({ dir: d });
    expect(again.recovery.pending).toEqual([]);
    expect([again.getKv("cp:0"), again.getKv("cp:1")]).toEqual([0, 1]);
  });

  it("wal - a SIGKILL before the deferred completion was written leaves the record PENDING; after the next append or the deferral time it is complete", () => {
    const now = dir("deferred-kill-now");
    const a = killedChild(now, "now");
    const afterAppend = dir("deferred-kill-append");
    const b = killedChild(afterAppend, "after-append");
    const afterWait = dir("deferred-kill-wait");
    killedChild(afterWait, "after-wait");
    return (async () => {
      {
        await using wal = await Wal.open({ dir: now });
        expect(wal.recovery.pending.map((r) => r.seq)).toEqual([a.done]);
        expect(wal.getKv("cp:a")).toBeUndefined();
      }
      {
        await using wal = await Wal.open({ dir: afterAppend });
        expect(wal.recovery.pending.map((r) => r.seq)).toEqual([b.next]);
        expect(wal.getKv("cp:a")).toEqual({ n: 1 });
      }
      {
        await using wal = await Wal.open({ dir: afterWait });
        expect(wal.recovery.pending).toEqual([]);
        expect(wal.getKv("cp:a")).toEqual({ n: 1 });
      }
    })();
  });
});
