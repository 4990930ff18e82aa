import { describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { REPO, TestCluster } from "../fixtures/node/cluster-harness.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

/** The URL a node's gateway logged it listens on: given port 0, it took a free one. */
function loggedGatewayUrl(tc: TestCluster, id: string): Promise<string> {
  return poll(
    async () => {
      for (const line of (await tc.nodeLog(id)).split("\n")) {
        try {
          const entry = JSON.parse(line) as { msg?: string; url?: string };
          if (entry.msg === "gateway listening" && entry.url) return entry.url;
        } catch {
          // not a JSON line, or one still being written
        }
      }
      return undefined;
    },
    { timeoutMs: 15_000, what: `node ${id} to log its gateway's URL` },
  );
}

describe("gateway from the CLI", () => {
  it("gateway cli - a node with [gateway] serves HTTP, keys added with kova gateway keys add work on it and on a separate kova gateway start, and rm revokes them", async () => {
    // Port 0 (the node's and the separate gateway's): a port picked here could be taken by another process before they listen.
    await using tc = await TestCluster.create({ nodes: ["n1"], actors: 1, extraToml: `[gateway]\nlisten = "127.0.0.1:0"` });
    const url = await loggedGatewayUrl(tc, "n1");
    await poll(
      () =>
        fetch(`${url}/v1/models`).then(
          (r) => r.status === 401,
          () => false,
        ),
      { timeoutMs: 15_000, what: "the node's gateway to answer (401 without a key)" },
    );

    const added = await tc.cli(["gateway", "keys", "add", "ci", "--agents", "p-0"]);
    expect(added.code, added.stderr).toBe(0);
    const key = added.stdout.trim();
    expect(key).toMatch(/^kova_[A-Za-z0-9_-]{40,}$/);
    expect(added.stderr).toContain("only time it is shown");
    // An operator's key with quotas: never an admin unless asked (ci above is none).
    const ops = await tc.cli(["gateway", "keys", "add", "ops", "--admin", "--max-instances", "3", "--tokens-per-minute", "5000", "--json"]);
    expect(ops.code, ops.stderr).toBe(0);
    expect(JSON.parse(ops.stdout)).toMatchObject({
      name: "ops",
      id: expect.stringMatching(/^[0-9a-f]{20}$/),
      admin: true,
      maxInstances: 3,
      tokensPerMinute: 5000,
    });
    const badQuota = await tc.cli(["gateway", "keys", "add", "bad", "--max-concurrent-runs", "0"]);
    expect(badQuota.code).not.toBe(0);
    expect(badQuota.stderr).toContain("--max-concurrent-runs");
    const ls = await tc.cli(["gateway", "keys", "ls", "--json"]);
    const listed = JSON.parse(ls.stdout) as Array<{ name: string; id: string; admin?: boolean }>;
    expect(listed.find((k) => k.name === "ci")).toMatchObject({ name: "ci", agents: ["p-0"], id: expect.stringMatching(/^[0-9a-f]{20}$/) });
    expect(listed.find((k) => k.name === "ci")?.admin).toBeUndefined();
    expect(listed.find((k) => k.name === "ops")).toMatchObject({ admin: true, id: JSON.parse(ops.stdout).id });
    expect(ls.stdout).not.toContain("sha256");

    const auth = { authorization: `Bearer ${key}` };
    const models = await poll(
      async () => {
        const r = await fetch(`${url}/v1/models`, { headers: auth });
        return r.status === 200 ? ((await r.json()) as { data: Array<{ id: string }> }) : undefined;
      },
      { timeoutMs: 10_000, what: "the new key to be accepted" },
    );
    expect(models.data.map((m) => m.id)).toEqual(["p-0"]);
    // a plain actor (the probe) answers too: its reply is the content
    const chat = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ model: "p-0", messages: [{ role: "user", content: "count" }] }),
    });
    expect(chat.status).toBe(200);
    expect(((await chat.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content).toBe('{"count":1}');

    // a separate gateway process for the same cluster accepts the same key
    const child = spawn(process.execPath, [join(REPO, "bin/kova.js"), "gateway", "start", "--config", tc.configPath("n1"), "--listen", "127.0.0.1:0"], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, KOVA_LOG_LEVEL: "warn" },
    });
    await using _child = defer(() => child.kill("SIGKILL"));
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const url2 = await poll(() => /listening on (http:\/\/\S+)/.exec(out)?.[1], {
      timeoutMs: 15_000,
      what: () => `kova gateway start to listen (output: ${out})`,
    });
    expect((await fetch(`${url2}/v1/models`, { headers: auth })).status).toBe(200);
    expect((await fetch(`${url2}/v1/models`)).status).toBe(401);

    const rm = await tc.cli(["gateway", "keys", "rm", "ci"]);
    expect(rm.code, rm.stderr).toBe(0);
    await poll(
      async () => (await fetch(`${url2}/v1/models`, { headers: auth })).status === 401 && (await fetch(`${url}/v1/models`, { headers: auth })).status === 401,
      {
        timeoutMs: 10_000,
        what: "both gateways to refuse the removed key",
      },
    );
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
  }, 90_000);
  it("gateway cli - a node whose [gateway] cannot listen (the address is taken) leaves the cluster and exits 1 with an error naming gateway.listen", async () => {
    await using tc = await TestCluster.create({ nodes: ["n1"], actors: 1, extraToml: `[gateway]\nlisten = "127.0.0.1:0"` });
    const taken = new URL(await loggedGatewayUrl(tc, "n1")).host;
    const config = (await readFile(tc.configPath("n1"), "utf8"))
      .replace('id = "n1"', 'id = "n2"')
      .replace(/data_dir = "([^"]*)n1"/, 'data_dir = "$1n2"')
      .replace('listen = "127.0.0.1:0"', `listen = "${taken}"`);
    const path = tc.configPath("n2");
    await writeFile(path, config);
    const run = await tc.cli(["node", "start", "--config", path]);
    expect(run.code, run.stderr).toBe(1);
    expect(run.stderr).toContain("gateway.listen");
    expect(run.stderr).toContain(`${taken} is already in use`);
    // It joined before its gateway failed: it left again, and n1 still hosts the actor.
    const nodes = await tc.cli(["nodes", "ls", "--json"]);
    expect((JSON.parse(nodes.stdout) as Array<{ id: string }>).map((n) => n.id)).toEqual(["n1"]);
    expect((await tc.agents()).get("p-0")?.node).toBe("n1");
  }, 60_000);
});
