import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNatsServer } from "../../src/testing/index.js";
import { defer, tempDir, type TempDir } from "../fixtures/disposable.js";

// docs/api.md, "Feature levels": each layer's door is a package subpath, and a level loads
// what it stands on and nothing above it; the optional integrations load when used. Each
// check runs a child `node` that imports Kova by package name (the package refers to itself
// through its "exports", from dist/) and records every module it loads
// (scripts/trace-modules.mjs).

const ROOT = join(import.meta.dirname, "../..");
const run = promisify(execFile);

const LAYERS = ["core", "wal", "bus", "actors", "tools", "agents", "workflow", "swarm", "eval", "cluster", "node", "gateway"] as const;
/** Packages loaded only when their feature is used: the model client, the db tool, MCP, the gateway, tracing, a browser. */
const OPTIONAL = ["openai", "pg", "@modelcontextprotocol/sdk", "express", "@a2a-js/sdk", "@opentelemetry/api", "@opentelemetry/sdk-trace", "playwright-core"];

interface Loaded {
  /** Kova's layers (top folders of dist/) with a module loaded. */
  layers: Set<string>;
  /** Packages under node_modules with a module loaded. */
  packages: Set<string>;
  out: string;
}

let tmp: TempDir;
let traces = 0;

/** Runs `script` (an ES module's text) in a child node from the repository root; what it loaded. */
async function loads(script: string, env: Record<string, string> = {}): Promise<Loaded> {
  const trace = join(tmp.path, `trace-${++traces}.txt`);
  const { stdout } = await run(process.execPath, ["--import", "./scripts/trace-modules.mjs", "--input-type=module", "-e", script], {
    cwd: ROOT,
    env: { ...process.env, ...env, KOVA_TRACE_MODULES: trace },
    timeout: 120_000,
  });
  const urls = readFileSync(trace, "utf8").split("\n").filter(Boolean);
  const layers = new Set<string>();
  const packages = new Set<string>();
  for (const url of urls) {
    const pkg = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
    if (pkg) packages.add(pkg[1]!);
    else if (url.startsWith(`file://${ROOT}/dist/`)) layers.add(url.slice(`file://${ROOT}/dist/`.length).split("/")[0]!);
  }
  expect(urls.length).toBeGreaterThan(10);
  return { layers, packages, out: stdout };
}

beforeAll(async () => {
  tmp = await tempDir("kova-levels-");
});
afterAll(async () => {
  await tmp?.[Symbol.asyncDispose]();
});

describe("package subpaths and feature levels", () => {
  it("package - every layer's door is a subpath: `kova/<layer>` resolves by package name to dist/<layer>/index.js, with its types", async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { exports: Record<string, { types: string; default: string }> };
    for (const layer of LAYERS) {
      expect(pkg.exports[`./${layer}`]).toEqual({ types: `./dist/${layer}/index.d.ts`, default: `./dist/${layer}/index.js` });
      expect(existsSync(join(ROOT, "dist", layer, "index.d.ts"))).toBe(true);
    }
    const script = [
      `const out = {};`,
      `for (const layer of ${JSON.stringify(LAYERS)}) {`,
      `  const url = import.meta.resolve("kova/" + layer);`,
      `  out[layer] = { url: url.slice(url.indexOf("/dist/")), names: Object.keys(await import("kova/" + layer)).length };`,
      `}`,
      `const internal = await import("kova/internal");`,
      `out.internal = Object.keys(internal).sort();`,
      `console.log(JSON.stringify(out));`,
    ].join("\n");
    const out = JSON.parse((await loads(script)).out) as Record<string, { url: string; names: number }> & { internal: string[] };
    for (const layer of LAYERS) {
      expect(out[layer]!.url).toBe(`/dist/${layer}/index.js`);
      expect(out[layer]!.names).toBeGreaterThan(3);
    }
    // kova/internal covers every production layer (eval as `evals`: `eval` cannot be a binding).
    expect(out.internal).toEqual(["actors", "agents", "bus", "cluster", "core", "evals", "gateway", "node", "swarm", "tools", "wal", "workflow"]);
  });

  it("levels - kova/wal loads core and wal only: no NATS, no agent stack, no optional integration", async () => {
    const { layers, packages } = await loads(`const { Wal } = await import("kova/wal"); if (typeof Wal !== "function") process.exit(1);`);
    expect([...layers].sort()).toEqual(["core", "wal"]);
    expect(packages.has("lmdb")).toBe(true);
    expect([...packages].filter((p) => p.startsWith("@nats-io/"))).toEqual([]);
    expect(OPTIONAL.filter((p) => packages.has(p))).toEqual([]);
  });

  it("levels - kova/bus loads core and bus only: no WAL (no lmdb), no agent stack, no optional integration", async () => {
    const { layers, packages } = await loads(`const { Bus } = await import("kova/bus"); if (typeof Bus !== "function") process.exit(1);`);
    expect([...layers].sort()).toEqual(["bus", "core"]);
    expect(packages.has("@nats-io/jetstream")).toBe(true);
    expect(packages.has("lmdb")).toBe(false);
    expect(OPTIONAL.filter((p) => packages.has(p))).toEqual([]);
  });

  it("levels - kova/agents loads the layers below it and none above (workflow, swarm, eval, cluster, node, gateway); the model client, pg and MCP wait for first use", async () => {
    const { layers, packages } = await loads(`const { defineAgent } = await import("kova/agents"); if (typeof defineAgent !== "function") process.exit(1);`);
    expect([...layers].sort()).toEqual(["actors", "agents", "bus", "core", "tools"]);
    expect(packages.has("lmdb")).toBe(false);
    expect(OPTIONAL.filter((p) => packages.has(p))).toEqual([]);
  });

  it("levels - a node hosting one counter actor loads no gateway and no optional integration; `kova/gateway` loads express and the A2A SDK", async () => {
    {
      const nats = await startNatsServer();
      await using _nats = defer(() => nats.stop());
      const config = [
        `[node]`,
        `id = "levels"`,
        `data_dir = ${JSON.stringify(join(tmp.path, "node"))}`,
        `[cluster]`,
        `name = "levels${process.pid}"`,
        `[nats]`,
        `urls = ${JSON.stringify([nats.url])}`,
        `[[actors]]`,
        `id = "c1"`,
        `type = "counter"`,
      ].join("\n");
      const script = [
        `const { ActorTypeRegistry, KovaNode, counterActor, parseConfig } = await import("kova");`,
        `const config = parseConfig(${JSON.stringify(config)}, { env: {} });`,
        `const node = await KovaNode.start({ config, types: new ActorTypeRegistry([counterActor]) });`,
        `const status = node.status();`,
        `await node.stop("done");`,
        `console.log(JSON.stringify({ nodeId: status.nodeId, healthy: status.healthy }));`,
      ].join("\n");
      const { layers, packages, out } = await loads(script, { KOVA_LOG_LEVEL: "silent" });
      expect(JSON.parse(out.trim().split("\n").at(-1)!)).toEqual({ nodeId: "levels", healthy: true });
      expect(layers.has("node")).toBe(true);
      expect(layers.has("wal")).toBe(true);
      expect(layers.has("gateway")).toBe(false);
      expect(OPTIONAL.filter((p) => packages.has(p))).toEqual([]);
    }
    const gateway = await loads(`const { Gateway } = await import("kova/gateway"); if (typeof Gateway !== "function") process.exit(1);`);
    expect(gateway.packages.has("express")).toBe(true);
    expect(gateway.packages.has("@a2a-js/sdk")).toBe(true);
    // OpenTelemetry waits for [gateway.otel]: src/gateway/otel.ts is imported on start.
    expect(gateway.packages.has("@opentelemetry/sdk-trace")).toBe(false);
    expect(gateway.layers.has("wal")).toBe(false);
  });
});
