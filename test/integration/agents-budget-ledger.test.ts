import { describe, expect, it } from "vitest";
import { NatsGroupLedger } from "../../src/agents/budget-groups.js";
import { connectBus, fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";

const nats = fileServer();

describe("shared budget ledger (NATS KV)", () => {
  it("budget ledger - refuses non-finite or negative charges and leaves the stored total intact", async () => {
    const cluster = uniqueCluster("bl");
    await using bus = await connectBus(nats.url, cluster);
    const ledger = await NatsGroupLedger.open({ js: bus.js, cluster });
    expect(await ledger.charge("group.team", 100)).toBe(100);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, -5, "12" as unknown as number, undefined as unknown as number]) {
      await expect(ledger.charge("group.team", bad)).rejects.toMatchObject({ code: "BUDGET_CHARGE_INVALID" });
    }
    expect(await ledger.used("group.team")).toBe(100);
    expect(await ledger.charge("group.team", 20)).toBe(120);
  }, 30_000);

  it("budget ledger - a stored total that is not a number is refused by name (not read as 0 or NaN), until deleted", async () => {
    const cluster = uniqueCluster("bl");
    await using bus = await connectBus(nats.url, cluster);
    const ledger = await NatsGroupLedger.open({ js: bus.js, cluster });
    const bucket = ledger.store.name;
    // What the probe found after bad usage numbers: NaN stored as null, and a string total.
    for (const stored of ['{"used":null}', '{"used":"0NaN12"}', "not json", '{"used":-3}']) {
      await ledger.store.kv.put("group.team", stored);
      const read = await ledger.used("group.team").catch((e: unknown) => e);
      expect(read).toMatchObject({ code: "BUDGET_LEDGER_CORRUPT", data: { bucket, key: "group.team" } });
      expect((read as Error).message).toContain(`nats kv del ${bucket} group.team`);
      await expect(ledger.charge("group.team", 10)).rejects.toMatchObject({ code: "BUDGET_LEDGER_CORRUPT" });
    }
    // Deleting the key restarts the count.
    await ledger.store.kv.delete("group.team");
    expect(await ledger.used("group.team")).toBe(0);
    expect(await ledger.charge("group.team", 10)).toBe(10);
  }, 30_000);
});
