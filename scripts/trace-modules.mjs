// Records every module a process loads, for the feature-level checks (docs/api.md, "Feature
// levels"): `KOVA_TRACE_MODULES=<file> node --import ./scripts/trace-modules.mjs …` appends
// one file URL per line to <file>: each ES module as it loads (a load hook, on the hooks
// thread) and, when the process exits, each CommonJS module in the require cache (a CommonJS
// package's own require() calls do not pass the hooks on Node 20).
import { appendFileSync } from "node:fs";
import { createRequire, register } from "node:module";
import { pathToFileURL } from "node:url";

const file = process.env.KOVA_TRACE_MODULES;
if (file) {
  register("./trace-modules-hooks.mjs", import.meta.url, { data: { file } });
  const require = createRequire(import.meta.url);
  process.on("exit", () => {
    const cjs = Object.keys(require.cache).map((path) => pathToFileURL(path).href);
    if (cjs.length > 0) appendFileSync(file, `${cjs.join("\n")}\n`);
  });
}
