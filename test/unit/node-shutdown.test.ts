import { describe, expect, it } from "vitest";
import { createLogger } from "../../src/core/logger.js";
import { installShutdown } from "../../src/node/shutdown.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { poll } from "../fixtures/poll.js";

const logger = createLogger();
const raise = () => process.emit("SIGUSR2", "SIGUSR2");

describe("node shutdown", () => {
  it("shutdown - the first signal runs the graceful stop and exits 0 when it completes", async () => {
    const exits: number[] = [];
    const reasons: string[] = [];
    let finish!: () => void;
    const uninstall = installShutdown({
      logger,
      signals: ["SIGUSR2"],
      exit: (c) => exits.push(c),
      stop: (reason) => {
        reasons.push(reason);
        return new Promise<void>((r) => (finish = r));
      },
    });
    raise();
    expect(reasons).toEqual(["SIGUSR2"]);
    expect(exits).toEqual([]);
    finish();
    await poll(() => exits.length > 0, { timeoutMs: 1_000, what: "the exit after the graceful stop" });
    expect(exits).toEqual([0]);
    uninstall();
  });

  it("shutdown - a second signal forces exit while the graceful stop is still running", async () => {
    const exits: number[] = [];
    let stops = 0;
    const uninstall = installShutdown({
      logger,
      signals: ["SIGUSR2"],
      exit: (c) => exits.push(c),
      stop: () => {
        stops++;
        return new Promise<void>(() => undefined);
      },
    });
    raise();
    raise();
    expect(stops).toBe(1);
    expect(exits).toEqual([130]);
    uninstall();
  });

  it("shutdown - a stop that outlasts the grace period exits non-zero", async () => {
    const exits: number[] = [];
    const uninstall = installShutdown({
      logger,
      signals: ["SIGUSR2"],
      graceMs: 30,
      exit: (c) => exits.push(c),
      stop: () => new Promise<void>(() => undefined),
    });
    raise();
    await poll(() => exits.length > 0, { timeoutMs: 1_000, what: "the exit after the grace period" });
    expect(exits).toEqual([1]);
    uninstall();
  });

  it("shutdown - SIGHUP neither stops nor ends the process: it is logged and ignored", async () => {
    const exits: number[] = [];
    let stops = 0;
    const { logger: captured, text } = captureLogs();
    const uninstall = installShutdown({
      logger: captured,
      signals: ["SIGUSR2"],
      exit: (c) => exits.push(c),
      stop: async () => {
        stops++;
      },
    });
    // A listener of our own is what keeps the default action (terminate) away.
    expect(process.listenerCount("SIGHUP")).toBeGreaterThan(0);
    process.emit("SIGHUP", "SIGHUP");
    expect(stops).toBe(0);
    expect(exits).toEqual([]);
    expect(text()).toContain('"msg":"SIGHUP ignored');
    uninstall();
    expect(process.listenerCount("SIGHUP")).toBe(0);
  });
});
