// Runs every benchmark in this folder one after another (they must not share the CPU),
// each in its own process; `node bench/run-all.mjs wal` runs the ones whose name starts so.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const prefix = process.argv[2] ?? "";
const scripts = readdirSync(here)
  // -lib.mjs: shared code; -preload.mjs: what a benchmark's node processes import (--import)
  .filter((f) => f.endsWith(".mjs") && !f.endsWith("-lib.mjs") && !f.endsWith("-preload.mjs") && f !== "run-all.mjs" && f.startsWith(prefix))
  .sort();
let failed = 0;
for (const script of scripts) {
  process.stdout.write(`\n=== ${script} ===\n`);
  const r = spawnSync(process.execPath, [join(here, script)], { stdio: "inherit" });
  if (r.status !== 0) failed++;
}
process.exit(failed === 0 ? 0 : 1);
