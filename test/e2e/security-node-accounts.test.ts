import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { KovaClient } from "../../src/bus/index.js";
import { controlRequest, spawnSubject } from "../../src/cluster/control.js";
import { tempDir } from "../fixtures/disposable.js";
import { REPO, TestCluster, type ProbeState } from "../fixtures/node/cluster-harness.js";
import { poll } from "../fixtures/poll.js";
import { connectAs, expectPermissionDenied, natsToml, role, shippedNodeNatsToml, startAccountsServer } from "../fixtures/security/accounts.js";

// test/integration/security-accounts.test.ts runs a node in the test process; here the node
// is a real `kova node start` process, configured as deploy/kova/kova-node1.toml says for a
// server with deploy/nats/accounts.conf: the node role, its password from password_env
// (the process's environment, never the file) and the other roles' reply prefixes.
describe("security: a node process under the shipped accounts", () => {
  it("accounts e2e - kova node start as the node role hosts an actor; a client sends to it, asks it (durable and fast path) and cannot spawn; an operator can", async () => {
    expect(existsSync(join(REPO, "dist/cli/main.js")), "run `npm run build` first").toBe(true);
    await using dir = await tempDir("kova-accounts-e2e-");
    // Sets KOVA_NODE_PASSWORD etc. in this process's environment, which the node process inherits.
    await using server = await startAccountsServer(dir.path);
    const shipped = await shippedNodeNatsToml();
    expect(shipped).toBe(natsToml("node"));
    await using tc = await TestCluster.create({
      nodes: ["n1"],
      actors: 1,
      secured: { server, cluster: "default", natsToml: shipped, security: role("node") },
    });
    const agent = tc.actorIds[0]!;
    expect(await tc.hostOf(agent)).toBe("n1");
    expect(await tc.nodeLog("n1")).not.toContain(role("node").password!);

    await using kc = await KovaClient.connect({ servers: server.url, security: role("client"), ensureStreams: false });
    await kc.send(agent, "task_delegate", { n: 1 });
    const reply = await kc.ask(agent, "task_delegate", { n: 2 }, { timeoutMs: 15_000 });
    expect(reply.type).toBe("result_notify");
    const state = await poll(
      async () => {
        const s = await kc.request<ProbeState>(agent, "info_request", {});
        return s.count === 2 ? s : undefined;
      },
      { timeoutMs: 15_000, retryErrors: true, what: "the send and the ask counted, read over the fast path" },
    );
    expect(state.ids).toHaveLength(2);

    await using client = await connectAs(server, "client");
    await expectPermissionDenied(controlRequest(client, spawnSubject("default"), { id: "by-client", type: "probe" }, 2000));
    // The endpoint itself works: the operator role spawns through it, and the node hosts what it spawned.
    await using operator = await connectAs(server, "operator");
    expect(await controlRequest(operator, spawnSubject("default"), { id: "by-operator", type: "probe" })).toMatchObject({ id: "by-operator", created: true });
    expect(await tc.hostOf("by-operator")).toBe("n1");
    expect((await tc.agents()).has("by-client")).toBe(false);
  }, 120_000);
});
