import { randomUUID } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { listKvKeys } from "../../src/bus/index.js";
import { createLogger } from "../../src/core/logger.js";
import { ADMISSIONS_IN_FLIGHT, ActorAdmission } from "../../src/cluster/admission.js";
import { AgentRegistry } from "../../src/cluster/registry.js";
import { startNatsServer } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const logger = createLogger({ level: "silent" });

/** A nats-server, a connection and one node's registry of a fresh cluster. */
async function registryRig() {
  const server = await startNatsServer({ allowExternal: false });
  const nc = await connect({ servers: server.url });
  const cluster = `adm${randomUUID().slice(0, 8)}`;
  const registry = await AgentRegistry.open({ nc, cluster, logger });
  return {
    server,
    nc,
    cluster,
    registry,
    [Symbol.asyncDispose]: async () => {
      registry.stop();
      await nc.close();
      await server.stop();
    },
  };
}

/**
 * A declare that records who entered, with which fence, and how many ran at once, and
 * holds every write until `release()`.
 */
function heldDeclares(registry: AgentRegistry) {
  const entered: Array<{ id: string; fence: number | undefined; alongside: number }> = [];
  let running = 0;
  let most = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const declare = (id: string) => async (fence: number | undefined) => {
    entered.push({ id, fence, alongside: running });
    most = Math.max(most, ++running);
    try {
      await gate;
      return await registry.declare({ id, type: "counter" }, fence === undefined ? {} : { fence });
    } finally {
      running--;
    }
  };
  return { entered, declare, release, most: () => most };
}

const full = (live: number) => Object.assign(new Error(`full at ${live}`), { live });

describe("actor admission", () => {
  it("admission - far from max_actors, admissions write their entries at once (ADMISSIONS_IN_FLIGHT in flight, the rest queued); near it one at a time, fenced", async () => {
    await using rig = await registryRig();
    const admission = new ActorAdmission({ registry: rig.registry, maxActors: 1000, liveNodes: () => 1 });
    const held = heldDeclares(rig.registry);
    const ids = Array.from({ length: ADMISSIONS_IN_FLIGHT + 4 }, (_, i) => `far${i}`);
    const results = Promise.all(ids.map((id) => admission.admit(id, held.declare(id), full)));
    // One at a time (the code before), this never sees more than one declare entered.
    await poll(() => held.entered.length === ADMISSIONS_IN_FLIGHT && admission.view().waiting === 4, {
      timeoutMs: 5000,
      what: () => `${ADMISSIONS_IN_FLIGHT} declares in flight and 4 waiting (entered ${held.entered.length}, ${JSON.stringify(admission.view())})`,
    });
    expect(held.entered.map((e) => e.fence)).toEqual(Array(ADMISSIONS_IN_FLIGHT).fill(undefined));
    // The ones in flight are counted before the mirror shows them.
    expect(admission.live()).toBe(ADMISSIONS_IN_FLIGHT);
    held.release();
    expect(await results).toEqual(ids.map(() => true));
    expect(held.most()).toBe(ADMISSIONS_IN_FLIGHT);
    expect(rig.registry.liveCount()).toBe(ids.length);
    expect(admission.view()).toEqual({ running: 0, waiting: 0, fenced: false });

    // The fence is the revision the watch applied: wait for it to have delivered every write.
    await poll(async () => rig.registry.watchedRevision() === (await rig.registry.store.kv.status()).streamInfo.state.last_seq, {
      timeoutMs: 5000,
      what: "the registry watch caught up",
    });
    // max_actors 20 with 12 registered: 8 free places, within the margin (16 per live node).
    const near = new ActorAdmission({ registry: rig.registry, maxActors: ids.length + 8, liveNodes: () => 1 });
    const fencedHeld = heldDeclares(rig.registry);
    const nearIds = Array.from({ length: 5 }, (_, i) => `near${i}`);
    const nearResults = Promise.all(nearIds.map((id) => near.admit(id, fencedHeld.declare(id), full)));
    await poll(() => fencedHeld.entered.length === 1 && near.view().waiting === 4, {
      timeoutMs: 5000,
      what: () => `one fenced declare in flight, 4 waiting (entered ${fencedHeld.entered.length}, ${JSON.stringify(near.view())})`,
    });
    expect(near.view()).toEqual({ running: 1, waiting: 4, fenced: true });
    expect(fencedHeld.entered[0]!.fence).toBe(rig.registry.watchedRevision());
    fencedHeld.release();
    expect(await nearResults).toEqual(nearIds.map(() => true));
    // Each fenced write ran alone (a lost fence is retried, so a declare may be entered again).
    expect(fencedHeld.most()).toBe(1);
    expect(fencedHeld.entered.every((e) => e.fence !== undefined && e.alongside === 0)).toBe(true);
    expect(rig.registry.liveCount()).toBe(ids.length + nearIds.length);
  }, 30_000);

  it("admission - 60 parallel admissions against max_actors = 40 register exactly 40: concurrent far from the cap, fenced near it, the rest refused", async () => {
    await using rig = await registryRig();
    const admission = new ActorAdmission({ registry: rig.registry, maxActors: 40, liveNodes: () => 1 });
    let running = 0;
    let most = 0;
    const fencedAlongside: number[] = [];
    const declare = (id: string) => async (fence: number | undefined) => {
      if (fence !== undefined) fencedAlongside.push(running);
      most = Math.max(most, ++running);
      try {
        return await rig.registry.declare({ id, type: "counter" }, fence === undefined ? {} : { fence });
      } finally {
        running--;
      }
    };
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        admission.admit(`a${i}`, declare(`a${i}`), full).then(
          (created) => ({ created }),
          (err: unknown) => ({ err: err as Error & { live?: number } }),
        ),
      ),
    );
    expect(answers.filter((a) => "created" in a && a.created)).toHaveLength(40);
    const refused = answers.flatMap((a) => ("err" in a ? [a.err] : []));
    expect(refused).toHaveLength(20);
    for (const err of refused) expect(err.live, String(err)).toBe(40);
    expect(most).toBe(ADMISSIONS_IN_FLIGHT);
    // The last 16 places (the margin) were fenced, each written alone.
    expect(fencedAlongside.length).toBeGreaterThanOrEqual(16);
    expect(fencedAlongside.every((n) => n === 0)).toBe(true);
    expect(rig.registry.liveCount()).toBe(40);
    expect(await listKvKeys(rig.nc, `kova_${rig.cluster}_agents`)).toHaveLength(40);
    // An id registered already is no new actor: passed through at the cap.
    await expect(admission.admit("a0", declare("a0"), full)).resolves.toBe(false);
  }, 30_000);

  it("registry - liveCount follows the mirror: declares here and by another node, a kill, a removal", async () => {
    await using rig = await registryRig();
    const other = await AgentRegistry.open({ nc: rig.nc, cluster: rig.cluster, logger });
    await using _other = defer(() => other.stop());
    expect(await rig.registry.declare({ id: "x1", type: "counter" })).toBe(true);
    expect(rig.registry.liveCount()).toBe(1);
    expect(await other.declare({ id: "x2", type: "counter" })).toBe(true);
    await poll(() => rig.registry.liveCount() === 2, { timeoutMs: 5000, what: "the other node's declare counted" });
    await other.update("x1", (r) => ({ ...r, desired: "killed" }));
    await poll(() => rig.registry.get("x1")?.desired === "killed", { timeoutMs: 5000, what: "the kill seen" });
    expect(rig.registry.liveCount()).toBe(1);
    expect(await rig.registry.remove("x2", () => true)).toBe(true);
    expect(rig.registry.liveCount()).toBe(0);
    // A registry opened over existing entries counts them from its first moment.
    expect(await other.declare({ id: "x3", type: "counter" })).toBe(true);
    const late = await AgentRegistry.open({ nc: rig.nc, cluster: rig.cluster, logger });
    await using _late = defer(() => late.stop());
    expect(late.liveCount()).toBe(1);
  }, 30_000);
});
