import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * docs/ are the reference (docs/architecture.md names the test that proves each guarantee):
 * a file they cite that was renamed or removed leaves the reader at a dead end. Every
 * repository path with an extension that README.md or a page of docs/ names must exist
 * (a `src/….js` import path names its `.ts` source).
 */
const PATH = /\b(?:src|test|bench|deploy|scripts)\/[A-Za-z0-9_./-]+\.(?:ts|mts|mjs|js|json|toml|ya?ml|conf|txt|service|sh)\b/g;
const repo = join(import.meta.dirname, "../..");

function cited(text: string): string[] {
  return [...new Set(text.match(PATH) ?? [])];
}

function exists(path: string): boolean {
  return existsSync(join(repo, path)) || (path.startsWith("src/") && path.endsWith(".js") && existsSync(join(repo, path.replace(/\.js$/, ".ts"))));
}

describe("docs cite files that exist", () => {
  it("docs - every repository file README.md and docs/*.md name exists", () => {
    const pages = [
      "README.md",
      ...readdirSync(join(repo, "docs"), { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(".md"))
        .map((f) => `docs/${f}`),
    ];
    const missing: string[] = [];
    let count = 0;
    for (const page of pages) {
      for (const path of cited(readFileSync(join(repo, page), "utf8"))) {
        count++;
        if (!exists(path)) missing.push(`${page}: ${path}`);
      }
    }
    expect(count).toBeGreaterThan(100);
    expect(missing).toEqual([]);
  });

  it("docs - the scan reads paths in prose, tables and code, and maps an import's .js to its .ts", () => {
    expect(cited("see `test/unit/layers.test.ts` and src/wal/wal.ts, deploy/nats/cluster-n1.conf.")).toEqual([
      "test/unit/layers.test.ts",
      "src/wal/wal.ts",
      "deploy/nats/cluster-n1.conf",
    ]);
    expect(exists("src/core/ids.js")).toBe(true);
    expect(exists("test/unit/no-such.test.ts")).toBe(false);
  });
});
