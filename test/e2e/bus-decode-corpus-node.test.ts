import { existsSync } from "node:fs";
import { join } from "node:path";
import { headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { createEnvelope, decodeValue, encodingOf, type RpcReply } from "../../src/bus/index.js";
import { controlRequest, spawnSubject } from "../../src/cluster/control.js";
import { expectCorpusDeadLettered, expectedReason, loadCorpus, publishCorpus } from "../fixtures/bus/decode-corpus.js";
import { REPO, TestCluster } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";

const corpus = loadCorpus();

/** The error code the fast path answers a bad input with, by the DLQ reason a mailbox gives it. */
const RPC_CODE: Record<string, string> = {
  malformed_msgpack: "DECODE_FAILED",
  invalid_json: "DECODE_FAILED",
  invalid_envelope: "INVALID_ENVELOPE",
  unknown_type: "UNKNOWN_MESSAGE_TYPE",
};

// test/integration/bus-decode-corpus.test.ts feeds the corpus to a mailbox in the test
// process; here it goes to a real `kova node start` process, through NATS, on both paths a
// sender reaches an agent by: its durable inbox and the rpc fast path.
describe("decode corpus against a node process", () => {
  it("corpus - every bad input sent to an agent's inbox and to its fast path: the node stays up and answers, each inbox input is in the DLQ whole with its reason, each fast-path one gets a typed error, and good messages still work", async () => {
    expect(existsSync(join(REPO, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    await using tc = await TestCluster.create({ nodes: ["n1"], actors: 1 });
    const agent = tc.actorIds[0]!;
    expect((await tc.info(agent)).count).toBe(0);
    const inbox = tc.bus.subjects.a2a(agent);
    const rpc = tc.bus.subjects.rpc(agent);
    const expected = corpus.map(expectedReason);

    await publishCorpus(tc.nc, inbox, corpus);
    // The fast path has a caller: each bad request is answered with the error, not dropped.
    for (const [i, item] of corpus.entries()) {
      const h = headers();
      if (item.encoding === "json") h.set("Content-Type", "application/json");
      const answer = await tc.nc.request(rpc, item.bytes, { headers: h, timeout: 10_000 });
      const reply = decodeValue(answer.data, encodingOf(answer.headers), { maxBytes: 1 << 20, maxDepth: 64 }, rpc) as RpcReply;
      expect(reply.ok, item.name).toBe(false);
      if (!reply.ok) expect(reply.error.code, item.name).toBe(RPC_CODE[expected[i]!]);
    }

    // A good message after all of them is processed, and the fast path answers it.
    await tc.bus.send(createEnvelope({ from: "tester", to: agent, type: "task_delegate", payload: "the next good message" }));
    await poll(async () => (await tc.info(agent)).count === 1, { timeoutMs: 60_000, retryErrors: true, what: "the good message after the corpus" });
    expect((await tc.status("n1")).nodeId).toBe("n1");
    expect(tc.procs.get("n1")!.child.exitCode).toBeNull();

    const entries = await poll(
      async () => {
        const all = await tc.bus.listDlq({ limit: corpus.length + 10 });
        return all.length >= corpus.length ? all : undefined;
      },
      { timeoutMs: 30_000, retryErrors: true, what: "every inbox input dead-lettered" },
    );
    expectCorpusDeadLettered(entries, corpus, (reason) => tc.bus.subjects.dlq(reason));
    // Nothing is left in the work queue: the agent's mailbox took every input.
    expect((await tc.bus.jsm.streams.info(tc.bus.subjects.streams.a2a)).state.messages).toBe(0);
  }, 180_000);

  it("corpus - every JSON input, and a megabyte of '[', sent as the body of control.activate and of spawn gets a typed error at once; the node stays up and answers good requests after", async () => {
    expect(existsSync(join(REPO, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    await using tc = await TestCluster.create({ nodes: ["n1"], extraToml: `[[actor_templates]]\nname = "tally"\ntype = "probe"\n` });
    const endpoints = { activate: tc.bus.subjects.activate, spawn: spawnSubject(tc.cluster) };
    // The client role reaches control.activate: the depth scan must answer this in a linear pass.
    const bodies = [
      ...corpus.filter((item) => item.encoding === "json").map((item) => ({ name: item.name, bytes: item.bytes })),
      { name: "a megabyte of [", bytes: new Uint8Array(tc.bus.maxPayload - 1024).fill("[".charCodeAt(0)) },
    ];
    for (const { name, bytes } of bodies) {
      // Undecodable (depth, __proto__, syntax, UTF-8): INVALID_ARGUMENT. Valid JSON that is
      // no request (null, an envelope) and an empty body (read as {}): the endpoint's own typed error.
      const decodes = (() => {
        if (bytes.length === 0) return true;
        try {
          decodeValue(bytes, "json", tc.bus.limits);
          return true;
        } catch {
          return false;
        }
      })();
      for (const [endpoint, subject] of Object.entries(endpoints)) {
        const answer = await tc.nc.request(subject, bytes, { timeout: 5_000 });
        const status = Number(answer.headers?.get("Nats-Service-Error-Code"));
        const error = JSON.parse(new TextDecoder().decode(answer.data)) as { code?: string; message?: string };
        expect(status, `${endpoint} ${name}: ${error.code} ${error.message}`).toBeGreaterThanOrEqual(400);
        expect(status, `${endpoint} ${name}: ${error.code} ${error.message}`).toBeLessThan(500);
        if (!decodes) {
          expect(error.code, `${endpoint} ${name}`).toBe("INVALID_ARGUMENT");
          expect(error.message, `${endpoint} ${name}`).toContain(`${endpoint} request body`);
        }
      }
    }
    expect(tc.procs.get("n1")!.child.exitCode).toBeNull();
    const activated = await controlRequest<{ id: string }>(tc.nc, endpoints.activate, { id: "tally--after-corpus" });
    expect(activated.id).toBe("tally--after-corpus");
    const spawned = await controlRequest<{ id: string; created: boolean }>(tc.nc, endpoints.spawn, { id: "fresh", type: "probe" });
    expect(spawned).toMatchObject({ id: "fresh", created: true });
    await poll(async () => (await tc.agentsOn("n1")).some((a) => a.id === "fresh"), { timeoutMs: 20_000, what: "fresh hosted" });
  }, 180_000);
});
