import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import * as kova from "../../src/index.js";
import * as natsCore from "@nats-io/transport-node";
import * as natsJs from "@nats-io/jetstream";
import * as natsKv from "@nats-io/kv";
import ts from "typescript";

const doc = readFileSync(join(import.meta.dirname, "../../docs/api.md"), "utf8");
const documented = new Set([...doc.matchAll(/`([A-Za-z_][A-Za-z0-9_]*)`/g)].map((m) => m[1]!));

/**
 * Every name `src/index.ts` exports, types included (a type-only export leaves no trace at
 * run time): read off its syntax tree, which names each export. An `export *` would name
 * nothing, and is what a chosen surface must not have: it is reported as such.
 */
function exportedNames(): string[] {
  const file = join(import.meta.dirname, "../../src/index.ts");
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const names: string[] = [];
  for (const statement of source.statements) {
    if (ts.isExportDeclaration(statement)) {
      const clause = statement.exportClause;
      if (clause === undefined) names.push("export * (a wildcard re-export)");
      else if (ts.isNamespaceExport(clause)) names.push(clause.name.text);
      else for (const element of clause.elements) names.push(element.name.text);
    } else if (ts.canHaveModifiers(statement) && ts.getModifiers(statement)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) {
      const name = (statement as ts.DeclarationStatement).name;
      if (name !== undefined && ts.isIdentifier(name)) names.push(name.text);
      if (ts.isVariableStatement(statement)) for (const d of statement.declarationList.declarations) if (ts.isIdentifier(d.name)) names.push(d.name.text);
    }
  }
  return names;
}

describe("public API", () => {
  it("api - every value the package exports is listed in docs/api.md", () => {
    const exported = Object.keys(kova);
    expect(exported.length).toBeGreaterThan(30);
    expect(exported.filter((name) => !documented.has(name))).toEqual([]);
  });

  it("api - every type the package exports is listed in docs/api.md too", () => {
    const names = exportedNames();
    const values = new Set(Object.keys(kova));
    const types = names.filter((name) => !values.has(name));
    // The compiler sees the values as well, and the type-only exports beside them.
    expect(names.filter((name) => values.has(name)).sort()).toEqual([...values].sort());
    expect(types).toContain("AgentTemplatePolicy");
    expect(types.length).toBeGreaterThan(30);
    expect(types.filter((name) => !documented.has(name))).toEqual([]);
  });

  it("api - no exported name, value or type, shadows an export of nats.js", () => {
    const nats = new Set([...Object.keys(natsCore), ...Object.keys(natsJs), ...Object.keys(natsKv)]);
    expect(nats.has("TimeoutError")).toBe(true); // the check below compares against real names
    expect(Object.keys(kova).filter((name) => nats.has(name))).toEqual([]);
    // nats.js's own type-only names (Msg, KV, ...) are not runtime keys: compare those by a list.
    const natsTypes = [
      "Msg",
      "MsgHdrs",
      "NatsConnection",
      "Subscription",
      "KV",
      "KvEntry",
      "JetStreamClient",
      "JetStreamManager",
      "ConsumerConfig",
      "StreamConfig",
      "PubAck",
    ];
    expect(exportedNames().filter((name) => nats.has(name) || natsTypes.includes(name))).toEqual([]);
  });

  it("api - the version comes from package.json", () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, "../../package.json"), "utf8")) as { version: string };
    expect(kova.KOVA_VERSION).toBe(pkg.version);
  });

  it("api - no file in src/ writes the version; the deploy manifests' image tags are package.json's version", () => {
    const root = join(import.meta.dirname, "../..");
    const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
    const literal = new RegExp(`["'\x60]${version.replaceAll(".", "\\.")}["'\x60]`);
    const written: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, name.name);
        if (name.isDirectory()) walk(path);
        else if (name.name.endsWith(".ts") && literal.test(readFileSync(path, "utf8"))) written.push(path.slice(root.length + 1));
      }
    };
    walk(join(root, "src"));
    expect(written).toEqual([]);
    const tags = ["deploy/docker-compose.yml", "deploy/k8s/kova.yaml", "deploy/Dockerfile", "docs/deploy.md"].flatMap((file) =>
      [...readFileSync(join(root, file), "utf8").matchAll(/\bkova:(\d+\.\d+\.\d+(?:-[\w.]+)?)/g)].map((m) => `${file}: ${m[1]}`),
    );
    expect(tags.length).toBeGreaterThanOrEqual(5);
    expect(tags.filter((t) => !t.endsWith(`: ${version}`))).toEqual([]);
  });
});
