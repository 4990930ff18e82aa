import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/logger.js";
import { controlRequest, spawnSubject } from "../../src/node/control.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode, CLUSTER_EVENTS_SESSION } from "../../src/node/node.js";
import { startNatsServer } from "../../src/testing/index.js";
import { poll } from "../fixtures/poll.js";

describe("quotas", () => {
  it("quotas - spawns past [cluster] max_actors are QUOTA_EXCEEDED; a node hosts at most max_actors_per_node and says why the rest wait", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    const dir = await mkdtemp(join(tmpdir(), "kova-quota-"));
    const cluster = `q${process.pid}`;
    let node: KovaNode | undefined;
    const nc = await connect({ servers: server.url });
    try {
      const events: Array<{ type: string; data?: { waiting?: number; hosted?: number } }> = [];
      nc.subscribe(`kova.${cluster}.events.${CLUSTER_EVENTS_SESSION}.>`, { callback: (_e, m) => void events.push(m.json()) });
      const capped = (waiting: number) => events.some((e) => e.type === "placement_capped" && e.data?.waiting === waiting);
      const config = parseConfig(
        `[node]\nid = "q1"\ndata_dir = "${dir}"\n[cluster]\nname = "${cluster}"\nmax_actors = 4\nmax_actors_per_node = 2\nreconcile_ms = 200\n` +
          `[nats]\nurls = ["${server.url}"]\n[wal]\nsync = "normal"\n[[actors]]\nid = "a1"\ntype = "counter"\n[[actors]]\nid = "a2"\ntype = "counter"\n[[actors]]\nid = "a3"\ntype = "counter"\n`,
        { env: {} },
      );
      node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
      // Three declared, two hosted: the cap holds and the node says so.
      await poll(async () => capped(1), { timeoutMs: 15_000, what: "placement_capped event, one waiting" });
      await poll(async () => node!.agents().length === 2, { timeoutMs: 15_000, what: `two hosted (have ${JSON.stringify(node!.agents())})` });
      expect(node.agents().length).toBe(2);

      const spawn = (id: string) => controlRequest<{ created: boolean }>(nc, spawnSubject(cluster), { id, type: "counter" });
      expect((await spawn("a4")).created).toBe(true);
      const refused = await spawn("a5").catch((err: unknown) => err);
      expect(isKovaError(refused, "QUOTA_EXCEEDED")).toBe(true);
      expect((refused as Error).message).toContain("[cluster] max_actors is 4");
      // Re-declaring an existing actor is not a new one.
      expect((await spawn("a4")).created).toBe(false);
      // Still capped once placement has seen the spawn (a pass that counts a3 and a4 waiting): two hosted.
      await poll(async () => capped(2), { timeoutMs: 15_000, what: "placement_capped event, two waiting" });
      expect(node.agents().length).toBe(2);
      expect(events.filter((e) => e.type === "placement_capped").every((e) => (e.data?.hosted ?? 0) <= 2)).toBe(true);
    } finally {
      await nc.close();
      await node?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
