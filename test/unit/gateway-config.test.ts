import { describe, expect, it } from "vitest";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseGatewayConfig } from "../../src/gateway/config.js";
import { hashKey, generateKey } from "../../src/gateway/keys.js";
import { parseConfig } from "../../src/node/config.js";
import { configError } from "../fixtures/config-error.js";
import { tempDir } from "../fixtures/disposable.js";

describe("gateway config", () => {
  it("gateway config - defaults: loopback 8080, keys auth, 1 MiB bodies, 600 requests a minute, quotas per key", () => {
    expect(parseGatewayConfig(undefined)).toEqual({
      host: "127.0.0.1",
      port: 8080,
      auth: "keys",
      keys: [],
      keysBucket: true,
      maxBodyBytes: 1024 * 1024,
      ratePerMinute: 600,
      quotas: { maxInstances: 100, maxConcurrentRuns: 16, tokensPerMinute: 1_000_000 },
      taskTimeoutMs: 600_000,
      ui: true,
    });
  });

  it('gateway config - auth = "none" is refused unless the gateway listens on loopback only', () => {
    expect(parseGatewayConfig({ listen: "127.0.0.1:9000", auth: "none" }).auth).toBe("none");
    expect(parseGatewayConfig({ listen: "[::1]:9000", auth: "none" }).host).toBe("::1");
    const err = configError(() => parseGatewayConfig({ listen: "0.0.0.0:9000", auth: "none" }));
    expect(err.message).toMatch(/gateway\.auth: "none" is only accepted on a loopback address/);
    expect(configError(() => parseGatewayConfig({ listen: "nohost" })).message).toContain("gateway.listen");
    expect(configError(() => parseGatewayConfig({ auth: "maybe" })).message).toContain('"keys" or "none"');
    expect(configError(() => parseGatewayConfig({ listn: "x" })).message).toContain("did you mean gateway.listen");
  });

  it("gateway config - a key comes as a hash, from the environment or from a file, and is stored hashed only", async () => {
    const key = generateKey();
    await using tmp = await tempDir("kova-gwcfg-");
    const dir = tmp.path;
    await writeFile(join(dir, "ops.key"), `${key}\n`);
    const c = parseGatewayConfig(
      {
        keys: [
          { name: "ci", hash: hashKey(key), agents: ["researcher"], rate_per_minute: 5 },
          { name: "env", key_env: "GW_KEY" },
          { name: "file", key_file: "./ops.key" },
          { name: "all", hash: hashKey("x"), agents: ["*"] },
          { name: "ops", hash: hashKey("y"), admin: true, max_instances: 5, max_concurrent_runs: 2, tokens_per_minute: 1000 },
        ],
        max_instances: 7,
      },
      { baseDir: dir, env: { GW_KEY: key } },
    );
    expect(c.keys).toEqual([
      { name: "ci", hash: hashKey(key), agents: ["researcher"], ratePerMinute: 5 },
      { name: "env", hash: hashKey(key) },
      { name: "file", hash: hashKey(key) },
      { name: "all", hash: hashKey("x") },
      { name: "ops", hash: hashKey("y"), admin: true, maxInstances: 5, maxConcurrentRuns: 2, tokensPerMinute: 1000 },
    ]);
    expect(c.quotas).toEqual({ maxInstances: 7, maxConcurrentRuns: 16, tokensPerMinute: 1_000_000 });
    expect(configError(() => parseGatewayConfig({ keys: [{ name: "a", hash: hashKey("1"), max_instances: 0 }] })).message).toContain("max_instances");
    expect(configError(() => parseGatewayConfig({ keys: [{ name: "a", hash: hashKey("1"), admin: "yes" }] })).message).toContain("admin");
    expect(JSON.stringify(c)).not.toContain(key);
    expect(configError(() => parseGatewayConfig({ keys: [{ name: "a", key_env: "NOPE" }] }, { env: {} })).message).toContain("NOPE is not set");
    expect(configError(() => parseGatewayConfig({ keys: [{ name: "a", hash: "md5:abc" }] })).message).toContain("sha256:");
    expect(configError(() => parseGatewayConfig({ keys: [{ name: "a" }] })).message).toContain("exactly one of hash");
    expect(
      configError(() =>
        parseGatewayConfig({
          keys: [
            { name: "a", hash: hashKey("1") },
            { name: "a", hash: hashKey("2") },
          ],
        }),
      ).message,
    ).toContain("used twice");
    expect(configError(() => parseGatewayConfig({ keys: { name: "a" } })).message).toBe(
      "gateway.keys: must be an array of tables: write each key as [[gateway.keys]] with name and hash",
    );
  });

  it("gateway config - [gateway] in a node's kova.toml is kept for the gateway layer to parse", () => {
    const node = parseConfig(`[gateway]\nlisten = "127.0.0.1:8081"\n[gateway.otel]\nendpoint = "http://127.0.0.1:4318/v1/traces"\n`, { env: {} });
    expect(node.gateway).toEqual({ listen: "127.0.0.1:8081", otel: { endpoint: "http://127.0.0.1:4318/v1/traces" } });
    expect(parseGatewayConfig(node.gateway).otel).toEqual({ endpoint: "http://127.0.0.1:4318/v1/traces", serviceName: "kova", headers: {} });
    expect(configError(() => parseGatewayConfig({ otel: {} })).message).toContain("gateway.otel.endpoint");
  });
});
