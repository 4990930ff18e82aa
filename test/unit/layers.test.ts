import { readFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { describe, expect, it } from "vitest";
import { importedPackages, importedPaths, LAYER_RANK as RANK, sourceFiles, sourceImports } from "../../scripts/source-imports.mjs";

// docs/architecture.md, "The layer map": imports point down only. A file may import only from its
// own layer or layers of lower rank (scripts/source-imports.mjs holds the ranks). `testing`
// sits on top: it may use every layer, and nothing in production imports it.

/**
 * The package's entry points at the top of src/ (`kova`, `kova/internal`): they may
 * re-export any production layer, never `testing` (which has its own entry, `kova/testing`).
 */
const ENTRY_RANK = RANK.testing! - 1;

describe("layering", () => {
  it("layers - every import in src/ (static, dynamic, re-exports, the package entries) points to the same or a lower layer", () => {
    const src = join(import.meta.dirname, "../../src");
    const violations: string[] = [];
    const checkedEntries = new Set<string>();
    let checked = 0;
    for (const { from, fromLayer, spec, targetLayer } of sourceImports(src)) {
      const isEntry = fromLayer === "";
      if (!isEntry && !(fromLayer in RANK)) continue;
      const rank = isEntry ? ENTRY_RANK : RANK[fromLayer]!;
      checked++;
      if (isEntry) checkedEntries.add(from);
      if (targetLayer in RANK && RANK[targetLayer]! > rank) violations.push(`${from} imports ${spec}`);
      if (fromLayer === "wal" && targetLayer === "bus") violations.push(`${from}: wal must not know bus`);
      if (fromLayer === "bus" && targetLayer === "wal") violations.push(`${from}: bus must not know wal`);
    }
    expect(checked).toBeGreaterThan(500);
    expect([...checkedEntries].sort()).toEqual(["index.ts", "internal.ts"]);
    expect(violations).toEqual([]);
  });

  it("layers - one door per layer: an import from another layer names that layer's src/<layer>/index.ts; a layer's own files import each other, never their own index", () => {
    // test/ and bench/ are not held to this: a test of a layer's internals imports its files.
    const src = join(import.meta.dirname, "../../src");
    const pastTheDoor: string[] = [];
    const ownDoor: string[] = [];
    let throughDoor = 0;
    for (const { from, fromLayer, spec, target, targetLayer } of sourceImports(src)) {
      if (fromLayer === "" || targetLayer === "") continue;
      const door = `${targetLayer}/index.js`;
      if (fromLayer !== targetLayer) {
        if (target === door) throughDoor++;
        else pastTheDoor.push(`${from} imports ${spec}`);
      } else if (target === door && from !== `${fromLayer}/index.ts`) ownDoor.push(`${from} imports ${spec}`);
    }
    expect(throughDoor).toBeGreaterThan(300);
    expect(pastTheDoor).toEqual([]);
    expect(ownDoor).toEqual([]);
  });

  it("layers - NATS is reached through the bus and cluster layers: no other file imports @nats-io/* (testing may, to start servers)", () => {
    const src = join(import.meta.dirname, "../../src");
    const NATS_LAYERS = ["bus", "cluster", "testing"];
    const outside: string[] = [];
    let natsFiles = 0;
    for (const file of sourceFiles(src)) {
      const path = relative(src, file).split(sep).join("/");
      if (!importedPackages(readFileSync(file, "utf8")).some((p) => p.startsWith("@nats-io/"))) continue;
      natsFiles++;
      if (!NATS_LAYERS.includes(path.split("/")[0]!)) outside.push(path);
    }
    expect(natsFiles).toBeGreaterThan(10);
    expect(outside).toEqual([]);
  });

  it("layers - the import scan sees every form of import, and only relative ones", () => {
    const text = [
      `import { a } from "../bus/a.js";`,
      `import type { B } from "./b.js";`,
      `export { c } from '../actors/c.js';`,
      `export * as d from "./d/index.js";`,
      `import "../node/side-effect.js";`,
      `const { e } = await import("../tools/mcp/e.js");`,
      "const f = () => import(`./f.js`);",
      `let g: Awaited<ReturnType<typeof import("./g.js").start>>;`,
      `import { connect } from "@nats-io/transport-node";`,
      `const h = await import("pg");`,
    ].join("\n");
    expect(importedPaths(text).sort()).toEqual(
      ["../bus/a.js", "./b.js", "../actors/c.js", "./d/index.js", "../node/side-effect.js", "../tools/mcp/e.js", "./f.js", "./g.js"].sort(),
    );
    expect(importedPackages(text).sort()).toEqual(["@nats-io/transport-node", "pg"]);
  });
});
