// Reads the import graph of src/ as the layer rules see it (docs/architecture.md, "The layer map"):
// test/unit/layers.test.ts enforces the rules with it, scripts/architecture-figures.mjs
// counts with it. Plain ESM so that both a test and `node` can load it without a build.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";

/**
 * Rank = position in the stack; a file may import only from its own layer or layers of
 * lower rank. `testing` sits on top: it may use every layer, and nothing in production
 * imports it.
 */
export const LAYER_RANK = Object.freeze({
  core: 0,
  wal: 1,
  bus: 1,
  actors: 2,
  tools: 3,
  agents: 4,
  workflow: 5,
  swarm: 6,
  eval: 7,
  cluster: 8,
  node: 9,
  gateway: 10,
  cli: 11,
  testing: 12,
});

/** Every `.ts` file under `dir`, depth first. */
export function* sourceFiles(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sourceFiles(path);
    else if (path.endsWith(".ts")) yield path;
  }
}

/**
 * Every relative module a file names: `import … from`, `export … from`, a bare
 * `import "…"`, a dynamic `import("…")` and a type's `import("…")`.
 */
export function importedPaths(text) {
  const out = [];
  for (const re of [/\bfrom\s+["'](\.{1,2}\/[^"']+)["']/g, /\bimport\s+["'](\.{1,2}\/[^"']+)["']/g, /\bimport\(\s*["'`](\.{1,2}\/[^"'`]+)["'`]\s*\)/g]) {
    for (const m of text.matchAll(re)) out.push(m[1]);
  }
  return out;
}

/** Every package a file names (`@nats-io/kv`, `pg`, `node:fs`), static or dynamic. */
export function importedPackages(text) {
  const out = [];
  for (const re of [/\bfrom\s+["']([^."'][^"']*)["']/g, /\bimport\s+["']([^."'][^"']*)["']/g, /\bimport\(\s*["'`]([^."'`][^"'`]*)["'`]\s*\)/g]) {
    for (const m of text.matchAll(re)) out.push(m[1]);
  }
  return out;
}

/**
 * Each import in src/, resolved: `from` and `target` are paths relative to src/ with `/`,
 * `fromLayer` is the importer's top folder (`""` for the package entries at the top of
 * src/), `targetLayer` the target's.
 */
export function sourceImports(srcDir) {
  const out = [];
  for (const file of sourceFiles(srcDir)) {
    const from = relative(srcDir, file).split(sep).join("/");
    const fromLayer = from.includes("/") ? from.split("/")[0] : "";
    for (const spec of importedPaths(readFileSync(file, "utf8"))) {
      const target = relative(srcDir, join(file, "..", spec))
        .split(sep)
        .join("/");
      const targetLayer = target.includes("/") ? target.split("/")[0] : "";
      out.push({ from, fromLayer, spec, target, targetLayer });
    }
  }
  return out;
}

/**
 * Imports into another layer's files: an import in a file under src/<layer>/ that resolves
 * into a different layer's folder. A file naming the same module twice counts once; the
 * package entries (src/index.ts, src/internal.ts) are the package's doors and not counted.
 */
export function crossLayerImports(srcDir) {
  const seen = new Set();
  return sourceImports(srcDir).filter((i) => {
    if (i.fromLayer === "" || i.targetLayer === "" || i.fromLayer === i.targetLayer) return false;
    const key = `${i.from}\u0000${i.target}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
