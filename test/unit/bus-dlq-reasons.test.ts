import { describe, expect, it } from "vitest";
import type { Command } from "commander";
import { defineDlqReasons, DlqReason, knownDlqReasons } from "../../src/bus/wire.js";
import { ActorDlqReason } from "../../src/actors/errors.js";
import { buildProgram } from "../../src/cli/main.js";

describe("DLQ reasons", () => {
  it("dlq - a layer defines its reasons once: a reason another layer defined, or a malformed one, is refused", () => {
    const mine = defineDlqReasons("dlq-test-layer", { parked: "dlq_test_parked" });
    expect(knownDlqReasons()).toContain(mine.parked);
    // The same layer loading its list again (a module evaluated twice) is no conflict.
    expect(defineDlqReasons("dlq-test-layer", { parked: "dlq_test_parked" }).parked).toBe("dlq_test_parked");
    expect(() => defineDlqReasons("another-layer", { parked: "dlq_test_parked" })).toThrow(/dlq_test_parked is already defined by dlq-test-layer/);
    expect(() => defineDlqReasons("another-layer", { mine: DlqReason.maxDeliver })).toThrow(/max_deliver is already defined by bus/);
    expect(() => defineDlqReasons("another-layer", { bad: "Not-A-Token" })).toThrow(/use lowercase/);
    expect(knownDlqReasons()).not.toContain("Not-A-Token");
  });

  it("dlq - kova dlq ls --reason lists every reason the layers define, the actor runtime's and unknown_agent included", async () => {
    const program = await buildProgram();
    const dlq = program.commands.find((c: Command) => c.name() === "dlq")!;
    const help = dlq.commands.find((c: Command) => c.name() === "ls")!.helpInformation();
    const listed = /--reason <reason>\s+only this reason \(([^)]*)\)/.exec(help.replace(/\s+/g, " "))?.[1]?.split(", ");
    const expected = [...Object.values(DlqReason), ...Object.values(ActorDlqReason)];
    expect(expected).toEqual(expect.arrayContaining(["unknown_agent", "unhandled", "handler_failed", "killed"]));
    expect(listed).toEqual(expect.arrayContaining(expected));
    expect(listed).toEqual(knownDlqReasons());
    // buildProgram imports every command module: all of src/ but the gateway goes through
    // vitest's transform in this worker, which took 20–30 s at load 40 on two cores.
  }, 120_000);
});
