import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { createEnvelope, type A2AEnvelope, bucketName, openOrCreateBucket } from "../../src/bus/index.js";
import type { CounterState } from "../../src/actors/index.js";
import { readCheckpoint, type Checkpoint } from "../../src/actors/checkpoint-store.js";
import { fileServer, startRig, uniqueCluster } from "../fixtures/actors/helpers.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();

// A node publishes the reply to a message to the message's replyTo. A sender who names
// one of Kova's own subjects there would make the node write where the sender may not.
describe("security: replyTo", () => {
  it("replyTo - a task naming a KV, JetStream API, service or system subject is dead-lettered and writes nothing", async () => {
    const cluster = uniqueCluster();
    {
      await using rig = await startRig(server.url, cluster);
      await rig.host.start("c2", "counter");
      await rig.bus.send(createEnvelope({ from: "tester", to: "c2", type: "task_delegate", payload: null }));
      await poll(async () => (await rig.bus.request<CounterState>("c2", "info_request", null)).count === 1, {
        timeoutMs: 10_000,
        what: "first count",
        retryErrors: true,
      });
      const kvm = new Kvm(rig.bus.nc);
      const checkpoints = await kvm.open(bucketName(cluster, "checkpoints"));
      const before = await checkpoints.get("c2");
      expect(before?.revision).toBeGreaterThan(0);
      // A host without a node has no leases or agents bucket: made here, as a node would, so a
      // forged reply would have somewhere to land.
      const named = await Promise.all(
        [`kova_${cluster}_leases`, `kova_${cluster}_agents`].map((b) => openOrCreateBucket(rig.bus.nc, b, { history: 1, storage: "file" })),
      );

      const targets = [
        `$KV.${bucketName(cluster, "checkpoints")}.c2`,
        `$KV.kova_${cluster}_leases.c2`,
        `$KV.kova_${cluster}_agents.c2`,
        `$JS.API.STREAM.DELETE.KOVA_${cluster.toUpperCase()}_A2A`,
        "$SRV.PING",
        "$SYS.REQ.SERVER.PING",
        `kova.other-cluster.a2a.c2`,
        `kova.${cluster}.events.s.r`,
        `kova.${cluster}.dlq.forged`,
        `kova.${cluster}.a2a.c2.extra`,
        "_INBOX",
      ];
      const sent: A2AEnvelope[] = targets.map((replyTo) => createEnvelope({ from: "attacker", to: "c2", type: "task_delegate", payload: null, replyTo }));
      for (const env of sent) await rig.bus.send(env);
      // A good message after the bad ones: once it is counted, every bad one was judged.
      await rig.bus.send(createEnvelope({ from: "tester", to: "c2", type: "task_delegate", payload: null }));
      await poll(async () => (await rig.bus.request<CounterState>("c2", "info_request", null)).count === 2, {
        timeoutMs: 15_000,
        what: "the good message after the bad ones",
        retryErrors: true,
      });

      const dead = await rig.bus.listDlq({ reason: "invalid_envelope" });
      for (const env of sent) {
        const entry = dead.find((d) => d.headers["Kova-Dlq-Msg-Id"] === env.id);
        expect(entry, env.replyTo).toBeDefined();
        expect(entry!.headers["Kova-Dlq-Error"]).toContain("replyTo");
      }
      // Nothing the attacker named was written: the checkpoint moved only for the good message.
      const after = await checkpoints.get("c2");
      const processed = readCheckpoint("checkpoint of actor c2", after!.json<Checkpoint>()).processed;
      expect(processed.length).toBeGreaterThan(0);
      expect(processed.some((id) => sent.some((e) => e.id === id))).toBe(false);
      // c2 is the bucket's only key: one write since `before`, the good message's checkpoint.
      expect(after!.revision).toBe(before!.revision + 1);
      for (const kv of named) {
        const status = await kv.status();
        expect(await kv.get("c2"), status.bucket).toBeNull();
        expect(status.values, status.bucket).toBe(0);
      }
      expect((await rig.bus.jsm.streams.info(`KOVA_${cluster.toUpperCase()}_A2A`)).config.name).toBe(`KOVA_${cluster.toUpperCase()}_A2A`);
    }
  });

  it("replyTo - replies to an inbox and to an agent inbox of the cluster still work", async () => {
    const cluster = uniqueCluster();
    {
      await using rig = await startRig(server.url, cluster);
      await rig.host.start("c3", "counter");
      const reply = await rig.bus.ask(createEnvelope({ from: "tester", to: "c3", type: "task_delegate", payload: null }), { timeoutMs: 10_000 });
      expect(reply.type).toBe("result_notify");
      // A result sent to another agent's inbox is stored in its mailbox.
      const env = createEnvelope({ from: "tester", to: "c3", type: "task_delegate", payload: null, replyTo: `kova.${cluster}.a2a.collector` });
      await rig.bus.send(env);
      const stored = await poll(
        async () => {
          const m = await rig.bus.jsm.streams
            .getMessage(`KOVA_${cluster.toUpperCase()}_A2A`, { last_by_subj: `kova.${cluster}.a2a.collector` })
            .catch(() => null);
          return m ?? undefined;
        },
        { timeoutMs: 10_000, what: "reply stored in collector's mailbox", retryErrors: true },
      );
      expect(stored.subject).toBe(`kova.${cluster}.a2a.collector`);
    }
  });
});
