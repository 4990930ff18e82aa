import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tempDir } from "../fixtures/disposable.js";

const root = join(import.meta.dirname, "../..");
const tsc = join(root, "node_modules/typescript/bin/tsc");
const misuse = join(root, "test/typecheck/wal-lock-misuse.ts");

function runTsc(project: string): { ok: boolean; output: string } {
  try {
    return { ok: true, output: execFileSync(process.execPath, [tsc, "--noEmit", "-p", project], { encoding: "utf8" }) };
  } catch (err) {
    return { ok: false, output: String((err as { stdout?: string }).stdout ?? err) };
  }
}

describe("wal lock order at compile time", () => {
  it("typecheck - every lock-order misuse line is a type error, and only those lines", async () => {
    const source = readFileSync(misuse, "utf8");
    const marked = source.split("\n").filter((l) => l.trim().startsWith("// @ts-expect-error")).length;
    expect(marked).toBeGreaterThanOrEqual(8);

    // 1. As written: tsc passes only if each @ts-expect-error line really is an error.
    const asWritten = runTsc(join(root, "test/typecheck/tsconfig.json"));
    expect(asWritten.output).toBe("");
    expect(asWritten.ok).toBe(true);

    // 2. Directives stripped: exactly one error per marked line (so the file cannot pass
    //    by accident, e.g. because every line fails for an unrelated reason).
    // (In the OS temp dir, not the repo: the repo's own `tsc --noEmit` must never see it.)
    await using tmp = await tempDir("kova-wal-typecheck-");
    const dir = tmp.path;
    const src = join(root, "src/");
    writeFileSync(join(dir, "wal-lock-misuse.ts"), source.replaceAll("// @ts-expect-error", "// (stripped)").replaceAll("../../src/", src));
    const base = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8")) as { compilerOptions: Record<string, unknown> };
    const compilerOptions = { ...base.compilerOptions, noEmit: true, rootDir: "/", typeRoots: [join(root, "node_modules/@types")] };
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, include: ["./*.ts"] }));
    const stripped = runTsc(join(dir, "tsconfig.json"));
    expect(stripped.ok).toBe(false);
    const errors = stripped.output.split("\n").filter((l) => /error TS\d+/.test(l));
    expect(
      errors.every((l) => l.includes("wal-lock-misuse.ts")),
      stripped.output,
    ).toBe(true);
    expect(errors.length, stripped.output).toBe(marked);
  }, 60_000);
});
