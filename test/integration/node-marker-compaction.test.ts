import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { describe, expect, it } from "vitest";
import { ActorTypeRegistry, defineActor } from "../../src/actors/index.js";
import { KovaClient, openOrCreateBucket } from "../../src/bus/index.js";
import { compactMarkers } from "../../src/cluster/marker-compaction.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { inProcessNode } from "../fixtures/node/in-process-node.js";
import { poll } from "../fixtures/poll.js";

const nats = fileServer();
const enc = new TextEncoder();

const counter = defineActor<{ n: number }>({
  type: "tally",
  initialState: () => ({ n: 0 }),
  handlers: {
    task_delegate: async (ctx) => {
      ctx.state.n += 1;
      return { n: ctx.state.n };
    },
  },
});

describe("compaction of KV delete markers (passivated instances)", () => {
  it("compactMarkers - removes old delete and purge markers only: live values, a value written after a marker, young markers and the stream's last message stay; idempotent", async () => {
    await using nc = await connect({ servers: nats.url });
    const jsm = await jetstreamManager(nc);
    const kv = await openOrCreateBucket(nc, `kova_${uniqueCluster("mc")}_agents`, { history: 1, storage: "file" });
    for (let i = 0; i < 50; i++) await kv.put(`gone-${i}`, enc.encode("v"));
    for (let i = 0; i < 50; i++) await (i % 2 === 0 ? kv.purge(`gone-${i}`) : kv.delete(`gone-${i}`));
    await kv.put("live", enc.encode("v"));
    await kv.purge("back"); // a marker, then the key written again (an instance re-activated)
    await kv.create("back", enc.encode("again"));
    const t = Date.now();
    await kv.purge("young");
    await kv.put("x", enc.encode("v"));
    await kv.purge("x"); // the stream's last message: kept
    const streamName = (await kv.status()).streamInfo.config.name;

    // Markers written before `t` only.
    const first = await compactMarkers(kv, jsm, { olderThanMs: 0, now: () => t });
    expect(first).toMatchObject({ scanned: 54, markers: 50, removed: 50 });
    const keysLeft = async () => {
      const out: string[] = [];
      for await (const k of await kv.keys()) out.push(k);
      return out.sort();
    };
    expect(await keysLeft()).toEqual(["back", "live"]);
    expect((await kv.get("back"))?.string()).toBe("again");
    // What a (re)starting node's watch reads: live keys and the two markers kept.
    expect((await jsm.streams.info(streamName)).state.messages).toBe(4);
    expect(await compactMarkers(kv, jsm, { olderThanMs: 0, now: () => t })).toMatchObject({ markers: 0, removed: 0 });
    // Later, the young marker goes too; the last message still stays.
    expect(await compactMarkers(kv, jsm, { olderThanMs: 0, now: () => Date.now() + 1000 })).toMatchObject({ markers: 1, removed: 1 });
    expect((await jsm.streams.info(streamName)).state.messages).toBe(3);
    // A new create on a compacted key works (no marker to match against).
    await kv.create("gone-3", enc.encode("new"));
    expect((await kv.get("gone-3"))?.string()).toBe("new");
  });

  it("node - one node compacts the registry's and the leases' markers of passivated instances on its timer; a compacted instance addressed again is activated with its state", async () => {
    await using rig = await inProcessNode({
      types: new ActorTypeRegistry([counter]),
      templates: [{ name: "t", type: "tally", idleAfterMs: 300 }],
      cluster: [`marker_compaction = 700`],
    });
    await using client = await KovaClient.connect({ servers: rig.server.url, cluster: rig.cluster });
    const ids = Array.from({ length: 20 }, (_, i) => `t--k${i}`);
    for (const id of ids) expect((await client.ask<{ n: number }>(id, "task_delegate", {}, { timeoutMs: 15_000 })).payload.n).toBe(1);
    await poll(() => rig.node.status().virtual.passivations === ids.length, { timeoutMs: 20_000, what: "every instance passivated" });
    const compacted = await poll(
      () => {
        const done = rig.events.filter((e) => e.type === "markers_compacted").map((e) => e.data as { bucket: string; removed: number; node: string });
        const sum = (b: string) => done.filter((d) => d.bucket === b).reduce((a, d) => a + d.removed, 0);
        // The last marker of each bucket stays (the stream's last message).
        return sum(`kova_${rig.cluster}_agents`) >= ids.length - 1 && sum(`kova_${rig.cluster}_leases`) >= 1 ? done : undefined;
      },
      { timeoutMs: 20_000, what: "markers_compacted events for both buckets" },
    );
    expect(compacted.every((d) => d.node === "n1")).toBe(true);
    const registry = await new Kvm(client.bus.js).open(`kova_${rig.cluster}_agents`);
    const status = await registry.status();
    expect(status.values).toBeLessThanOrEqual(1);
    // Addressed again: a new registry entry, the state from the checkpoint.
    expect((await client.ask<{ n: number }>("t--k3", "task_delegate", {}, { timeoutMs: 15_000 })).payload.n).toBe(2);
  });
});
