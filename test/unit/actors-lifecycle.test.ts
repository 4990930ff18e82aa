import { describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import { ActorLifecycle, ActorStates, canTransition, type ActorState } from "../../src/actors/lifecycle.js";
import { ActorErrorCode } from "../../src/actors/errors.js";

describe("actor lifecycle", () => {
  it("lifecycle - follows Created → Idle → Running → Idle → Completed and reports each change", () => {
    const seen: Array<[ActorState, ActorState, unknown]> = [];
    const life = new ActorLifecycle("a1", (to, from, info) => seen.push([to, from, info]));
    expect(life.state).toBe("Created");
    life.transition("Idle");
    life.transition("Running", { envelopeId: "m1" });
    life.transition("Idle");
    life.transition("Completed", { reason: "stopped" });
    expect(seen).toEqual([
      ["Idle", "Created", undefined],
      ["Running", "Idle", { envelopeId: "m1" }],
      ["Idle", "Running", undefined],
      ["Completed", "Idle", { reason: "stopped" }],
    ]);
    expect(life.terminal).toBe(true);
  });

  it("lifecycle - rejects a transition the diagram lacks with INVALID_TRANSITION", () => {
    const life = new ActorLifecycle("a2");
    let caught: unknown;
    try {
      life.transition("Running");
    } catch (err) {
      caught = err;
    }
    expect(isKovaError(caught, ActorErrorCode.INVALID_TRANSITION)).toBe(true);
    expect((caught as Error).message).toContain("Created to Running");
    expect(life.state).toBe("Created");
  });

  it("lifecycle - Completed is terminal and Failed is left only to Idle or Completed", () => {
    for (const to of ActorStates) expect(canTransition("Completed", to)).toBe(false);
    const fromFailed = ActorStates.filter((to) => canTransition("Failed", to));
    expect(fromFailed.sort()).toEqual(["Completed", "Idle"]);
  });

  it("lifecycle - recovery goes Created → Recovering → Idle, and pause can interrupt a running turn and return to it", () => {
    const life = new ActorLifecycle("a3");
    life.transition("Recovering");
    life.transition("Idle");
    life.transition("Running");
    life.transition("Paused");
    life.transition("Running");
    expect(life.state).toBe("Running");
    expect(life.tryTransition("Recovering")).toBe(false);
    expect(life.state).toBe("Running");
  });

  it("lifecycle - a repeated transition to the current state is a no-op without a report", () => {
    let reports = 0;
    const life = new ActorLifecycle("a4", () => reports++);
    life.transition("Idle");
    life.transition("Paused");
    life.transition("Paused");
    expect(reports).toBe(2);
  });
});
