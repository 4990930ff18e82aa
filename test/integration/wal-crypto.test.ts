import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ErrorCode } from "../../src/core/errors.js";
import { Wal, type CipherAlgorithm } from "../../src/wal/index.js";
import { parseRecord } from "../../src/wal/record-format.js";
import { walInternals } from "../../src/wal/wal.js";
import { walDirs } from "./wal-helpers.js";
import { WalErrorCode } from "../../src/wal/errors.js";

const dir = walDirs();

const KEY = `base64:${Buffer.alloc(32, 7).toString("base64")}`;
const SECRET = "the-secret-plan-9f2c";

describe.each(["aes-256-gcm", "sm4"] as CipherAlgorithm[])("wal encryption %s", (algorithm) => {
  it(`wal - ${algorithm} records round-trip across reopen and no plaintext reaches the file`, async () => {
    const d = dir("enc");
    const wal = await Wal.open({ dir: d, encryption: { algorithm, key: KEY } });
    const a = await wal.append("step", { secret: SECRET }, { owner: "agent-x" });
    const b = await wal.append("step", { secret: SECRET }, { owner: "agent-x" });
    // Same plaintext, different seq → different ciphertext (IV = epoch ‖ seq).
    const ring = walInternals(wal).storage.ring;
    const ra = parseRecord(ring.get(a % 2 ** 16)!);
    const rb = parseRecord(ring.get(b % 2 ** 16)!);
    if (!ra.ok || !rb.ok) throw new Error("stored records must parse");
    expect(ra.record.body.equals(rb.record.body)).toBe(false);
    expect(ra.record.cipher).toBe(algorithm === "sm4" ? 2 : 1);
    await wal.close();
    expect(readFileSync(join(d, "data.mdb")).includes(Buffer.from(SECRET))).toBe(false);

    const again = await Wal.open({ dir: d, encryption: { algorithm, key: KEY } });
    expect(again.recovery.epoch).toBe(2);
    expect(again.recovery.pending.map((p) => p.payload)).toEqual([{ secret: SECRET }, { secret: SECRET }]);
    // A new epoch: the next record's nonce differs from every nonce of epoch 1.
    const c = await again.append("step", { secret: SECRET });
    const rc = parseRecord(walInternals(again).storage.ring.get(c % 2 ** 16)!);
    expect(rc.ok && rc.record.epoch).toBe(2);
    await again.close();
  });

  it(`wal - ${algorithm}: a wrong key, a missing key or another algorithm is WAL_BAD_KEY at open`, async () => {
    const d = dir("badkey");
    const wal = await Wal.open({ dir: d, encryption: { algorithm, key: KEY } });
    await wal.append("step", { secret: SECRET });
    await wal.close();
    const other = algorithm === "sm4" ? "aes-256-gcm" : "sm4";
    await expect(Wal.open({ dir: d, encryption: { algorithm, key: "a different key, long enough" } })).rejects.toMatchObject({
      code: WalErrorCode.WAL_BAD_KEY,
      message: expect.stringMatching(/wrong WAL encryption key/),
    });
    await expect(Wal.open({ dir: d })).rejects.toMatchObject({ code: WalErrorCode.WAL_BAD_KEY });
    await expect(Wal.open({ dir: d, encryption: { algorithm: other, key: KEY } })).rejects.toMatchObject({ code: WalErrorCode.WAL_BAD_KEY });
    // The failed opens left the WAL intact.
    const again = await Wal.open({ dir: d, encryption: { algorithm, key: KEY } });
    expect(again.recovery.pending).toHaveLength(1);
    await again.close();
  });
});

describe("wal keys", () => {
  it("wal - encryption given for a WAL created without it is WAL_BAD_KEY, and short keys are a config error", async () => {
    const d = dir("plain");
    await (await Wal.open({ dir: d })).close();
    await expect(Wal.open({ dir: d, encryption: { algorithm: "aes-256-gcm", key: KEY } })).rejects.toMatchObject({
      code: WalErrorCode.WAL_BAD_KEY,
    });
    await expect(Wal.open({ dir: dir("short"), encryption: { algorithm: "aes-256-gcm", key: "short" } })).rejects.toMatchObject({
      code: ErrorCode.INVALID_CONFIG,
    });
  });

  it("wal - the epoch is bumped and flushed at every open, before any encryption", async () => {
    const d = dir("epoch");
    for (let i = 1; i <= 3; i++) {
      const wal = await Wal.open({ dir: d, encryption: { algorithm: "aes-256-gcm", key: KEY } });
      expect(wal.epoch).toBe(i);
      expect((walInternals(wal).storage.readMeta() as { epoch: number }).epoch).toBe(i);
      await wal.close();
    }
  });
});
