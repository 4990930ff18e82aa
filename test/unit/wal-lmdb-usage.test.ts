import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

// docs/wal.md "lmdb semantics relied on": durability comes from async commits plus
// `env.flushed`, never from the sync APIs (a close right after several transactionSync
// calls was seen to hang lmdb 3.5.6) and never with noSync (corruption on a crash).
const FORBIDDEN = [/\btransactionSync\b/, /\bputSync\b/, /\bremoveSync\b/, /\bnoSync\b/, /overlappingSync\s*:\s*false/, /\bcommitDelay\b/];

describe("wal lmdb usage", () => {
  it("lmdb - src/wal uses no sync write API, no noSync and keeps overlappingSync", () => {
    const dir = join(import.meta.dirname, "../../src/wal");
    const files = readdirSync(dir).filter((f) => f.endsWith(".ts"));
    expect(files.length).toBeGreaterThan(5);
    const hits: string[] = [];
    for (const f of files) {
      const code = readFileSync(join(dir, f), "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, ""); // comments may name them
      for (const re of FORBIDDEN) if (re.test(code)) hits.push(`${f}: ${re.source}`);
    }
    expect(hits).toEqual([]);
  });
});
