import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEnvelope } from "../../src/bus/index.js";
import { ActorTypeRegistry, counterActor, parseTurnRecord, replayTurn, TURN_KIND } from "../../src/actors/index.js";
import { createLogger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { startNatsServer } from "../../src/testing/index.js";
import { readWalRecords } from "../../src/wal/index.js";
import { defer, tempDir, type TempDir } from "../fixtures/disposable.js";

const ROOT = join(import.meta.dirname, "../..");
const FIXTURES = join(ROOT, "test/fixtures/actors");

function kova(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [join(ROOT, "bin/kova.js"), ...args], {
    encoding: "utf8",
    env: { ...process.env, KOVA_LOG_LEVEL: "silent" },
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("replay of the turns a node recorded", () => {
  let tmp: TempDir;
  let toml: string;
  let wal: string;
  // One node runs three turns of tally (replay-tally-v1.mjs) and one of the built-in counter,
  // then stops: its WAL holds their records, COMPLETE.
  beforeAll(async () => {
    expect(existsSync(join(ROOT, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    await using nats = await startNatsServer({ allowExternal: false });
    tmp = await tempDir("kova-replay-");
    toml = join(tmp.path, "kova.toml");
    wal = join(tmp.path, "data", "wal");
    await writeFile(
      toml,
      [
        `modules = ["${join(FIXTURES, "replay-tally-v1.mjs")}"]`,
        `[node]`,
        `id = "n1"`,
        `data_dir = "${join(tmp.path, "data")}"`,
        `[cluster]`,
        `name = "r${randomUUID().slice(0, 8)}"`,
        `[nats]`,
        `urls = ["${nats.url}"]`,
        `[wal]`,
        `sync = "normal"`,
        `[[actors]]`,
        `id = "t1"`,
        `type = "tally"`,
        `[[actors]]`,
        `id = "c1"`,
        `type = "counter"`,
      ].join("\n"),
    );
    const config = parseConfig(await readFile(toml, "utf8"), { path: toml, env: {} });
    const node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
    await using _node = defer(() => node.stop("test").catch(() => undefined));
    const ask = (to: string) => node.busClient.ask(createEnvelope({ from: "tester", to, type: "task_delegate", payload: {} }), { timeoutMs: 15_000 });
    for (let i = 1; i <= 3; i++) expect((await ask("t1")).payload).toEqual({ count: i });
    await ask("c1");
  }, 60_000);
  afterAll(() => tmp?.[Symbol.asyncDispose]());

  it("wal replay - in code, each recorded turn replays on the code that ran it: matched, all of its steps", async () => {
    const turns = readWalRecords(wal, {}, { kind: TURN_KIND, owner: "t1" }).map((r) => ({ record: parseTurnRecord(r.payload)!, status: r.status }));
    const latest = new Map(turns.map((t) => [t.record.envelope.id, t]));
    expect(latest.size).toBe(3);
    const { tally } = (await import(join(FIXTURES, "replay-tally-v1.mjs"))) as { tally: Parameters<typeof replayTurn>[0] };
    for (const { record, status } of latest.values()) {
      expect(status).toBe("COMPLETE");
      expect(await replayTurn(tally, record, { complete: true })).toMatchObject({ outcome: "matched", matchedSteps: 1, recordedSteps: 1 });
    }
  });

  it("wal replay - kova wal replay <actor> --config replays each turn on the config's modules (and the built-ins), exit 0", () => {
    const same = kova("wal", "replay", "t1", "--config", toml);
    expect(same.code, same.stderr).toBe(0);
    expect(same.stdout.trim().split("\n")).toHaveLength(3);
    expect(same.stdout).toMatch(/^t1 task_delegate \S+: matched \(1 of 1 recorded steps\)$/m);
    expect(same.stdout).not.toMatch(/diverged/);
    expect(kova("wal", "replay", "c1", "--config", toml).stdout).toMatch(/^c1 task_delegate \S+: matched \(1 of 1 recorded steps\)$/m);
  }, 30_000);

  it("wal replay - against changed code it reports the first step where code and record part, and exits 3", () => {
    const changed = kova("wal", "replay", "t1", "--dir", wal, "--module", join(FIXTURES, "replay-tally-v2.mjs"), "--json");
    expect(changed.code, changed.stderr).toBe(3);
    const reports = JSON.parse(changed.stdout) as Array<{ outcome: string; divergence: unknown }>;
    expect(reports).toHaveLength(3);
    for (const r of reports) expect(r).toMatchObject({ outcome: "diverged", divergence: { kind: "step", index: 0, recorded: "count", replayed: "increment" } });
  }, 30_000);

  it("wal replay - an actor with no turn in the WAL is an error that says so", () => {
    const unknown = kova("wal", "replay", "nobody", "--dir", wal);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/no turn of nobody is left in the WAL/);
  }, 30_000);
});
