#!/usr/bin/env node
import { main } from "../dist/node/cli/main.js";

main(process.argv).catch((err) => {
  process.stderr.write(`kova: ${err?.message ?? err}\n`);
  process.exit(1);
});
