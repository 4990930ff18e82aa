#!/usr/bin/env node
import { setFlagsFromString } from "node:v8";

// A node hosts thousands of mostly idle actors: V8's default young generation (up to
// 16 MB semi-spaces) grows during a burst of actor starts and then sits resident on an
// idle node, where scavenges are rare. Small semi-spaces keep an idle node's RSS near
// its live heap; the cost is more frequent (cheap) scavenges under load. An explicit
// --max-semi-space-size on the command line or in NODE_OPTIONS wins.
const explicit = [...process.execArgv, process.env.NODE_OPTIONS ?? ""].some((a) => a.includes("--max-semi-space-size"));
if (process.argv[2] === "node" && process.argv[3] === "start" && !explicit) {
  setFlagsFromString("--max-semi-space-size=2");
}

const { main } = await import("../dist/cli/main.js");
main(process.argv).catch((err) => {
  process.stderr.write(`kova: ${err?.message ?? err}\n`);
  process.exit(1);
});
