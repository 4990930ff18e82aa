#!/usr/bin/env node
// Measures the feature levels of docs/api.md ("Feature levels") from dist/ (run `npm run
// build` first): for each level, the median time of `await import(…)` of its subpaths in a
// fresh `node` (several runs), the packages it loads and their installed size (each loaded
// package's folder under node_modules, du-style, plus Kova's own files loaded from dist/).
//   node scripts/feature-levels.mjs [--runs 7]
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(import.meta.dirname, "..");
const runsArg = process.argv.indexOf("--runs");
const runs = runsArg > 0 ? Number(process.argv[runsArg + 1]) : 7;

// Each level adds subpaths to the one before (the layer map, docs/architecture.md).
const LEVELS = [
  { name: "minimal: core + wal + bus", adds: ["kova/core", "kova/wal", "kova/bus"] },
  { name: "+ actors", adds: ["kova/actors"] },
  { name: "+ tools + agents", adds: ["kova/tools", "kova/agents"] },
  { name: "+ workflow", adds: ["kova/workflow"] },
  { name: "+ swarm + eval", adds: ["kova/swarm", "kova/eval"] },
  { name: "+ cluster + node (a whole node)", adds: ["kova/cluster", "kova/node"] },
  { name: "+ gateway", adds: ["kova/gateway"] },
];

const node = (args, env = {}) => execFileSync(process.execPath, args, { cwd: root, env: { ...process.env, ...env }, encoding: "utf8" });

function duBytes(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.size;
  let n = 0;
  for (const name of readdirSync(path)) n += duBytes(join(path, name));
  return n;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const tmp = mkdtempSync(join(tmpdir(), "kova-levels-"));
const rows = [];
const specs = [];
try {
  const imports = LEVELS.map((level) => {
    specs.push(...level.adds);
    return specs.map((s) => `await import(${JSON.stringify(s)});`).join(" ");
  });
  // Runs interleave the levels, so a change in the machine's load falls on all of them alike.
  const times = LEVELS.map(() => []);
  for (let i = 0; i < runs; i++) {
    for (const [l, code] of imports.entries()) {
      times[l].push(Number(node(["--input-type=module", "-e", `const t = performance.now(); ${code} console.log(performance.now() - t);`]).trim()));
    }
  }
  for (const [l, level] of LEVELS.entries()) {
    const trace = join(tmp, `trace-${l}.txt`);
    node(["--import", "./scripts/trace-modules.mjs", "--input-type=module", "-e", imports[l]], { KOVA_TRACE_MODULES: trace });
    const packages = new Map();
    let ownBytes = 0;
    for (const url of new Set(readFileSync(trace, "utf8").split("\n").filter(Boolean))) {
      const path = fileURLToPath(url);
      const m = /^(.*\/node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(path);
      if (m) packages.set(m[1], m[1].slice(m[1].lastIndexOf("node_modules/") + "node_modules/".length));
      else if (path.startsWith(join(root, "dist"))) ownBytes += statSync(path).size;
    }
    let bytes = ownBytes;
    for (const dir of packages.keys()) bytes += duBytes(dir);
    rows.push({ level: level.name, importMs: median(times[l]), packages: packages.size, mb: bytes / 1e6, names: [...new Set(packages.values())].sort() });
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}

// The packages a level adds, named when Kova depends on them itself (the rest are theirs).
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const direct = new Set(Object.keys({ ...pkg.dependencies, ...pkg.devDependencies }));
console.log(`| level | subpaths it adds | import time (median of ${runs} runs) | packages loaded | installed size of what it loads |`);
console.log("| --- | --- | --- | --- | --- |");
let prev = new Set();
for (const [i, r] of rows.entries()) {
  const added = r.names.filter((n) => !prev.has(n));
  const named = added.filter((n) => direct.has(n));
  const others = added.length - named.length;
  prev = new Set(r.names);
  const adds = [...named.map((n) => `\`${n}\``), ...(others > 0 ? [`${others} more`] : [])].join(", ") || "none";
  const subpaths = LEVELS[i].adds.map((s) => `\`${s}\``).join(", ");
  console.log(`| ${r.level} | ${subpaths} | ${Math.round(r.importMs)} ms | ${r.packages} (adds ${adds}) | ${r.mb.toFixed(1)} MB |`);
}
