import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { createLogger } from "../../src/core/logger.js";
import { LeaseTable } from "../../src/cluster/lease.js";
import { Membership } from "../../src/cluster/membership.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const logger = createLogger();
let server: NatsServerHandle;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false });
  nc = await connect({ servers: server.url });
});
afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

describe("a node waking from a machine suspend", () => {
  it("fence - after a suspend (wall clock ran, monotonic clock stood still) the node is unhealthy and its lease view suspect until a heartbeat and a check succeed", async () => {
    const cluster = `s${randomUUID().slice(0, 8)}`;
    const incarnation = randomUUID();
    const timing = { checkMs: 200, stallMs: 1000, idleCheckMs: 500 };
    const membership = await Membership.join({
      nc,
      cluster,
      heartbeatMs: 200,
      staleAfterMs: 2000,
      logger,
      timing,
      self: { id: "a", incarnation, startedAt: Date.now(), version: "t", pid: process.pid, host: "h" },
    });
    await using _membership = defer(() => membership.stop());
    const leases = await LeaseTable.open({ nc, cluster, nodeId: "a", incarnation, logger, timing });
    await using _leases = defer(() => leases.stop());
    expect(await leases.acquire("x", () => false)).toBe(true);
    expect(membership.selfHealthy()).toBe(true);
    expect(leases.holds("x")).toBe(true);

    // A minute of suspend as a woken process sees it: Date.now() jumped, and
    // performance.now() (CLOCK_MONOTONIC) did not count the sleep.
    const wall = Date.now.bind(Date);
    const suspend = vi.spyOn(Date, "now").mockImplementation(() => wall() + 60_000);
    await using _suspend = defer(() => suspend.mockRestore());
    expect(membership.selfHealthy()).toBe(false);
    expect(leases.healthy()).toBe(false);
    expect(leases.holds("x")).toBe(false);
    // Positive signals: the next heartbeat succeeds and the view is re-checked.
    await poll(() => membership.selfHealthy() && leases.healthy(), { timeoutMs: 5000, what: "healthy again after a heartbeat and a check" });
    expect(leases.holds("x")).toBe(true);
  });
});
