import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createFileTools, fileConfigFrom } from "../../src/tools/builtin/file.js";
import { isIdempotentCall } from "../../src/tools/idempotency.js";
import type { Tool } from "../../src/tools/types.js";
import { configError } from "../fixtures/config-error.js";
import { callTool } from "../fixtures/tool-call.js";

const CORPUS = join(import.meta.dirname, "../fixtures/security/path-escapes.txt");
const REFUSED = new Set(["FILE_PATH_REFUSED", "FILE_TYPE_REFUSED"]);

/** A root and a sibling `outside` directory with a secret, in a fresh temp dir. */
async function sandbox() {
  const base = await mkdtemp(join(tmpdir(), "kova-file-"));
  const root = join(base, "root");
  const outside = join(base, "outside");
  mkdirSync(root);
  mkdirSync(outside);
  const secret = `TOP-SECRET-${Math.random()}`;
  writeFileSync(join(outside, "secret.txt"), secret);
  return {
    base,
    root,
    outside,
    secret,
    tools(extra: Record<string, unknown> = {}) {
      const [read, write] = createFileTools(fileConfigFrom({ root, ...extra }));
      return { read: read!, write: write! };
    },
    async [Symbol.asyncDispose]() {
      await rm(base, { recursive: true, force: true });
    },
  };
}

/** Lists every file below `dir` with its content (links listed, not followed). */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const path = join(entry.parentPath, entry.name);
    out[path] = entry.isFile() ? readFileSync(path, "utf8") : entry.isSymbolicLink() ? "<link>" : "<other>";
  }
  return out;
}

describe("file tools confinement", () => {
  it("file tools - refuse or contain every entry of the path-escape corpus; nothing outside the root is read or changed", async () => {
    await using box = await sandbox();
    const { root, outside } = box;
    writeFileSync(join(root, "hello.txt"), "hello");
    mkdirSync(join(root, "sub"));
    mkdirSync(join(root, "nested"));
    symlinkSync("../outside", join(root, "link-out"));
    symlinkSync(outside, join(root, "link-out-abs"));
    symlinkSync(join(outside, "secret.txt"), join(root, "link-file"));
    symlinkSync(join(outside, "new.txt"), join(root, "link-dangling"));
    symlinkSync("../../outside", join(root, "nested", "link-up"));
    symlinkSync("/etc", join(root, "link-etc"));
    symlinkSync("/dev/zero", join(root, "link-dev"));
    symlinkSync("link-loop", join(root, "link-loop"));
    symlinkSync("hello.txt", join(root, "link-in"));
    execFileSync("mkfifo", [join(root, "fifo")]);
    const sock = createServer();
    await new Promise<void>((r) => sock.listen(join(root, "socket"), r));
    let device = "character device (mknod)";
    try {
      execFileSync("mknod", [join(root, "devnull"), "c", "1", "3"], { stdio: "ignore" });
    } catch {
      device = "link to /dev/null (mknod not permitted here)";
      symlinkSync("/dev/null", join(root, "devnull"));
    }
    const outsideBefore = snapshot(outside);
    const etcPasswd = readFileSync("/etc/passwd", "utf8").split("\n")[0]!;

    const { read, write } = box.tools();
    const fill = (p: string) =>
      p
        .replaceAll("{root}", root)
        .replaceAll("{outside}", outside)
        .replaceAll("{nul}", "\0")
        .replaceAll("{long}", "a".repeat(256))
        .replaceAll("{deep}", `${"d/".repeat(2100)}f`);
    const lines: string[] = [];
    const failures: string[] = [];
    let count = 0;
    for (const raw of readFileSync(CORPUS, "utf8").split("\n")) {
      if (raw.trim() === "" || raw.startsWith("#")) continue;
      const [expect_ = "", ...rest] = raw.split(" ");
      const written = rest.join(" ");
      const path = fill(written);
      count++;
      for (const [op, tool, args] of [
        ["read", read, { path }],
        ["write", write, { path, content: `PWNED ${written}` }],
      ] as const) {
        const out = await callTool(tool as Tool, args);
        const code = out.error?.code ?? "ok";
        const leaked = out.status === "ok" && (out.content.includes(box.secret) || out.content.includes(etcPasswd));
        const ok = expect_ === "refused" ? REFUSED.has(code) : !leaked && (code === "ok" || code === "FILE_NOT_FOUND");
        lines.push(`${ok ? "ok  " : "FAIL"} ${expect_.padEnd(9)} ${op.padEnd(5)} ${code.padEnd(17)} ${JSON.stringify(written)}`);
        if (!ok || leaked) failures.push(`${op} ${JSON.stringify(written)}: ${code} ${out.content.slice(0, 200)}`);
      }
    }
    sock.close();
    console.log(
      `path corpus: ${count} entries x 2 tools, ${count * 2 - failures.length}/${count * 2} refused or contained; devnull is a ${device}\n${lines.join("\n")}`,
    );
    expect(count).toBeGreaterThanOrEqual(20);
    expect(failures).toEqual([]);
    expect(snapshot(outside)).toEqual(outsideBefore);
    // The contained writes landed inside the root, under their literal names.
    expect(readFileSync(join(root, "..%2foutside%2fsecret.txt"), "utf8")).toBe("PWNED ..%2foutside%2fsecret.txt");
    expect(readFileSync(join(root, "hello.txt"), "utf8")).toBe("PWNED link-in");
    expect(statSync(join(root, "fifo")).isFIFO()).toBe(true);
  });
});

describe("file tools inside the root", () => {
  it("file_write then file_read round-trips text and binary, creates directories on request and leaves no temp files", async () => {
    await using box = await sandbox();
    const { read, write } = box.tools();
    const text = "héllo wörld 😀\n".repeat(3);
    expect((await callTool(write, { path: "notes/a.txt", content: text })).error?.code).toBe("FILE_NOT_FOUND");
    const w = await callTool(write, { path: "notes/deeper/a.txt", content: text, create_dirs: true });
    expect(w.value).toEqual({ path: "notes/deeper/a.txt", bytes: Buffer.byteLength(text), created: true });
    const r = await callTool(read, { path: "notes/deeper/a.txt" });
    expect(r.value).toMatchObject({ content: text, encoding: "utf8", truncated: false, size: Buffer.byteLength(text) });
    const bin = Buffer.from([0, 255, 1, 254, 128]);
    await callTool(write, { path: "b.bin", content: bin.toString("base64"), encoding: "base64" });
    expect(await readFile(join(box.root, "b.bin"))).toEqual(bin);
    expect((await callTool(read, { path: "/b.bin".slice(1), encoding: "base64" })).value).toMatchObject({ content: bin.toString("base64") });
    const abs = await callTool(read, { path: join(box.root, "notes/deeper/a.txt") });
    expect(abs.value).toMatchObject({ path: "notes/deeper/a.txt" });
    expect((await readdir(join(box.root, "notes/deeper"))).sort()).toEqual(["a.txt"]);
    expect((await readdir(box.root)).sort()).toEqual(["b.bin", "notes"]);
  });

  it("file_write - mode create refuses an existing file; overwrite replaces it and keeps its permissions; idempotency follows the mode", async () => {
    await using box = await sandbox();
    const { write } = box.tools();
    await callTool(write, { path: "x.txt", content: "one", mode: "create" });
    const again = await callTool(write, { path: "x.txt", content: "two", mode: "create" });
    expect(again.error?.code).toBe("FILE_EXISTS");
    execFileSync("chmod", ["600", join(box.root, "x.txt")]);
    const over = await callTool(write, { path: "x.txt", content: "three" });
    expect(over.value).toMatchObject({ created: false, bytes: 5 });
    expect(await readFile(join(box.root, "x.txt"), "utf8")).toBe("three");
    expect(statSync(join(box.root, "x.txt")).mode & 0o777).toBe(0o600);
    expect(isIdempotentCall(write, { mode: "overwrite" })).toBe(true);
    expect(isIdempotentCall(write, { mode: "create" })).toBe(false);
  });

  it("file tools - size caps: a write over max_bytes is refused, a read returns max_bytes ending on a character boundary with next_offset", async () => {
    await using box = await sandbox();
    const { read, write } = box.tools({ max_bytes: 10 });
    const big = await callTool(write, { path: "big.txt", content: "x".repeat(11) });
    expect(big.error?.code).toBe("FILE_TOO_LARGE");
    expect(await readdir(box.root)).toEqual([]);
    await writeFile(join(box.root, "euro.txt"), "€€€€€"); // 15 bytes, 3 per character
    const first = await callTool(read, { path: "euro.txt" });
    expect(first.value).toMatchObject({ content: "€€€", bytes: 9, truncated: true, next_offset: 9, size: 15 });
    const second = await callTool(read, { path: "euro.txt", offset: 9 });
    expect(second.value).toMatchObject({ content: "€€", bytes: 6, truncated: false });
  });

  it("file_write - is atomic: concurrent reads see the old or the new content, never a mix", async () => {
    await using box = await sandbox();
    const { read, write } = box.tools({ max_bytes: 2 * 1024 * 1024 });
    const a = "A".repeat(1024 * 1024);
    const b = "B".repeat(1024 * 1024);
    await callTool(write, { path: "f.txt", content: a });
    const seen = new Set<string>();
    const reads: Promise<void>[] = [];
    for (let i = 0; i < 20; i++) {
      reads.push(
        callTool(read, { path: "f.txt" }).then((r) => {
          const content = (r.value as { content: string }).content;
          seen.add(content === a ? "A" : content === b ? "B" : `mixed(${content.length})`);
        }),
      );
      await callTool(write, { path: "f.txt", content: i % 2 === 0 ? b : a });
    }
    await Promise.all(reads);
    expect([...seen].filter((s) => s !== "A" && s !== "B")).toEqual([]);
    expect(seen.size).toBeGreaterThan(0);
    expect((await readdir(box.root)).filter((n) => n.includes("kova-tmp"))).toEqual([]);
  });

  it("file tools - a symlink that stays inside the root is followed", async () => {
    await using box = await sandbox();
    mkdirSync(join(box.root, "data"));
    await writeFile(join(box.root, "data", "v1.txt"), "inside");
    await symlink("data", join(box.root, "current"));
    const { read, write } = box.tools();
    expect((await callTool(read, { path: "current/v1.txt" })).value).toMatchObject({ content: "inside", path: "data/v1.txt" });
    await callTool(write, { path: "current/v2.txt", content: "new" });
    expect(await readFile(join(box.root, "data", "v2.txt"), "utf8")).toBe("new");
  });

  it("file config - root must exist, relative roots follow the config file, read_only offers only file_read", async () => {
    await using box = await sandbox();
    expect(configError(() => fileConfigFrom({}, "tools.file")).key).toBe("tools.file.root");
    const missing = configError(() => fileConfigFrom({ root: join(box.base, "nope") }, "tools.file"));
    expect(missing.message).toContain("mkdir -p");
    expect(configError(() => fileConfigFrom({ root: join(box.outside, "secret.txt") }, "tools.file")).key).toBe("tools.file.root");
    expect(configError(() => fileConfigFrom({ root: box.root, max_byte: 1 }, "tools.file")).message).toContain("did you mean tools.file.max_bytes?");
    expect(fileConfigFrom({ root: "root" }, "tools.file", {}, box.base).root).toBe(box.root);
    const tools = createFileTools(fileConfigFrom({ root: box.root, read_only: true }));
    expect(tools.map((t) => t.name)).toEqual(["file_read"]);
  });
});
