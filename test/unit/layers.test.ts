import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

// docs/architecture.md: imports point down only. Rank = position in the stack; a file may import
// only from its own layer or layers of lower rank. `testing` sits on top: it may use
// every layer, and nothing in production imports it.
const RANK: Record<string, number> = {
  core: 0,
  wal: 1,
  bus: 1,
  actors: 2,
  tools: 3,
  agents: 4,
  workflow: 5,
  swarm: 6,
  eval: 7,
  node: 8,
  gateway: 9,
  cli: 10,
  testing: 11,
};

/**
 * The package's entry points at the top of src/ (`kova`, `kova/internal`): they may
 * re-export any production layer, never `testing` (which has its own entry, `kova/testing`).
 */
const ENTRY_RANK = RANK.testing! - 1;

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (path.endsWith(".ts")) yield path;
  }
}

/**
 * Every relative module a file names: `import … from`, `export … from`, a bare
 * `import "…"`, a dynamic `import("…")` and a type's `import("…")`.
 */
function importedPaths(text: string): string[] {
  const out: string[] = [];
  for (const re of [/\bfrom\s+["'](\.{1,2}\/[^"']+)["']/g, /\bimport\s+["'](\.{1,2}\/[^"']+)["']/g, /\bimport\(\s*["'`](\.{1,2}\/[^"'`]+)["'`]\s*\)/g]) {
    for (const m of text.matchAll(re)) out.push(m[1]!);
  }
  return out;
}

describe("layering", () => {
  it("layers - every import in src/ (static, dynamic, re-exports, the package entries) points to the same or a lower layer", () => {
    const src = join(import.meta.dirname, "../../src");
    const violations: string[] = [];
    const checkedEntries = new Set<string>();
    let checked = 0;
    for (const file of files(src)) {
      const path = relative(src, file);
      const layer = path.split("/")[0]!;
      const isEntry = !path.includes("/");
      if (!isEntry && !(layer in RANK)) continue;
      const rank = isEntry ? ENTRY_RANK : RANK[layer]!;
      for (const target of importedPaths(readFileSync(file, "utf8"))) {
        const targetLayer = relative(src, join(file, "..", target)).split("/")[0]!;
        checked++;
        if (isEntry) checkedEntries.add(path);
        if (targetLayer in RANK && RANK[targetLayer]! > rank) violations.push(`${path} imports ${target}`);
        if (layer === "wal" && targetLayer === "bus") violations.push(`${path}: wal must not know bus`);
        if (layer === "bus" && targetLayer === "wal") violations.push(`${path}: bus must not know wal`);
      }
    }
    expect(checked).toBeGreaterThan(500);
    expect([...checkedEntries].sort()).toEqual(["index.ts", "internal.ts"]);
    expect(violations).toEqual([]);
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
  });
});
