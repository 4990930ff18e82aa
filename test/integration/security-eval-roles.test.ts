import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { ActorTypeRegistry } from "../../src/actors/index.js";
import { createLogger, silentLogger } from "../../src/core/logger.js";
import { evalControlSubject, evalsBucket, type Comparison, type ExperimentReport, type StatusRecord } from "../../src/eval/index.js";
import { Gateway } from "../../src/gateway/gateway.js";
import { parseGatewayConfig } from "../../src/gateway/config.js";
import { generateKey, hashKey, keyPrincipal } from "../../src/gateway/keys.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { scriptedReply, startScriptedModelServer, type NatsServerHandle, type ScriptedModelServer } from "../../src/testing/index.js";
import { tempDir, type TempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";
import { connectAs, expectPermissionDenied, kovaAs, nodeTomlAs, role, startAccountsServer, type Role } from "../fixtures/security/accounts.js";

// Experiments under the roles of deploy/nats/accounts.conf as shipped (docs/evals.md,
// "Starting an experiment"; docs/security.md): an operator runs them end to end from the
// CLI (bin/kova.js, from dist/: build first), a gateway under the gateway role shows them on
// its experiments page, and a client may neither read nor start one.
const logger = () => (process.env.KOVA_TEST_LOGS ? createLogger() : silentLogger());
const keys = { admin: generateKey(), viewer: generateKey() };
const viewerId = keyPrincipal({ hash: hashKey(keys.viewer) });

let dir: TempDir;
let server: NatsServerHandle;
let model: ScriptedModelServer;
let node: KovaNode;
let gateway: Gateway;
const conns: NatsConnection[] = [];
/** The experiments the operator ran: one for itself, one for the viewer key. */
const ran = {} as { own: string; forViewer: string };

// Task qN's answer is 2N; subject "terse" (its own system prompt) gets q2 and q3 wrong. A task
// that says "slow" takes a second, so that a detached run can be cancelled while it runs.
const SPEC = (name: string, slow = false) => `subjects = [{ id = "base", agent = "helper" }, { id = "terse", agent = "helper", system = "Be terse." }]

[experiment]
name = "${name}"
concurrency = 2

${Array.from({ length: 4 }, (_, i) => `[[tasks]]\nid = "t${i}"\ninput = "q${i}: ${i} + ${i}?${slow ? " slow" : ""}"\nexpected = "${2 * i}"\n`).join("\n")}
[[verifiers]]
type = "exact"
`;

async function kova(r: Role, args: string[]): Promise<string> {
  const res = await kovaAs(server, r, args);
  expect(res.code, `kova ${args.join(" ")} as ${r}: ${res.stderr}`).toBe(0);
  return res.stdout;
}

const asKey = (key: keyof typeof keys, path: string) => fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${keys[key]}` } });

beforeAll(async () => {
  dir = await tempDir("kova-evalroles-");
  server = await startAccountsServer(dir.path);
  model = await startScriptedModelServer({
    handler: async (r) => {
      const text = String(r.lastMessage?.content ?? "");
      const i = Number(/^q(\d+)/.exec(text)?.[1] ?? 0);
      if (text.includes("slow")) await new Promise((resolve) => setTimeout(resolve, 1000));
      const wrong = r.messages[0]?.content === "Be terse." && i >= 2;
      return scriptedReply.text(String(wrong ? 2 * i + 1 : 2 * i), { usage: { inputTokens: 10, outputTokens: 2 } });
    },
  });
  node = await KovaNode.start({
    config: parseConfig(nodeTomlAs(server, join(dir.path, "node"), model.url, [`[[agents]]\nid = "helper"\nmodel = "main"`]), { env: process.env }),
    logger: logger(),
    types: new ActorTypeRegistry(),
  });
  await poll(() => node.agents().some((a) => a.id === "helper" && a.state === "Idle"), { timeoutMs: 20_000, what: "the agent hosted" });
  gateway = await Gateway.start({
    config: parseGatewayConfig({
      listen: "127.0.0.1:0",
      keys: [
        { name: "admin", hash: hashKey(keys.admin), admin: true },
        { name: "viewer", hash: hashKey(keys.viewer), agents: ["helper"] },
      ],
    }),
    servers: server.url,
    cluster: "default",
    security: role("gateway"),
    logger: logger(),
  });
  await writeFile(join(dir.path, "ab.toml"), SPEC("ab"));
  await writeFile(join(dir.path, "slow.toml"), SPEC("slow", true));
}, 60_000);

afterAll(async () => {
  for (const c of conns) await c.close().catch(() => undefined);
  await gateway?.close();
  await node?.stop();
  await model?.close();
  await server?.stop();
  await dir?.[Symbol.asyncDispose]();
});

describe("security: experiments under the roles of deploy/nats/accounts.conf", () => {
  it("operator cli - eval run ends with the report; ls, show and compare read it; a detached run for a key is cancelled and resumed to its end", async () => {
    const report = JSON.parse(await kova("operator", ["eval", "run", join(dir.path, "ab.toml"), "--json"])) as ExperimentReport;
    ran.own = report.experimentId;
    expect(report.status).toBe("completed");
    expect(report.subjects.map((s) => [s.subject, s.meanScore, s.scored])).toEqual([
      ["base", 1, 4],
      ["terse", 0.5, 4],
    ]);
    const listed = JSON.parse(await kova("operator", ["eval", "ls", "--json"])) as StatusRecord[];
    expect(listed.map((s) => [s.experimentId, s.status])).toEqual([[ran.own, "completed"]]);
    const shown = JSON.parse(await kova("operator", ["eval", "show", ran.own, "--json"])) as ExperimentReport;
    expect(shown.subjects.map((s) => s.meanScore)).toEqual([1, 0.5]);
    const compared = JSON.parse(await kova("operator", ["eval", "compare", `${ran.own}:base`, `${ran.own}:terse`, "--json"])) as Comparison;
    expect([compared.pairedTasks, compared.meanDifference, compared.worse, compared.ties]).toEqual([4, -0.5, 2, 2]);

    // Started for the viewer key: its id carries the key's owner scope.
    const detached = JSON.parse(await kova("operator", ["eval", "run", join(dir.path, "slow.toml"), "--detach", "--json", "--owner", viewerId])) as {
      experimentId: string;
    };
    ran.forViewer = detached.experimentId;
    expect(ran.forViewer).toMatch(/^o[0-9a-f]{12}_slow-[0-9a-f]{8}$/);
    expect(await kova("operator", ["eval", "cancel", ran.forViewer, "--reason", "later"])).toContain(ran.forViewer);
    await poll(async () => (JSON.parse(await kova("operator", ["eval", "show", ran.forViewer, "--json"])) as ExperimentReport).status === "cancelled", {
      timeoutMs: 20_000,
      what: "the detached experiment cancelled",
    });
    const resumed = JSON.parse(await kova("operator", ["eval", "resume", ran.forViewer, "--json"])) as ExperimentReport;
    expect(resumed.status).toBe("completed");
    expect(resumed.subjects.map((s) => [s.subject, s.meanScore, s.scored])).toEqual([
      ["base", 1, 4],
      ["terse", 0.5, 4],
    ]);
  }, 90_000);

  it("operator - writes no evals bucket key itself: the nodes store the spec (control.eval) and the experiment its records", async () => {
    const nc = await connectAs(server, "operator");
    conns.push(nc);
    await expectPermissionDenied(nc.request(`$KV.${evalsBucket("default")}.${ran.own}.status`, "{}", { timeout: 5000 }));
    await expectPermissionDenied(nc.request(`$JS.API.STREAM.PURGE.KV_${evalsBucket("default")}`, "", { timeout: 5000 }));
    await expectPermissionDenied(nc.request(`$JS.API.CONSUMER.CREATE.KV_${evalsBucket("default")}`, "{}", { timeout: 5000 }));
  });

  it("gateway role - the experiments page lists them: the admin key every one, the viewer key the one started for it; another's is 404", async () => {
    expect((await asKey("admin", "/ui/experiments")).status).toBe(200);
    const all = (await (await asKey("admin", "/ui/api/experiments")).json()) as { experiments: StatusRecord[] };
    expect(all.experiments.map((e) => e.experimentId).sort()).toEqual([ran.own, ran.forViewer].sort());
    const detail = (await (await asKey("admin", `/ui/api/experiments/${ran.own}`)).json()) as { report: ExperimentReport };
    expect(detail.report.subjects.map((s) => s.meanScore)).toEqual([1, 0.5]);

    const mine = (await (await asKey("viewer", "/ui/api/experiments")).json()) as { experiments: StatusRecord[] };
    expect(mine.experiments.map((e) => e.experimentId)).toEqual([ran.forViewer]);
    expect((await asKey("viewer", `/ui/api/experiments/${ran.forViewer}`)).status).toBe(200);
    expect((await asKey("viewer", `/ui/api/experiments/${ran.own}`)).status).toBe(404);

    const nc = await connectAs(server, "gateway");
    conns.push(nc);
    await expectPermissionDenied(nc.request(evalControlSubject("default"), JSON.stringify({ op: "spec", experimentId: "x-0123abcd" }), { timeout: 5000 }));
    await expectPermissionDenied(nc.request(`$KV.${evalsBucket("default")}.${ran.own}.status`, "{}", { timeout: 5000 }));
  });

  it("client cli - eval ls, show and run are refused (PERMISSION_DENIED naming what the role lacks); the client reads no evals bucket and stores no spec", async () => {
    for (const args of [
      ["eval", "ls"],
      ["eval", "show", ran.own],
      ["eval", "run", join(dir.path, "ab.toml")],
    ]) {
      const res = await kovaAs(server, "client", args);
      expect(res.code, `kova ${args.join(" ")}: ${res.stdout}`).not.toBe(0);
      expect(res.stderr).toContain("PERMISSION_DENIED");
    }
    const nc = await connectAs(server, "client");
    conns.push(nc);
    await expectPermissionDenied(nc.request(evalControlSubject("default"), JSON.stringify({ op: "spec", experimentId: "x-0123abcd" }), { timeout: 5000 }));
    await expectPermissionDenied(nc.request(`$JS.API.STREAM.INFO.KV_${evalsBucket("default")}`, "", { timeout: 5000 }));
    // Nothing the client tried started an experiment.
    const all = (await (await asKey("admin", "/ui/api/experiments")).json()) as { experiments: StatusRecord[] };
    expect(all.experiments).toHaveLength(2);
  }, 60_000);
});
