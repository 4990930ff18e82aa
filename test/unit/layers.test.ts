import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

// DESIGN.md: imports point down only. Rank = position in the stack; a file may import
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
  node: 7,
  gateway: 8,
  cli: 9,
  testing: 10,
};

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (path.endsWith(".ts")) yield path;
  }
}

describe("layering", () => {
  it("layers - every import in src/ points to the same or a lower layer", () => {
    const src = join(import.meta.dirname, "../../src");
    const violations: string[] = [];
    let checked = 0;
    for (const file of files(src)) {
      const layer = relative(src, file).split("/")[0]!;
      if (!(layer in RANK)) continue;
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/from\s+["'](\.{1,2}\/[^"']+)["']/g)) {
        const target = relative(src, join(file, "..", m[1]!)).split("/")[0]!;
        checked++;
        if (target in RANK && RANK[target]! > RANK[layer]!) violations.push(`${relative(src, file)} imports ${m[1]}`);
        if (layer === "wal" && target === "bus") violations.push(`${relative(src, file)}: wal must not know bus`);
        if (layer === "bus" && target === "wal") violations.push(`${relative(src, file)}: bus must not know wal`);
      }
    }
    expect(checked).toBeGreaterThan(0);
    expect(violations).toEqual([]);
  });
});
