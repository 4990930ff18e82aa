import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Wal } from "../../src/wal/index.js";
import { parseRecord } from "../../src/wal/record-format.js";
import { flipBit, tamper, tempWalDir } from "../integration/wal-helpers.js";

const ROOT = join(import.meta.dirname, "../..");
const BIN = join(ROOT, "bin/kova.js");

const KEY = `hex:${"5a".repeat(32)}`;
const HKEY = `hex:${"6b".repeat(32)}`;
const WRONG_KEY = `hex:${"00".repeat(32)}`;

/** `kova <args>` with the keys in the environment (never on the command line, where `ps` shows them). */
function kova(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const env: NodeJS.ProcessEnv = { ...process.env, KOVA_LOG_LEVEL: "silent", TEST_WAL_KEY: KEY, TEST_WAL_HMAC_KEY: HKEY, TEST_WRONG_KEY: WRONG_KEY };
  delete env.KOVA_WAL_KEY;
  delete env.KOVA_WAL_HMAC_KEY;
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", env, timeout: 20_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("kova wal CLI", () => {
  it("cli - wal inspect shows records, status, head/tail and epoch; wal verify exits 0 on a clean WAL and 2 on corruption", async () => {
    expect(existsSync(join(ROOT, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    using t = tempWalDir("cli");
    const wal = await Wal.open({ dir: t.dir, ringBits: 4, encryption: { algorithm: "aes-256-gcm", key: KEY } });
    const seqs: number[] = [];
    for (let i = 0; i < 5; i++) seqs.push(await wal.append(i % 2 ? "llm" : "tool", { i }, { owner: "agent-7" }));
    await wal.complete(seqs[0]!);
    await wal.close();

    const inspect = kova("wal", "inspect", t.dir, "--key-env", "TEST_WAL_KEY");
    expect(inspect.code, inspect.stderr).toBe(0);
    expect(inspect.stdout).toMatch(/epoch 1, encryption aes-256-gcm/);
    expect(inspect.stdout).toMatch(/tail 1, head 5/);
    expect(inspect.stdout).toMatch(/pending 4, complete 1, corrupt 0/);
    expect(inspect.stdout).toMatch(/\n\s+3\tPENDING\ttool\tagent-7\t1\tslot 3/);
    const json = JSON.parse(kova("wal", "inspect", t.dir, "--key-env", "TEST_WAL_KEY", "--json").stdout) as { records: Array<{ seq: number; status: string }> };
    expect(json.records.map((r) => r.status)).toEqual(["COMPLETE", "PENDING", "PENDING", "PENDING", "PENDING"]);

    const clean = kova("wal", "verify", t.dir, "--key-env", "TEST_WAL_KEY");
    expect(clean.code, clean.stdout + clean.stderr).toBe(0);
    expect(clean.stdout).toMatch(/^ok: 5 records checked/m);

    const wrong = kova("wal", "verify", t.dir, "--key-env", "TEST_WRONG_KEY");
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(/WAL_BAD_KEY/);

    await tamper(t.dir, (raw) => raw.ring.put(seqs[2]! % 16, flipBit(raw.ring.get(seqs[2]! % 16)!, 300)));
    const bad = kova("wal", "verify", t.dir, "--key-env", "TEST_WAL_KEY");
    expect(bad.code).toBe(2);
    expect(bad.stdout).toMatch(new RegExp(`CORRUPT seq ${seqs[2]} \\(slot ${seqs[2]! % 16}, ring\\): CRC32 mismatch`));
    expect(bad.stdout).toMatch(/FAILED: 1 corrupt/);

    const missing = kova("wal", "verify", join(t.dir, "nope"));
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/no WAL in/);
    // Each command is a fresh process (about 3 s on a loaded 2-core machine).
  }, 120_000);

  it("cli - wal verify exits 2 when the newest records are truncated and the chain head is rewritten to the newest survivor", async () => {
    using t = tempWalDir("cli-head");
    const wal = await Wal.open({ dir: t.dir, ringBits: 4, hmac: { key: HKEY }, encryption: { algorithm: "sm4", key: KEY } });
    for (let i = 0; i < 6; i++) await wal.append("step", { i });
    await wal.close();
    // From files this time (one trailing newline, as an editor leaves it, is not part of the key).
    writeFileSync(join(t.dir, "..", "cli-head.key"), `${KEY}\n`, { mode: 0o600 });
    writeFileSync(join(t.dir, "..", "cli-head.hmac"), `${HKEY}\n`, { mode: 0o600 });
    const keys = ["--key-file", join(t.dir, "..", "cli-head.key"), "--hmac-key-file", join(t.dir, "..", "cli-head.hmac")];
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
  }, 120_000);

  it("cli - wal inspect and verify refuse a key given as a flag value, naming --key-env / --key-file; an unset variable or a missing file is named too", async () => {
    using t = tempWalDir("cli-flags");
    const wal = await Wal.open({ dir: t.dir, ringBits: 4, hmac: { key: HKEY }, encryption: { algorithm: "aes-256-gcm", key: KEY } });
    await wal.append("step", { i: 1 });
    await wal.close();
    for (const cmd of ["inspect", "verify"]) {
      const key = kova("wal", cmd, t.dir, "--key", KEY);
      expect(key.code, key.stdout).toBe(1);
      expect(key.stderr).toMatch(/--key: a key given as a flag value shows in `ps`.*use --key-env <VAR> or --key-file <PATH>/);
      expect(key.stdout).toBe("");
      const hmac = kova("wal", cmd, t.dir, "--key-env", "TEST_WAL_KEY", "--hmac-key", HKEY);
      expect(hmac.code, hmac.stdout).toBe(1);
      expect(hmac.stderr).toMatch(/--hmac-key: .*use --hmac-key-env <VAR> or --hmac-key-file <PATH>/);
    }
    const unset = kova("wal", "verify", t.dir, "--key-env", "NO_SUCH_VARIABLE_SET");
    expect(unset.code).toBe(1);
    expect(unset.stderr).toMatch(/--key-env: environment variable NO_SUCH_VARIABLE_SET is not set/);
    const missing = kova("wal", "verify", t.dir, "--key-env", "TEST_WAL_KEY", "--hmac-key-file", join(t.dir, "no-such-file"));
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/--hmac-key-file: cannot read .*no-such-file \(ENOENT\)/);
    // The help lists only the forms that keep the key off the command line.
    const help = kova("wal", "verify", "--help");
    expect(help.stdout).toContain("--key-env <var>");
    expect(help.stdout).not.toMatch(/--key <key>/);
    const ok = kova("wal", "verify", t.dir, "--key-env", "TEST_WAL_KEY", "--hmac-key-env", "TEST_WAL_HMAC_KEY");
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
  }, 120_000);
});
