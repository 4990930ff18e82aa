import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * Tests release what they open with `await using` (a Bus, a KovaClient, a nats.js
 * connection, `tempDir`, a nats-server handle) or, for anything without a dispose of its
 * own, `defer(() => x.stop())` from test/fixtures/disposable.ts: cleanup sits next to what it
 * cleans, runs in reverse order, and runs when an assertion throws. A hand-written try/finally
 * that closes in its last block does the same in more lines and comes back by habit, so this
 * check fails on a finally block whose every statement only closes, stops or removes
 * something. One that also does other work (collects a result, restores state that is not a
 * resource) is not cleanup-only and is left alone.
 */
const CLEANUP_CALL =
  "(?:close|stop|stopAll|rm|rmSync|unlink|unlinkSync|kill|dispose|cancel|abort|unsubscribe|drain|destroy|terminate|end|release|shutdown|disconnect|mockRestore|clearTimeout|clearInterval)";
const CLEANUP_STATEMENT = [
  // `await x.close()`, `x?.stop()`, `void conn.drain()`, `await rm(dir, {...})`, `await x.close().catch(() => undefined)`
  new RegExp(String.raw`^(?:await\s+|void\s+)?(?:[\w$]+(?:\??\.[\w$]+|\([^;]*?\)|\[[^\]]*\]|!)*\??\.)?${CLEANUP_CALL}\(.*\)(?:\.catch\(.*\))?$`),
  // `await server[Symbol.asyncDispose]()`
  /^(?:await\s+)?[\w$.?!]+\[Symbol\.(?:asyncDispose|dispose)\]\(\)$/,
  // `await new Promise((r) => server.close(r))`
  new RegExp(String.raw`^await\s+new\s+Promise\(\(?\w*\)?\s*=>\s*[\w$.?]+\.${CLEANUP_CALL}\(\w*\)\)$`),
];

/**
 * Cleanup-only `finally` blocks that stay, each with why. Keyed by file and a piece of the
 * block; each must match exactly one block, so an exemption cannot outlive its code.
 */
const EXEMPT: ReadonlyArray<{ file: string; block: string; why: string }> = [];

/**
 * Files another change is converting at the time this check was written: they may
 * hold at most this many cleanup-only blocks, and only fewer from then on. Remove an entry
 * once its count is 0.
 */
const PENDING: Readonly<Record<string, number>> = {
  "integration/security-credentials.test.ts": 3,
  "integration/tools-db.test.ts": 4,
};

interface Block {
  file: string;
  line: number;
  body: string;
}

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (/\.(?:ts|mts|mjs|js)$/.test(path)) yield path;
  }
}

/** The statements of a block's body: comments dropped, split at `;` and line ends outside brackets. */
function statements(body: string): string[] {
  const text = body.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/[^\n]*/g, "");
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if ("([{".includes(ch)) depth++;
    if (")]}".includes(ch)) depth--;
    if (depth === 0 && (ch === ";" || ch === "\n")) {
      if (cur.trim() !== "") out.push(cur.trim());
      cur = "";
    } else cur += ch;
  }
  if (cur.trim() !== "") out.push(cur.trim());
  return out;
}

/** Every `finally { … }` of a source text, with the line it starts on. */
function finallyBlocks(text: string): Array<{ line: number; body: string }> {
  const out: Array<{ line: number; body: string }> = [];
  for (const m of text.matchAll(/\bfinally\s*\{/g)) {
    const open = m.index + m[0].length;
    let depth = 1;
    let i = open;
    for (; i < text.length && depth > 0; i++) {
      if (text[i] === "{") depth++;
      else if (text[i] === "}") depth--;
    }
    out.push({ line: text.slice(0, m.index).split("\n").length, body: text.slice(open, i - 1) });
  }
  return out;
}

function isCleanupOnly(body: string): boolean {
  const list = statements(body);
  return list.length > 0 && list.every((s) => CLEANUP_STATEMENT.some((re) => re.test(s)));
}

/** This file: its examples are strings, not code. */
const SELF = "unit/tests-cleanup.test.ts";

function cleanupOnlyBlocks(): { blocks: Block[]; scanned: number } {
  const root = join(import.meta.dirname, "..");
  const blocks: Block[] = [];
  let scanned = 0;
  for (const path of files(root)) {
    const file = relative(root, path);
    if (file === SELF) continue;
    scanned++;
    for (const b of finallyBlocks(readFileSync(path, "utf8"))) if (isCleanupOnly(b.body)) blocks.push({ file, ...b });
  }
  return { blocks, scanned };
}

describe("tests release resources with await using", () => {
  it("cleanup - no test file has a try/finally whose finally only closes, stops or removes something (but for the exemptions listed with why)", () => {
    const { blocks, scanned } = cleanupOnlyBlocks();
    expect(scanned).toBeGreaterThan(100);
    const exempt = (b: Block) => EXEMPT.some((x) => x.file === b.file && b.body.includes(x.block));
    const offenders = blocks.filter((b) => !exempt(b) && PENDING[b.file] === undefined);
    expect(
      offenders.map((b) => `${b.file}:${b.line}: finally {${b.body.replace(/\s+/g, " ")}}`),
      "use `await using` (or `defer(() => …)` from test/fixtures/disposable.ts) instead",
    ).toEqual([]);
    for (const x of EXEMPT) expect(blocks.filter((b) => b.file === x.file && b.body.includes(x.block)).length, `exemption ${x.file}`).toBe(1);
    for (const [file, most] of Object.entries(PENDING)) expect(blocks.filter((b) => b.file === file).length, file).toBeLessThanOrEqual(most);
  });

  it("cleanup - the check tells a cleanup-only finally from one that does other work", () => {
    const cleanupOnly = [
      "await nc.close();",
      "lt.stop();",
      "a.stop();\n b.stop();",
      "await rm(dir, { recursive: true, force: true });",
      "rmSync(dir, { recursive: true, force: true });",
      "sub.unsubscribe();\n svc.stop();",
      "await node?.stop();\n await rm(dir, { recursive: true, force: true });",
      "clearTimeout(deadline);\n ac.abort();",
      "// Leaving early closes the response.\n await reader.cancel().catch(() => undefined);",
      "await t.close();\n await new Promise((r) => server.close(r));",
      "suspend.mockRestore();",
      "await server[Symbol.asyncDispose]();",
      "await tc.natsCluster!.servers[1]!.kill();",
    ];
    for (const body of cleanupOnly) expect(isCleanupOnly(body), body).toBe(true);
    const otherWork = [
      "samples = await sampler.stop();",
      "concurrent--;",
      "inFlight.set(ctx.actorId, inFlight.get(ctx.actorId) - 1);",
      "approvals.delete(run.runId);",
      "await db.end();\n delete process.env.KOVA_TEST_SHELL_SECRET;",
      "this.#inFlight--;\n this.#turn = undefined;",
      "",
    ];
    for (const body of otherWork) expect(isCleanupOnly(body), body).toBe(false);
    expect(finallyBlocks("try {\n  a();\n} finally {\n  if (x) { y.close(); }\n  z.stop();\n}\n")).toEqual([
      { line: 3, body: "\n  if (x) { y.close(); }\n  z.stop();\n" },
    ]);
  });
});
