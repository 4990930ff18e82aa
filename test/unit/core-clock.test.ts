import { describe, expect, it } from "vitest";
import { elapsedSince, markTime } from "../../src/core/clock.js";

describe("suspend-aware elapsed time", () => {
  it("clock - a machine suspend (the monotonic clock stood still, the wall clock ran) counts in full", () => {
    // A VM paused for a minute: CLOCK_MONOTONIC advanced 5 ms, the wall clock 60 s.
    expect(elapsedSince({ mono: 1_000, wall: 1_700_000_000_000 }, { mono: 1_005, wall: 1_700_000_060_000 })).toBe(60_000);
  });

  it("clock - a wall clock set back does not shorten the interval below what the monotonic clock measured", () => {
    expect(elapsedSince({ mono: 1_000, wall: 1_700_000_000_000 }, { mono: 3_500, wall: 1_699_999_000_000 })).toBe(2_500);
  });

  it("clock - a wall clock stepped forward overstates the interval (a fence then expires early, the safe side)", () => {
    expect(elapsedSince({ mono: 0, wall: 0 }, { mono: 100, wall: 30_000 })).toBe(30_000);
  });

  it("clock - markTime reads both clocks, and an interval measured from it is never negative", () => {
    const mark = markTime();
    expect(Math.abs(mark.wall - Date.now())).toBeLessThan(1_000);
    expect(elapsedSince(mark)).toBeGreaterThanOrEqual(0);
  });
});
