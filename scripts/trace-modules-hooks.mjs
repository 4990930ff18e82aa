// The hooks scripts/trace-modules.mjs registers: each ES module's URL, appended as it loads.
import { appendFileSync } from "node:fs";

let file;

export function initialize(data) {
  file = data.file;
}

export async function load(url, context, nextLoad) {
  if (url.startsWith("file:")) appendFileSync(file, `${url}\n`);
  return nextLoad(url, context);
}
