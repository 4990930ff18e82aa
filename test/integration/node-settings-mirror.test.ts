import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { describe, expect, it, vi } from "vitest";
import { silentLogger } from "../../src/core/logger.js";
import { NatsSettingsStore } from "../../src/agents/settings.js";
import { bucketName } from "../../src/bus/index.js";
import { MirroredSettingsStore } from "../../src/cluster/settings-mirror.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();

describe("agent settings from a watched copy (MirroredSettingsStore)", () => {
  it("settings - a switch noted on the host is read back at once; another node's copy receives it through the watch; reads make no request while the copy is current", async () => {
    const cluster = uniqueCluster("set");
    await using nc = await connect({ servers: nats.url });
    const open = () => MirroredSettingsStore.open({ js: jetstream(nc), nc, cluster, replicas: 1, logger: silentLogger() });
    const host = await open();
    const other = await open();
    await using _copies = defer(() => {
      host.close();
      other.close();
    });
    expect(await other.get("ops")).toEqual({});
    await host.set("ops", { model: "fast" });
    // The host's own write, before its watch delivers it.
    expect(await host.get("ops")).toEqual({ model: "fast" });
    await poll(async () => (await other.get("ops")).model === "fast", { timeoutMs: 5_000, what: "the switch on the other node's copy" });
    // Written by anything else (an older node, `nats kv put`): the watch brings it too.
    const raw = await new Kvm(nc).open(bucketName(cluster, "agentSettings"));
    await raw.put("ops", JSON.stringify({ model: "slow" }));
    await poll(async () => (await host.get("ops")).model === "slow", { timeoutMs: 5_000, what: "an outside write on the host's copy" });
    // Current copy: a run's read is answered locally, no KV request.
    const kvGet = vi.spyOn((other as unknown as { bucket: NatsSettingsStore }).bucket.store.kv, "get");
    await poll(async () => (await other.get("ops")).model === "slow", { timeoutMs: 5_000, what: "the outside write on the other copy" });
    for (let i = 0; i < 20; i++) expect(await other.get("ops")).toEqual({ model: "slow" });
    expect(kvGet).not.toHaveBeenCalled();
    await raw.delete("ops");
    await poll(async () => (await other.get("ops")).model === undefined, { timeoutMs: 5_000, what: "the deletion on the other copy" });
  });

  it("settings - settings a newer Kova wrote are refused (UNSUPPORTED_FORMAT naming them), from the copy and from the bucket, instead of running the agent on its default model", async () => {
    const cluster = uniqueCluster("set");
    await using nc = await connect({ servers: nats.url });
    const copy = await MirroredSettingsStore.open({ js: jetstream(nc), nc, cluster, replicas: 1, logger: silentLogger() });
    await using _copy = defer(() => copy.close());
    const raw = await new Kvm(nc).open(bucketName(cluster, "agentSettings"));
    await raw.put("ops", JSON.stringify({ v: 2, model: "fast", effort: "high" }));
    const refusal = { code: "UNSUPPORTED_FORMAT", data: { record: "settings of agent ops", version: 2, readable: [1] } };
    const err = await poll(
      () =>
        copy.get("ops").then(
          () => undefined,
          (e: unknown) => e,
        ),
      { timeoutMs: 5_000, what: "the copy refusing the newer settings" },
    );
    expect(err).toMatchObject(refusal);
    const bucket = await NatsSettingsStore.open({ js: jetstream(nc), cluster });
    await expect(bucket.get("ops")).rejects.toMatchObject(refusal);
    // Other agents' settings are unaffected; what this build writes, it reads.
    await copy.set("support", { model: "slow" });
    expect(await copy.get("support")).toEqual({ model: "slow" });
    expect((await raw.get("support"))?.json()).toEqual({ v: 1, model: "slow" });
  });
});
