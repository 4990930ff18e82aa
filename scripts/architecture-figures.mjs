#!/usr/bin/env node
// Prints the figures that say how the source is shaped (docs/architecture.md, "Figures"):
//   node scripts/architecture-figures.mjs [--by-pair]
// - src lines: lines of every .ts file under src/ (what `find src -name '*.ts' | xargs wc -l` sums);
// - cross-layer imports: imports in a file under src/<layer>/ that resolve into another
//   layer's folder, each (file, module) once, the package entries not counted
//   (scripts/source-imports.mjs, crossLayerImports); also without those into core, and
//   those that go through the target layer's index.ts, and those that do not (0: one door
//   per layer, test/unit/layers.test.ts);
// - files outside src/bus/ that import @nats-io/* themselves, and those outside src/bus/,
//   src/cluster/ and src/testing/ (the only layers that may: test/unit/layers.test.ts);
// - the largest folder: the most lines in .ts files directly inside one folder.
import { readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { crossLayerImports, importedPackages, sourceFiles } from "./source-imports.mjs";

const src = join(import.meta.dirname, "..", "src");
const lines = (text) => text.split("\n").length - (text.endsWith("\n") ? 1 : 0);

let total = 0;
const byFolder = new Map();
const natsOutsideBus = [];
for (const file of sourceFiles(src)) {
  const text = readFileSync(file, "utf8");
  const n = lines(text);
  total += n;
  const folder = relative(join(src, ".."), dirname(file)).split(sep).join("/");
  byFolder.set(folder, (byFolder.get(folder) ?? 0) + n);
  const path = relative(src, file).split(sep).join("/");
  if (!path.startsWith("bus/") && importedPackages(text).some((p) => p.startsWith("@nats-io/"))) natsOutsideBus.push(path);
}

const cross = crossLayerImports(src);
const throughDoor = (i) => i.target === `${i.targetLayer}/index.ts` || i.target === `${i.targetLayer}/index.js`;
const [largest, largestLines] = [...byFolder].sort((a, b) => b[1] - a[1])[0];
const figures = {
  srcLines: total,
  crossLayerImports: cross.length,
  crossLayerImportsNotIntoCore: cross.filter((i) => i.targetLayer !== "core").length,
  crossLayerImportsThroughIndex: cross.filter(throughDoor).length,
  crossLayerImportsPastTheDoor: cross.filter((i) => !throughDoor(i)).length,
  filesOutsideBusImportingNats: natsOutsideBus.length,
  filesOutsideNatsLayersImportingNats: natsOutsideBus.filter((p) => !p.startsWith("cluster/") && !p.startsWith("testing/")).length,
  largestFolder: `${largest} (${largestLines} lines)`,
};
for (const [k, v] of Object.entries(figures)) console.log(`${k.padEnd(36)} ${v}`);

if (process.argv.includes("--by-pair")) {
  const pairs = new Map();
  for (const i of cross) pairs.set(`${i.fromLayer} -> ${i.targetLayer}`, (pairs.get(`${i.fromLayer} -> ${i.targetLayer}`) ?? 0) + 1);
  console.log("\ncross-layer imports by pair:");
  for (const [pair, n] of [...pairs].sort((a, b) => b[1] - a[1])) console.log(`  ${pair.padEnd(24)} ${n}`);
}
