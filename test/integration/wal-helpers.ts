import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A fresh temp directory per test, removed by the returned disposer. */
export function tempWalDir(label: string): { dir: string; cleanup(): void } {
  const base = mkdtempSync(join(tmpdir(), `kova-wal-${label}-`));
  return { dir: join(base, "wal"), cleanup: () => rmSync(base, { recursive: true, force: true }) };
}
