import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { nkeys } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { freePort, startNatsServer } from "../../src/testing/index.js";
import { tempDir } from "../fixtures/disposable.js";
import { makeOperatorSetup, operatorModeConfig } from "../fixtures/security/jwt.js";
import { startMutualTlsServer } from "../fixtures/security/pki.js";

const ROOT = join(import.meta.dirname, "../..");
const BIN = join(ROOT, "bin/kova.js");
const run = promisify(execFile);

/**
 * `kova nodes ls` with the given flags and environment. On a server without a Kova
 * cluster it fails with UNKNOWN_CLUSTER once it is connected: the positive sign that the
 * credentials reached the connection and the server took them.
 */
async function nodesLs(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stderr: string; stdout: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, "nodes", "ls", ...args], {
      env: { ...process.env, KOVA_LOG_LEVEL: "warn", NATS_URL: "", ...env },
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : 1, stdout: e.stdout ?? "", stderr: e.stderr ?? String(err) };
  }
}

const CONNECTED = /\[UNKNOWN_CLUSTER\]/;
const REFUSED = /\[NATS_AUTH_FAILED\]/;

// Every credential flag of the CLI, each against a server that needs exactly it.
describe("kova CLI credentials", () => {
  it("cli credentials - --password-file, --token-env, --token-file, --nkey-file and --creds each reach the connection; without them the server refuses", async () => {
    expect(existsSync(join(ROOT, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    await using dir = await tempDir("kova-cli-creds-");
    const file = (name: string, text: string) => writeFile(join(dir.path, name), text, { mode: 0o600 }).then(() => join(dir.path, name));
    const user = nkeys.createUser();
    await using users = await startNatsServer({
      allowExternal: false,
      extraConfig: `authorization { users = [ { user: "kova", password: "pw-c1i" }, { nkey: "${user.getPublicKey()}" } ] }`,
    });
    const pwFile = await file("pw", "pw-c1i\n");
    expect((await nodesLs(["-s", users.url, "--user", "kova", "--password-file", pwFile])).stderr).toMatch(CONNECTED);
    expect((await nodesLs(["-s", users.url, "--nkey-file", await file("seed", `${new TextDecoder().decode(user.getSeed())}\n`)])).stderr).toMatch(CONNECTED);
    expect((await nodesLs(["-s", users.url, "--user", "kova", "--password-file", await file("bad", "wrong\n")])).stderr).toMatch(REFUSED);
    expect((await nodesLs(["-s", users.url])).stderr).toMatch(REFUSED);

    await using tokens = await startNatsServer({ allowExternal: false, extraConfig: `authorization { token: "tok-c1i" }` });
    expect((await nodesLs(["-s", tokens.url, "--token-env", "CLI_TEST_TOKEN"], { CLI_TEST_TOKEN: "tok-c1i" })).stderr).toMatch(CONNECTED);
    expect((await nodesLs(["-s", tokens.url, "--token-file", await file("token", "tok-c1i\n")])).stderr).toMatch(CONNECTED);
    expect((await nodesLs(["-s", tokens.url, "--token-env", "CLI_TEST_TOKEN"], { CLI_TEST_TOKEN: "nope" })).stderr).toMatch(REFUSED);

    const op = makeOperatorSetup();
    await using jwt = await startNatsServer({
      allowExternal: false,
      extraConfig: operatorModeConfig(op),
    });
    expect((await nodesLs(["-s", jwt.url, "--creds", await file("client.creds", op.userCreds("client"))])).stderr).toMatch(CONNECTED);
    expect((await nodesLs(["-s", jwt.url])).stderr).toMatch(REFUSED);
  }, 180_000);

  it("cli credentials - --tls-ca, --tls-cert and --tls-key reach the connection: a server that verifies client certificates takes them, and refuses a client without its certificate", async () => {
    await using tls = await startMutualTlsServer();
    const { pki, url } = tls;
    expect((await nodesLs(["-s", url, "--tls-ca", pki.ca, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey])).stderr).toMatch(CONNECTED);
    const without = await nodesLs(["-s", url, "--tls-ca", pki.ca]);
    expect(without.code).not.toBe(0);
    expect(without.stderr).not.toMatch(CONNECTED);
  }, 120_000);

  it("cli credentials - -s with user info in the URL is refused before connecting, naming --password-env / --password-file; credentials in NATS_URL never show in an error", async () => {
    await using server = await startNatsServer({ allowExternal: false, extraConfig: `authorization { users = [ { user: "kova", password: "pw-77zz" } ] }` });
    const withCreds = server.url.replace("nats://", "nats://kova:pw-77zz@");
    const flag = await nodesLs(["-s", withCreds]);
    expect(flag.code).toBe(1);
    expect(flag.stderr).toMatch(/--server: nats:\/\/\*\*\*@127\.0\.0\.1:\d+ holds credentials.*--password-env or --password-file.*\[INVALID_ARGUMENT\]/);
    expect(flag.stderr).not.toContain("pw-77zz");
    // NATS_URL may carry them (the environment is not shown by ps); it connects.
    expect((await nodesLs([], { NATS_URL: withCreds })).stderr).toMatch(CONNECTED);
    // A wrong password and a dead port: each error names the server without the secret.
    const refused = await nodesLs([], { NATS_URL: server.url.replace("nats://", "nats://kova:wrong-pw-3x@") });
    expect(refused.stderr).toMatch(REFUSED);
    expect(refused.stderr).toContain("***@127.0.0.1");
    expect(refused.stderr).not.toContain("wrong-pw-3x");
    const dead = await nodesLs([], { NATS_URL: `nats://kova:dead-pw-9q@127.0.0.1:${await freePort()}` });
    expect(dead.stderr).toMatch(/NATS unreachable at nats:\/\/\*\*\*@127\.0\.0\.1:\d+.*\[NATS_UNREACHABLE\]/);
    expect(dead.stderr).not.toContain("dead-pw-9q");
  }, 120_000);

  it("cli credentials - user info in a URL without a scheme (nats.js takes host:port as nats://) is treated the same: -s refused, NATS_URL used and never shown", async () => {
    await using server = await startNatsServer({ allowExternal: false, extraConfig: `authorization { users = [ { user: "kova", password: "pw-88yy" } ] }` });
    const bare = server.url.replace("nats://", "");
    const flag = await nodesLs(["-s", `kova:pw-88yy@${bare}`]);
    expect(flag.code).toBe(1);
    expect(flag.stderr).toMatch(/--server: nats:\/\/\*\*\*@127\.0\.0\.1:\d+ holds credentials.*\[INVALID_ARGUMENT\]/);
    expect(flag.stderr).not.toContain("pw-88yy");
    expect((await nodesLs([], { NATS_URL: `kova:pw-88yy@${bare}` })).stderr).toMatch(CONNECTED);
    const refused = await nodesLs([], { NATS_URL: `kova:wrong-pw-4k@${bare}` });
    expect(refused.stderr).toMatch(REFUSED);
    expect(refused.stderr).toContain("***@127.0.0.1");
    expect(refused.stderr).not.toContain("wrong-pw-4k");
    const dead = await nodesLs([], { NATS_URL: `kova:s3cret-pw-2m@127.0.0.1:${await freePort()}` });
    expect(dead.stderr).toMatch(/NATS unreachable at nats:\/\/\*\*\*@127\.0\.0\.1:\d+.*\[NATS_UNREACHABLE\]/);
    expect(dead.stderr).not.toContain("s3cret-pw-2m");
  }, 120_000);
});
