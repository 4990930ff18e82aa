import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createFileTools, fileConfigFrom } from "../../src/tools/builtin/file.js";
import type { Tool } from "../../src/tools/types.js";
import { defer } from "../fixtures/disposable.js";
import { callTool } from "../fixtures/tool-call.js";

/**
 * Swaps `<root>/d` between a real directory and a symlink to `outside`, as fast as it can,
 * until killed: rename the directory away (a fresh name each time, so a directory the tool
 * created meanwhile never blocks the loop), plant the symlink, remove it, rename the
 * directory back. Every step may fail when a write got in between; the loop goes on.
 */
const SWAPPER = `
const fs = require("node:fs");
const [root, outside] = process.argv.slice(1);
const d = root + "/d";
let swaps = 0;
process.on("SIGTERM", () => { process.stdout.write(String(swaps)); process.exit(0); });
const batch = () => {
  for (let n = 0; n < 256; n++) {
    const away = root + "/d.away." + swaps++;
    try { fs.renameSync(d, away); } catch {}
    try { fs.symlinkSync(outside, d); } catch {}
    try { if (fs.lstatSync(d).isSymbolicLink()) fs.unlinkSync(d); } catch {}
    try { fs.renameSync(away, d); } catch {}
  }
  setImmediate(batch); // lets SIGTERM in
};
batch();`;

/** Every path below `dir` (links listed, not followed), with the size of regular files. */
function listing(dir: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const path = join(entry.parentPath, entry.name);
    out.set(path, entry.isFile() ? statSync(path).size : -1);
  }
  return out;
}

/** A base dir on tmpfs where there is one (the writes fsync; the race, not the disk, is under test). */
async function base(): Promise<string> {
  const shm = "/dev/shm";
  return mkdtemp(join(existsSync(shm) ? shm : tmpdir(), "kova-file-race-"));
}

async function swapping(root: string, outside: string): Promise<{ stop(): Promise<number> }> {
  const child: ChildProcess = spawn(process.execPath, ["-e", SWAPPER, root, outside], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return {
    async stop() {
      child.kill("SIGTERM");
      await exited;
      return Number(out);
    },
  };
}

describe("file tools under a swapping symlink", () => {
  it("file_write and file_read - 3,000 writes with and 3,000 without create_dirs while d/ is swapped for a symlink out of the root: nothing appears outside, no temp file is left", {
    timeout: 300_000,
  }, async () => {
    const dir = await base();
    await using _dir = defer(() => rm(dir, { recursive: true, force: true }));
    const root = join(dir, "root");
    const outside = join(dir, "outside");
    mkdirSync(join(root, "d"), { recursive: true });
    mkdirSync(outside);
    const secret = `SECRET-${Math.random()}`;
    writeFileSync(join(outside, "secret.txt"), secret);
    writeFileSync(join(root, "d", "inside.txt"), "inside");
    const outsideBefore = listing(outside);
    const [read, write] = createFileTools(fileConfigFrom({ root })) as [Tool, Tool];

    const swapper = await swapping(root, outside);
    const counts = { written: 0, refused: 0, readOk: 0, readRefused: 0 };
    const codes = new Map<string, number>();
    const leaks: string[] = [];
    const WRITES = 3000;
    const CONCURRENCY = 8;
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < 2 * WRITES; i = next++) {
        const createDirs = i >= WRITES;
        const path = createDirs ? `d/sub-${i}/f.txt` : `d/f-${i}.txt`;
        const w = await callTool(write, { path, content: `W${i}`, create_dirs: createDirs });
        if (w.status === "ok") counts.written++;
        else {
          counts.refused++;
          codes.set(w.error!.code, (codes.get(w.error!.code) ?? 0) + 1);
        }
        if (i % 4 === 0) {
          // secret.txt exists only outside; inside.txt only in the real d/.
          const r = await callTool(read, { path: i % 8 === 0 ? "d/secret.txt" : "d/inside.txt" });
          if (r.content.includes(secret)) leaks.push(`read ${i}`);
          if (r.status === "ok") counts.readOk++;
          else counts.readRefused++;
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    const swaps = await swapper.stop();
    console.log(`file race: ${swaps} swaps; ${JSON.stringify(counts)}; write errors ${JSON.stringify(Object.fromEntries(codes))}`);

    expect(leaks).toEqual([]);
    // Nothing outside the root changed: no file, no directory, no temp file.
    expect([...listing(outside)]).toEqual([...outsideBefore]);
    expect(readdirSync(dir).sort()).toEqual(["outside", "root"]);
    expect(readFileSync(join(outside, "secret.txt"), "utf8")).toBe(secret);
    // No temp file anywhere, and no empty file: every file in the root is a finished write.
    const inRoot = [...listing(root)];
    expect(inRoot.filter(([p]) => p.includes(".kova-tmp"))).toEqual([]);
    expect(inRoot.filter(([, size]) => size === 0)).toEqual([]);
    // The race was real: the swap both let writes through and made some fail.
    expect(counts.written).toBeGreaterThan(0);
    expect(counts.refused).toBeGreaterThan(0);
    expect(counts.readOk).toBeGreaterThan(0);
    expect(swaps).toBeGreaterThan(100);
  });
});
