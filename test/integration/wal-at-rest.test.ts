import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { defineActor } from "../../src/actors/index.js";
import { localCheckpointKey } from "../../src/actors/memory.js";
import { inspectWal, verifyWal, Wal, WalKvCorruptError, type CipherAlgorithm, type WalOptions } from "../../src/wal/index.js";
import { walInternals } from "../../src/wal/wal.js";
import { fileServer, startRig, uniqueCluster } from "../fixtures/actors/helpers.js";
import { poll } from "../fixtures/poll.js";
import { tamper, walDirs } from "./wal-helpers.js";
import { WalErrorCode } from "../../src/wal/errors.js";

const dir = walDirs();
const server = fileServer();
const KEY = `hex:${"3c".repeat(32)}`;
const MARK = "MARKER-5e1f-at-rest";

/** The files of the data dir (data.mdb, lock.mdb, whatever else) that contain `needle`. */
function filesContaining(d: string, needle: string): string[] {
  const hits: string[] = [];
  for (const entry of readdirSync(d, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    if (readFileSync(path).includes(Buffer.from(needle))) hits.push(path);
  }
  return hits;
}

/** Records, replace, overflow and completes with kv, each carrying MARK; returns what must come back. */
async function writeEverything(d: string, extra: Partial<WalOptions>): Promise<{ pending: number[] }> {
  const wal = await Wal.open({ dir: d, ringBits: 3, maxPending: 1000, ...extra });
  const kind = `kind-${MARK}`;
  const owner = `owner-${MARK}`;
  const pending: number[] = [];
  for (let i = 0; i < 20; i++) {
    const seq = await wal.append(kind, { text: `${MARK} #${i}` }, { owner });
    // Every third completes with a side-table entry; the rest stay PENDING past a lap (overflow).
    if (i % 3 === 0) await wal.complete(seq, { kv: [{ key: `kv-${MARK}-${i}`, value: { secret: `${MARK} value ${i}` } }] });
    else pending.push(seq);
  }
  const replaced = pending.pop()!;
  pending.push(await wal.replace(replaced, { text: `${MARK} replaced` }, { kind: `${kind}-replaced` }));
  expect(walInternals(wal).storage.overflow.getCount()).toBeGreaterThan(0);
  await wal.close();
  return { pending };
}

describe.each(["aes-256-gcm", "sm4"] as CipherAlgorithm[])("wal at rest with %s", (algorithm) => {
  const encryption = { algorithm, key: KEY };

  it(`wal - ${algorithm}: records, replace, overflow and completes with kv leave no byte of the marker in any file of the data dir, and all of it reads back`, async () => {
    const d = dir("at-rest");
    const { pending } = await writeEverything(d, { encryption });
    expect(readdirSync(d).sort()).toEqual(["data.mdb", "lock.mdb"]);
    expect(filesContaining(d, MARK)).toEqual([]);
    expect(filesContaining(d, "kv-")).toEqual([]); // the side table's key names are hashed too

    {
      await using wal = await Wal.open({ dir: d, encryption });
      expect(wal.recovery.corrupt).toEqual([]);
      expect(wal.recovery.pending.map((p) => p.seq)).toEqual(pending);
      expect(wal.recovery.pending[0]).toMatchObject({ kind: `kind-${MARK}`, owner: `owner-${MARK}`, payload: { text: `${MARK} #1` } });
      expect(wal.recovery.pending.at(-1)).toMatchObject({ kind: `kind-${MARK}-replaced`, payload: { text: `${MARK} replaced` } });
      expect(wal.getKv(`kv-${MARK}-9`)).toEqual({ secret: `${MARK} value 9` });
      expect(wal.getKv(`kv-${MARK}-10`)).toBeUndefined();
    }
    // Reading it back wrote nothing in the clear either (the open stores only an epoch and a salt).
    expect(filesContaining(d, MARK)).toEqual([]);
  });

  it(`wal - ${algorithm}: inspect without the key shows no kind, owner or status it cannot know; with the key, all of them`, async () => {
    const d = dir("inspect");
    await writeEverything(d, { encryption });
    const blind = inspectWal(d);
    expect(blind.unverified).toBe(true);
    expect(blind.notes.join("\n")).toMatch(/completion batches are encrypted/);
    expect(new Set(blind.records.map((r) => r.kind))).toEqual(new Set(["(sealed)"]));
    expect(blind.records.every((r) => r.owner === undefined && r.status === "UNKNOWN")).toBe(true);
    expect(JSON.stringify(blind)).not.toContain(MARK);
    const seen = inspectWal(d, { key: KEY });
    expect(seen.unverified).toBe(false);
    expect(seen.records.find((r) => r.status === "PENDING")).toMatchObject({ kind: `kind-${MARK}`, owner: `owner-${MARK}` });
    expect(seen.records.some((r) => r.status === "COMPLETE")).toBe(true);
    expect(verifyWal(d, { key: KEY })).toMatchObject({ ok: true, corrupt: [], chainBreaks: [] });
  });

  it(`wal - ${algorithm}: a side-table value edited, or moved under another key, is WAL_CORRUPT on read instead of being returned`, async () => {
    const d = dir("kv-tamper");
    const wal = await Wal.open({ dir: d, encryption });
    const a = await wal.append("step", 1);
    const b = await wal.append("step", 2);
    await wal.complete(a, { kv: [{ key: "alpha", value: "A" }] });
    await wal.complete(b, { kv: [{ key: "beta", value: "B" }] });
    await wal.close();
    await tamper(d, async (raw) => {
      const kv = raw.env.openDB<Buffer, Buffer>({ name: "kvsealed", keyEncoding: "binary", encoding: "binary" });
      const [first, second] = [...kv.getRange({})];
      await kv.put(first!.key, second!.value); // one key now holds the other key's value
      const edited = Buffer.from(second!.value);
      edited[edited.length - 20] = edited[edited.length - 20]! ^ 1;
      await kv.put(second!.key, edited);
    });
    {
      await using again = await Wal.open({ dir: d, encryption });
      for (const key of ["alpha", "beta"]) {
        const err = (() => {
          try {
            return again.getKv(key);
          } catch (e) {
            return e;
          }
        })();
        expect(err, key).toBeInstanceOf(WalKvCorruptError);
        expect((err as WalKvCorruptError).code).toBe(WalErrorCode.WAL_CORRUPT);
      }
    }
  });

  it(`wal - ${algorithm}: an entry an older version left in the clear side table is still read, and goes when the key is written again`, async () => {
    const d = dir("kv-legacy");
    await (await Wal.open({ dir: d, encryption })).close();
    await tamper(d, (raw) => raw.env.openDB<unknown, string>({ name: "kv" }).put("actors/a1/checkpoint", { state: "old" }));
    {
      await using wal = await Wal.open({ dir: d, encryption });
      expect(wal.getKv("actors/a1/checkpoint")).toEqual({ state: "old" });
      await wal.complete(await wal.append("step", 1), { kv: [{ key: "actors/a1/checkpoint", value: { state: "new" } }] });
      expect(wal.getKv("actors/a1/checkpoint")).toEqual({ state: "new" });
      expect(walInternals(wal).storage.kv.get("actors/a1/checkpoint")).toBeUndefined();
    }
  });
});

describe("wal at rest", () => {
  it("wal - without encryption the same writes are readable in data.mdb (the search above can find what is there)", async () => {
    const d = dir("plain");
    await writeEverything(d, {});
    expect(filesContaining(d, MARK).map((p) => p.endsWith("data.mdb"))).toEqual([true]);
  });

  it.each(["aes-256-gcm", "sm4"] as CipherAlgorithm[])(
    "wal - through an actor on a WAL encrypted with %s: its id, the message it handled and its checkpointed state never reach the data dir in the clear",
    async (algorithm) => {
      const d = dir(`actor-${algorithm}`);
      const actorId = `agent-${MARK}`;
      const keeper = defineActor<{ kept?: unknown }>({
        type: "keeper",
        initialState: () => ({}),
        handlers: {
          task_delegate: async (ctx) => {
            ctx.state.kept = await ctx.step("remember", async () => ctx.message.payload);
          },
        },
      });
      const encryption = { algorithm, key: KEY };
      {
        await using rig = await startRig(server.url, uniqueCluster(), [keeper], { dir: d, wal: { encryption } });
        await rig.host.start(actorId, "keeper");
        await rig.bus.send(createEnvelope({ from: "tester", to: actorId, type: "task_delegate", payload: { note: `${MARK} in a message` } }));
        await poll(() => rig.host.status(actorId)?.handled === 1, { timeoutMs: 10_000, what: "the turn", retryErrors: true });
      }
      expect(filesContaining(d, MARK)).toEqual([]);
      {
        await using wal = await Wal.open({ dir: d, encryption });
        // It is all there: the local checkpoint holds the state with the marker.
        expect(JSON.stringify(wal.getKv(localCheckpointKey(actorId)))).toContain(`${MARK} in a message`);
      }
    },
  );
});
