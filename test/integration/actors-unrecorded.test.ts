import { describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { ErrorCode, KovaError } from "../../src/core/index.js";
import { Wal } from "../../src/wal/index.js";
import { defineActor, TURN_KIND, type Checkpoint } from "../../src/actors/index.js";
import { readCheckpoint, type StoredCheckpoint } from "../../src/actors/checkpoint-store.js";
import { localCheckpointKey } from "../../src/actors/memory.js";
import { fileServer, startRig, uniqueCluster, walWith } from "../fixtures/actors/helpers.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();

interface TallyState {
  seen: string[];
}

/**
 * Appends each message's payload `n` to its state, through one recorded step and one
 * unrecorded one; a message whose payload says `bare` needs no record, and one that says
 * `failFirst` fails its first delivery for the infrastructure (so it is redelivered).
 */
function tally(runs: string[]) {
  const failed = new Set<string>();
  return defineActor<TallyState>({
    type: "tally",
    initialState: () => ({ seen: [] }),
    maxAttempts: 1,
    unrecorded: (env) => (env.payload as { bare?: boolean }).bare === true,
    handlers: {
      task_delegate: async (ctx) => {
        const p = ctx.message.payload as { n: string; failFirst?: boolean };
        const got = await ctx.step("read", () => p.n, { idempotent: true });
        await ctx.step(
          "effect",
          () => {
            runs.push(`${got}@${ctx.message.id}`);
          },
          { idempotent: true, record: false },
        );
        if (p.failFirst && !failed.has(ctx.message.id)) {
          failed.add(ctx.message.id);
          throw new KovaError(ErrorCode.TIMEOUT, "the infrastructure failed this delivery");
        }
        ctx.state.seen.push(got);
        return got;
      },
    },
    rpc: { info_request: (_env, state) => state },
  });
}

describe("turns without a record (ActorDefinition.unrecorded)", () => {
  it("unrecorded - a message the definition says replays from the checkpoint runs without a WAL record; its checkpoint and local copy are written; other messages, and a redelivery, are recorded", async () => {
    const cluster = uniqueCluster("ur");
    const runs: string[] = [];
    const appended: string[] = [];
    await using rig = await startRig(server.url, cluster, [tally(runs)], {
      hostWal: (wal) =>
        walWith(wal, {
          append: (kind, payload, opts) => {
            if (kind === TURN_KIND) appended.push(String(((payload as { envelope: { payload: { n: string } } }).envelope.payload as { n: string }).n));
            return wal.append(kind, payload, opts);
          },
        }),
    });
    await rig.host.start("t1", "tally");
    const send = (payload: Record<string, unknown>) => rig.bus.send(createEnvelope({ from: "tester", to: "t1", type: "task_delegate", payload }));
    await send({ n: "a", bare: true });
    await send({ n: "b" });
    await send({ n: "c", bare: true });
    await send({ n: "d", bare: true, failFirst: true });
    await send({ n: "e", bare: true });
    let last: string[] = [];
    const seen = async () => (last = (await rig.bus.request<TallyState>("t1", "info_request", null)).seen);
    await poll(async () => (await seen()).length === 5, { timeoutMs: 15_000, what: () => `five turns of t1 (${last.join(",")})` });

    // every message once in the state, in order; the one that failed ran twice, recorded the second time
    expect(await seen()).toEqual(["a", "b", "c", "d", "e"]);
    expect(runs.map((r) => r.split("@")[0])).toEqual(["a", "b", "c", "d", "d", "e"]);
    expect(appended).toEqual(["b", "d"]);
    // nothing is left PENDING, and the local copy of the checkpoint follows the last turn
    expect(rig.wal.pendingFor("t1")).toEqual([]);
    await rig.close();
    const wal = await Wal.open({ dir: rig.dir, sync: "normal", ringBits: 8 });
    await using _wal = defer(() => wal.close());
    const stored = wal.getKv<StoredCheckpoint>(localCheckpointKey("t1"));
    expect(stored).toBeDefined();
    const local: Checkpoint = readCheckpoint("local checkpoint", stored!);
    expect(local.revision).toBe(5);
    expect((local.state as TallyState).seen).toEqual(["a", "b", "c", "d", "e"]);
    expect(wal.pendingRecords()).toEqual([]);
  });

  it("unrecorded - a definition whose test throws gets its turn recorded", async () => {
    const cluster = uniqueCluster("ur");
    const appended: string[] = [];
    const def = defineActor<TallyState>({
      type: "tally",
      initialState: () => ({ seen: [] }),
      unrecorded: () => {
        throw new Error("cannot tell");
      },
      handlers: {
        task_delegate: async (ctx) => {
          ctx.state.seen.push(String(ctx.message.payload));
          return null;
        },
      },
      rpc: { info_request: (_env, state) => state },
    });
    await using rig = await startRig(server.url, cluster, [def], {
      hostWal: (wal) =>
        walWith(wal, {
          append: (kind, payload, opts) => {
            if (kind === TURN_KIND) appended.push(kind);
            return wal.append(kind, payload, opts);
          },
        }),
    });
    await rig.host.start("t2", "tally");
    await rig.bus.send(createEnvelope({ from: "tester", to: "t2", type: "task_delegate", payload: "x" }));
    await poll(async () => (await rig.bus.request<TallyState>("t2", "info_request", null)).seen.length === 1, { timeoutMs: 10_000, what: "t2's turn" });
    expect(appended).toEqual([TURN_KIND]);
  });
});
