import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { isStreamNotFound, listKvKeys, bucketName, subjectsFor } from "../../src/bus/index.js";
import { SubjectWaits } from "../../src/workflow/subject-waits.js";
import { WorkflowTimers } from "../../src/workflow/timers.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";

// A run that ends clears its timers and subject waits, found by listing the run's keys.
const server = fileServer();

describe("workflow: a run's timers and subject waits are cleared when it ends", () => {
  it("timers - clear removes every timer of the run and no other", async () => {
    const cluster = uniqueCluster("tm");
    await using nc = await connect({ servers: server.url });
    const js = jetstream(nc);
    const timers = await WorkflowTimers.open({ js, cluster });
    const due = Date.now() + 3_600_000;
    for (const [runId, timerId] of [
      ["r1", "retry-1"],
      ["r1", "timeout-2"],
      ["r2", "retry-1"],
    ] as const) {
      await timers.set({ runId, timerId, due });
    }
    expect(await timers.clear("r1")).toBe(2);
    expect(await listKvKeys(nc, bucketName(cluster, "workflowTimers"))).toEqual(["r2.retry-1"]);
    expect(await timers.clear("r1")).toBe(0);
  });

  it("waits - clear ends the run's waits; a subject leaves the capture stream once no wait names it", async () => {
    const cluster = uniqueCluster("wt");
    await using nc = await connect({ servers: server.url });
    const jsm = await jetstreamManager(nc);
    const waits = await SubjectWaits.open({ nats: { js: jetstream(nc), jsm }, cluster, owner: "n1" });
    await waits.begin({ runId: "r1", waitId: "w1", subject: "orders.a" });
    await waits.begin({ runId: "r1", waitId: "w2", subject: "orders.b" });
    await waits.begin({ runId: "r2", waitId: "w1", subject: "orders.a" });
    const subjects = async () => (await jsm.streams.info(subjectsFor(cluster).streams.waits)).config.subjects?.sort();
    expect(await subjects()).toEqual(["orders.a", "orders.b"]);

    expect(await waits.clear("r1")).toBe(2);
    // Left: r2's wait (the capture lock is released, so its key is deleted and not listed).
    expect(await listKvKeys(nc, bucketName(cluster, "workflowWaits"))).toEqual([expect.stringMatching(/^[0-9a-f]{16}\.r2\.w1$/)]);
    // orders.a is still waited on by r2.
    expect(await subjects()).toEqual(["orders.a"]);

    expect(await waits.clear("r2")).toBe(1);
    const gone = await jsm.streams.info(subjectsFor(cluster).streams.waits).catch((err: unknown) => err);
    expect(isStreamNotFound(gone), String(gone)).toBe(true);
  });
});
