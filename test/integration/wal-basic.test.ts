import { describe, expect, it } from "vitest";
import { Wal } from "../../src/wal/index.js";
import { walDirs } from "./wal-helpers.js";

const dir = walDirs();

describe("wal basics", () => {
  it("wal - a PENDING record survives close and is handed back by recovery, a COMPLETE one is skipped", async () => {
    const d = dir("basic");
    const wal = await Wal.open({ dir: d, ringBits: 4 });
    expect(wal.recovery.epoch).toBe(1);
    const a = await wal.append("step", { n: 1 }, { owner: "agent-a" });
    const b = await wal.append("step", { n: 2 }, { owner: "agent-b" });
    await wal.complete(a);
    expect(wal.pendingFor("agent-b").map((r) => r.seq)).toEqual([b]);
    await wal.close();

    const again = await Wal.open({ dir: d });
    expect(again.recovery.epoch).toBe(2);
    expect(again.recovery.complete).toBe(1);
    expect(again.recovery.pending).toEqual([{ seq: b, epoch: 1, kind: "step", owner: "agent-b", payload: { n: 2 }, status: "PENDING" }]);
    expect(again.recovery.corrupt).toEqual([]);
    expect(await again.append("step", { n: 3 })).toBe(b + 1);
    await again.close();
  });
});
