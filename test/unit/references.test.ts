import { readdirSync, readFileSync, statSync } from "node:fs";
import { extname, join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The repository stands alone: its docs/ are the reference (docs/architecture.md first).
 * A comment, test name or doc that points at a document outside the repository, at a
 * tracker's issue, or at the starting design by a nickname means nothing to a reader of
 * the code, so it is written out as what it means instead. This check fails when such a
 * reference comes back.
 */
const FORBIDDEN: ReadonlyArray<{ what: string; re: RegExp }> = [
  { what: "a design document outside the repository", re: /\bDESIGN\.md\b/ },
  { what: "a folder outside the repository", re: /(?:^|[\s("'`])\.\.\/shared\b|\/work\/shared\b/ },
  { what: "a tracker issue by number", re: /\bissues? #?\d+/i },
  { what: "a tracker issue", re: /\bthe issue's\b|\b(?:in|from|see|per|by) the issue\b|\bissue tracker\b/i },
  { what: "an issue or pull request by number", re: /\((?:see )?#\d+\)|\b(?:see|PR|fixes|closes) #\d+/i },
  // "The seed" named the starting design; a random or NKey seed is another thing and stays.
  { what: "the starting design by a nickname", re: /\bseed's\b|\bseed (?:form|design|payload|example|writes|says)\b|\(the seed\)|\bin the seed\b/i },
  { what: "the task brief", re: /\bthe brief\b/i },
];

/** What is scanned: the repository's own text, wherever a reader meets it. */
const ROOTS = ["src", "test", "docs", "bench", "deploy", "scripts", "README.md", ".ci"];
const TEXT = new Set([".ts", ".mts", ".mjs", ".js", ".md", ".toml", ".yaml", ".yml", ".conf", ".service", ".sh", ".txt", ".json", ""]);
/** This file names the forms it forbids. */
const SELF = "test/unit/references.test.ts";

const repo = join(import.meta.dirname, "../..");

function* files(path: string): Generator<string> {
  if (statSync(path).isDirectory()) {
    for (const name of readdirSync(path)) if (name !== "node_modules") yield* files(join(path, name));
  } else if (TEXT.has(extname(path))) yield path;
}

function findReferences(text: string): Array<{ line: number; what: string; text: string }> {
  const out: Array<{ line: number; what: string; text: string }> = [];
  text.split("\n").forEach((line, i) => {
    for (const { what, re } of FORBIDDEN) if (re.test(line)) out.push({ line: i + 1, what, text: line.trim().slice(0, 160) });
  });
  return out;
}

describe("references", () => {
  it("references - no file in src, test, docs, bench, deploy, scripts, .ci or the README cites an outside document, a tracker issue or the starting design", () => {
    const found: string[] = [];
    let scanned = 0;
    for (const root of ROOTS) {
      for (const file of files(join(repo, root))) {
        const path = relative(repo, file);
        if (path === SELF) continue;
        scanned++;
        for (const r of findReferences(readFileSync(file, "utf8"))) found.push(`${path}:${r.line}: ${r.what}: ${r.text}`);
      }
    }
    expect(scanned).toBeGreaterThan(500);
    expect(found).toEqual([]);
  });

  it("references - the scan catches each forbidden form and passes the look-alikes the code uses", () => {
    const caught = [
      "// DESIGN.md: imports point down only",
      "see ../shared/notes for the plan",
      "read /work/shared/STYLE.md",
      "their messages wait in the mailboxes (issue 8, item 7).",
      "agents as tools (Issue #12)",
      "the issue's example file loads as written",
      "fixed upstream (#4960)",
      "the seed's form loads as written",
      "the seed form { task } is accepted",
      "as in the seed, durations are strings",
      "holds every kind of bad input the brief names",
    ];
    for (const line of caught) expect(findReferences(line), line).toHaveLength(1);
    const passed = [
      "no reply left for request #0",
      "step-journal entry #3 of actor agent-7",
      "th { font-weight: 600; color: #555; }",
      "NATS .creds file (JWT + NKey seed)",
      "nkey_seed_file",
      "@modelcontextprotocol/sdk/shared/transport.js",
      "later releases keep a compact subject tree (nats-io/nats-server#4960)",
      "the second plan request carries the issue naming the bad capability's path",
      "validation issues go back to the model",
      "random bytes from a fixed seed (xorshift32)",
      "the next call's random() followed the seed a call set",
      "DISCARD ALL alone left this: the seed survives it",
    ];
    for (const line of passed) expect(findReferences(line), line).toEqual([]);
  });
});
