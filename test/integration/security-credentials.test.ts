import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { pino } from "pino";
import { nkeys } from "@nats-io/transport-node";
import { Bus, type NatsSecurity } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import type { Logger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { freePort, startNatsServer } from "../../src/testing/index.js";
import { startMutualTlsServer } from "../fixtures/security/pki.js";
import { makeOperatorSetup, operatorModeConfig } from "../fixtures/security/jwt.js";
import { configError } from "../fixtures/config-error.js";

async function connects(url: string, security?: NatsSecurity): Promise<true | string> {
  try {
    const bus = await Bus.connect({
      servers: url,
      cluster: "sec",
      logger: pino({ level: "silent" }),
      connectTimeoutMs: 3000,
      ...(security ? { security } : {}),
    });
    await bus.close();
    return true;
  } catch (err) {
    return isKovaError(err) ? err.code : String(err);
  }
}

/** A pino logger whose output the test can search. */
function capturedLogger(): { logger: Logger; text: () => string } {
  const chunks: string[] = [];
  const sink = new Writable({
    write: (c, _e, cb) => {
      chunks.push(String(c));
      cb();
    },
  });
  return { logger: pino({ level: "trace" }, sink) as unknown as Logger, text: () => chunks.join("") };
}

describe("security: credentials and TLS", () => {
  it("credentials - user/password, token and NKey connect; wrong or missing credentials fail with NATS_AUTH_FAILED", async () => {
    const user = nkeys.createUser();
    const seed = new TextDecoder().decode(user.getSeed());
    await using server = await startNatsServer({
      allowExternal: false,
      extraConfig: `authorization { users = [ { user: "kova", password: "pw-9f3c" }, { nkey: "${user.getPublicKey()}" } ] }`,
    });
    expect(await connects(server.url, { user: "kova", password: "pw-9f3c" })).toBe(true);
    expect(await connects(server.url, { nkeySeed: seed })).toBe(true);
    expect(await connects(server.url, { user: "kova", password: "wrong" })).toBe("NATS_AUTH_FAILED");
    expect(await connects(server.url, { nkeySeed: new TextDecoder().decode(nkeys.createUser().getSeed()) })).toBe("NATS_AUTH_FAILED");
    expect(await connects(server.url)).toBe("NATS_AUTH_FAILED");
    await using tokenServer = await startNatsServer({ allowExternal: false, extraConfig: `authorization { token: "tok-4e1a" }` });
    expect(await connects(tokenServer.url, { token: "tok-4e1a" })).toBe(true);
    expect(await connects(tokenServer.url, { token: "nope" })).toBe("NATS_AUTH_FAILED");
  });

  it("credentials - a .creds file (JWT) connects to a server in operator mode", async () => {
    const op = makeOperatorSetup();
    const dir = await mkdtemp(join(tmpdir(), "kova-creds-"));
    try {
      const creds = join(dir, "client.creds");
      await writeFile(creds, op.userCreds("client"));
      await using server = await startNatsServer({
        allowExternal: false,
        extraConfig: operatorModeConfig(op),
      });
      expect(await connects(server.url, { credsFile: creds })).toBe(true);
      expect(await connects(server.url)).toBe("NATS_AUTH_FAILED");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("tls - a server requiring TLS and client certificates accepts the configured CA, cert and key and refuses a client without them", async () => {
    await using tls = await startMutualTlsServer();
    const { pki, url } = tls;
    expect(await connects(url, { tls: { caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey } })).toBe(true);
    expect(await connects(url, { tls: { caFile: pki.ca } })).not.toBe(true);
  });

  it("config - [nats] takes secrets from env or files, never from the file; URLs with credentials are refused there and redacted elsewhere", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-natscfg-"));
    try {
      await writeFile(join(dir, "pw"), "from-file-secret\n");
      const fromFile = parseConfig(`[nats]\nurls = ["nats://127.0.0.1:4222"]\nuser = "kova"\npassword_file = "pw"\n`, {
        path: join(dir, "kova.toml"),
        env: {},
      });
      expect(fromFile.security).toMatchObject({ user: "kova", password: "from-file-secret" });
      const fromEnv = parseConfig(`[nats]\ntoken_env = "T"\ninbox_prefix = "_INBOX_kova"\nreply_prefixes = ["_INBOX_client"]\n`, { env: { T: "env-token" } });
      expect(fromEnv.security).toMatchObject({ token: "env-token", inboxPrefix: "_INBOX_kova" });
      expect(fromEnv.replyPrefixes).toEqual(["_INBOX_client"]);
      expect(configError(() => parseConfig(`[nats]\nuser = "kova"\npassword = "plain"\n`, { env: {} })).message).toMatch(
        /nats.password: secrets are not read from the config file.*password_env/,
      );
      expect(configError(() => parseConfig(`[nats]\ntoken_env = "UNSET_VAR"\n`, { env: {} })).message).toContain("UNSET_VAR is not set");
      const urlErr = configError(() => parseConfig(`[nats]\nurls = ["nats://kova:hunter2@10.0.0.1:4222"]\n`, { env: {} }));
      expect(urlErr.message).toContain("nats.urls[0]");
      expect(urlErr.message).not.toContain("hunter2");
      // nats.js takes `user:pass@host:port` without a scheme as nats://…, and so does the config.
      const schemeless = configError(() => parseConfig(`[nats]\nurls = ["kova:hunter3@10.0.0.1:4222"]\n`, { env: {} }));
      expect(schemeless.message).toMatch(/nats.urls\[0\]: holds credentials/);
      expect(schemeless.message).not.toContain("hunter3");
      expect(parseConfig("", { env: { NATS_URL: "kova:s3cret@10.0.0.1:4222" } }).natsUrls).toEqual(["kova:s3cret@10.0.0.1:4222"]);
      const badEnv = configError(() => parseConfig("", { env: { NATS_URL: "kova:s3cret@10.0.0.1" } }));
      expect(badEnv.message).toContain('NATS_URL[0]: "nats://***@10.0.0.1" is not a NATS URL');
      expect(badEnv.message).not.toContain("s3cret");
      expect(configError(() => parseConfig(`[nats]\ncreds_file = "/nonexistent/x.creds"\n`, { env: {} })).message).toMatch(/nats.creds_file: cannot read/);
      expect(configError(() => parseConfig(`[nats]\ntls = { cert_file = "pw" }\n`, { path: join(dir, "kova.toml"), env: {} })).message).toMatch(
        /cert_file and key_file go together/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("redaction - a connection error names a URL with credentials without them: refused credentials and an unreachable server", async () => {
    await using server = await startNatsServer({ allowExternal: false, extraConfig: `authorization { users = [ { user: "kova", password: "pw-5d2e" } ] }` });
    const connectError = (url: string) =>
      Bus.connect({ servers: url, cluster: "sec", logger: pino({ level: "silent" }), connectTimeoutMs: 3000 }).then(
        (bus) => bus.close().then(() => new Error("connected")),
        (err: unknown) => err as Error,
      );
    // What a caller may show of an error: its message and its data.
    const shown = (e: Error) => JSON.stringify({ message: e.message, data: (e as { data?: unknown }).data });
    const refused = await connectError(server.url.replace("nats://", "nats://kova:wrong-8c1f@"));
    expect(isKovaError(refused, "NATS_AUTH_FAILED"), String(refused)).toBe(true);
    expect(refused.message).toContain("nats://***@127.0.0.1");
    expect(shown(refused)).not.toContain("wrong-8c1f");
    const dead = await connectError(`nats://kova:dead-4b7a@127.0.0.1:${await freePort()}`);
    expect(isKovaError(dead, "NATS_UNREACHABLE"), String(dead)).toBe(true);
    expect(dead.message).toMatch(/nats:\/\/\*\*\*@127\.0\.0\.1:\d+/);
    expect(shown(dead)).not.toContain("dead-4b7a");
    // Without a scheme (nats.js reads `user:pass@host:port` as nats://…): the same.
    const bare = server.url.replace("nats://", "");
    const refusedBare = await connectError(`kova:wrong-61ad@${bare}`);
    expect(isKovaError(refusedBare, "NATS_AUTH_FAILED"), String(refusedBare)).toBe(true);
    expect(refusedBare.message).toContain("nats://***@127.0.0.1");
    expect(shown(refusedBare)).not.toContain("wrong-61ad");
    const deadBare = await connectError(`kova:dead-70e2@127.0.0.1:${await freePort()}`);
    expect(isKovaError(deadBare, "NATS_UNREACHABLE"), String(deadBare)).toBe(true);
    expect(deadBare.message).toMatch(/nats:\/\/\*\*\*@127\.0\.0\.1:\d+/);
    expect(shown(deadBare)).not.toContain("dead-70e2");
    // …and the right password there connects: it reached the connection options.
    expect(await connects(`kova:pw-5d2e@${bare}`)).toBe(true);
  });

  it.each([
    ["nats://kova:pw-77ab@", "with a scheme"],
    ["kova:pw-77ab@", "without a scheme (as nats.js takes host:port)"],
  ])("redaction - a node given credentials in NATS_URL (%s, %s) never logs them or returns them from status", async (userInfo) => {
    await using server = await startNatsServer({ allowExternal: false, extraConfig: `authorization { users = [ { user: "kova", password: "pw-77ab" } ] }` });
    const dir = await mkdtemp(join(tmpdir(), "kova-redact-"));
    const { logger, text } = capturedLogger();
    let node: KovaNode | undefined;
    try {
      const withCreds = server.url.replace("nats://", userInfo);
      const config = parseConfig(`[node]\nid = "n1"\ndata_dir = "${dir}"\n[cluster]\nname = "redact"\n[wal]\nsync = "normal"\n`, {
        env: { NATS_URL: withCreds },
      });
      node = await KovaNode.start({ config, logger, types: new ActorTypeRegistry([counterActor]) });
      const status = JSON.stringify(node.status());
      expect(status).toContain("***@127.0.0.1");
      expect(status).not.toContain("pw-77ab");
      expect(text()).toContain("connected to NATS");
      expect(text()).not.toContain("pw-77ab");
    } finally {
      await node?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
