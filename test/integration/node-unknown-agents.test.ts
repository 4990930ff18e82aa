import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { Bus, createEnvelope } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { startNatsServer } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

describe("messages to agents nobody declared", () => {
  it("unknown agents - a message to an undeclared id goes to the DLQ as unknown_agent after the wait; ask fails at once with UNKNOWN_AGENT", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    const dir = await mkdtemp(join(tmpdir(), "kova-unknown-"));
    const cluster = `u${process.pid}`;
    let node: KovaNode | undefined;
    try {
      const config = parseConfig(
        `[node]\nid = "u1"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\nunknown_agent_after_ms = 1500\n` +
          `[nats]\nurls = ["${server.url}"]\n[wal]\nsync = "normal"\n[[actors]]\nid = "known"\ntype = "counter"\n`,
        { env: {} },
      );
      node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
      await using bus = await Bus.connect({ servers: server.url, cluster, logger: createLogger({ level: "silent" }) });
      await poll(async () => node!.agents().some((a) => a.id === "known" && a.state === "Idle"), { timeoutMs: 15_000, what: "known hosted" });

      const ghost = createEnvelope({ from: "tester", to: "ghost", type: "task_delegate", payload: { n: 1 } });
      const sentAt = Date.now();
      await bus.send(ghost);
      const dead = await poll(async () => (await bus.listDlq({ reason: "unknown_agent" })).find((d) => d.headers["Kova-Dlq-Msg-Id"] === ghost.id), {
        timeoutMs: 20_000,
        what: "ghost's message in the DLQ",
      });
      // Not before the configured wait, and the body is the whole original.
      expect(Date.now() - sentAt).toBeGreaterThanOrEqual(1500);
      expect(dead.headers["Kova-Dlq-Error-Code"]).toBe("UNKNOWN_AGENT");
      expect(dead.headers["Kova-Dlq-Agent"]).toBe("ghost");
      const a2a = bus.subjects.streams.a2a;
      const left = await bus.jsm.streams.info(a2a, { subjects_filter: bus.subjects.a2a("ghost") });
      expect(left.state.subjects?.[bus.subjects.a2a("ghost")] ?? 0).toBe(0);

      // ask: no waiting out the timeout for an agent that does not exist.
      const t0 = Date.now();
      const err = await bus
        .ask(createEnvelope({ from: "tester", to: "nobody-here", type: "task_delegate", payload: null }), { timeoutMs: 30_000 })
        .catch((e: unknown) => e);
      expect(isKovaError(err, "UNKNOWN_AGENT")).toBe(true);
      expect((err as Error).message).toContain("kova agents ls");
      expect(Date.now() - t0).toBeLessThan(5_000);
      // A declared agent is asked as before.
      expect((await bus.ask(createEnvelope({ from: "tester", to: "known", type: "task_delegate", payload: null }), { timeoutMs: 10_000 })).type).toBe(
        "result_notify",
      );
    } finally {
      await node?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
