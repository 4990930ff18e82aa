import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Wal } from "../../src/wal/index.js";
import { parseRecord } from "../../src/wal/record-format.js";
import { flipBit, tamper, tempWalDir } from "../integration/wal-helpers.js";

const ROOT = join(import.meta.dirname, "../..");
const BIN = join(ROOT, "bin/kova.js");

function kova(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", env: { ...process.env, KOVA_LOG_LEVEL: "silent" }, timeout: 20_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const KEY = `hex:${"5a".repeat(32)}`;

describe("kova wal CLI", () => {
  it("cli - wal inspect shows records, status, head/tail and epoch; wal verify exits 0 on a clean WAL and 2 on corruption", async () => {
    expect(existsSync(join(ROOT, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    using t = tempWalDir("cli");
    const wal = await Wal.open({ dir: t.dir, ringBits: 4, encryption: { algorithm: "aes-256-gcm", key: KEY } });
    const seqs: number[] = [];
    for (let i = 0; i < 5; i++) seqs.push(await wal.append(i % 2 ? "llm" : "tool", { i }, { owner: "agent-7" }));
    await wal.complete(seqs[0]!);
    await wal.close();

    const inspect = kova("wal", "inspect", t.dir, "--key", KEY);
    expect(inspect.code, inspect.stderr).toBe(0);
    expect(inspect.stdout).toMatch(/epoch 1, encryption aes-256-gcm/);
    expect(inspect.stdout).toMatch(/tail 1, head 5/);
    expect(inspect.stdout).toMatch(/pending 4, complete 1, corrupt 0/);
    expect(inspect.stdout).toMatch(/\n\s+3\tPENDING\ttool\tagent-7\t1\tslot 3/);
    const json = JSON.parse(kova("wal", "inspect", t.dir, "--key", KEY, "--json").stdout) as { records: Array<{ seq: number; status: string }> };
    expect(json.records.map((r) => r.status)).toEqual(["COMPLETE", "PENDING", "PENDING", "PENDING", "PENDING"]);

    const clean = kova("wal", "verify", t.dir, "--key", KEY);
    expect(clean.code, clean.stdout + clean.stderr).toBe(0);
    expect(clean.stdout).toMatch(/^ok: 5 records checked/m);

    const wrong = kova("wal", "verify", t.dir, "--key", `hex:${"00".repeat(32)}`);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(/WAL_BAD_KEY/);

    await tamper(t.dir, (raw) => raw.ring.put(seqs[2]! % 16, flipBit(raw.ring.get(seqs[2]! % 16)!, 300)));
    const bad = kova("wal", "verify", t.dir, "--key", KEY);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toMatch(new RegExp(`CORRUPT seq ${seqs[2]} \\(slot ${seqs[2]! % 16}, ring\\): CRC32 mismatch`));
    expect(bad.stdout).toMatch(/FAILED: 1 corrupt/);

    const missing = kova("wal", "verify", join(t.dir, "nope"));
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/no WAL in/);
  });

  it("cli - wal verify exits 2 when the newest records are truncated and the chain head is rewritten to the newest survivor", async () => {
    using t = tempWalDir("cli-head");
    const HKEY = `hex:${"6b".repeat(32)}`;
    const wal = await Wal.open({ dir: t.dir, ringBits: 4, hmac: { key: HKEY }, encryption: { algorithm: "sm4", key: KEY } });
    for (let i = 0; i < 6; i++) await wal.append("step", { i });
    await wal.close();
    const keys = ["--key", KEY, "--hmac-key", HKEY];
    expect(kova("wal", "verify", t.dir, ...keys).code).toBe(0);

    await tamper(t.dir, async (raw) => {
      const survivor = parseRecord(Buffer.from(raw.ring.get(4)!));
      if (!survivor.ok) throw new Error(survivor.reason);
      await raw.ring.remove(6);
      await raw.ring.remove(5);
      await raw.meta.put("head", { ...(raw.meta.get("head") as object), seq: 4, mac: survivor.record.mac!.toString("hex") });
    });
    const r = kova("wal", "verify", t.dir, ...keys);
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stdout).toMatch(/CHAIN BREAK at seq 4: the chain head fails authentication/);
    expect(r.stdout).toMatch(/FAILED: 0 corrupt, 1 chain breaks/);
  });
});
