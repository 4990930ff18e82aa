import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isKovaError, type KovaError, toWire } from "../../src/core/errors.js";
import { MAX_ATTACHMENTS, type McpToolOutput } from "../../src/tools/mcp/call-result.js";
import { mcpConfigFrom } from "../../src/tools/mcp/config.js";
import { McpErrorCode } from "../../src/tools/mcp/errors.js";
import { McpManager, type McpManagerOptions } from "../../src/tools/mcp/manager.js";
import {
  captureLogs,
  DYNAMIC,
  EVERYTHING,
  EverythingHttp,
  FAST_RESTART,
  FILESYSTEM,
  isAlive,
  toolContext,
  toolNamed,
  toolsWhen,
  waitGone,
} from "../fixtures/mcp/helpers.js";
import { type SandboxStage, sandboxStage } from "../fixtures/mcp/sandbox-stage.js";
import { poll } from "../fixtures/poll.js";

/** A started manager for these `[[mcp.servers]]` entries (as parsed TOML), closed by `await using`. */
async function startManager(servers: Record<string, unknown>[], opts: McpManagerOptions & { env?: NodeJS.ProcessEnv } = {}): Promise<McpManager> {
  const env = opts.env ?? process.env;
  const manager = new McpManager(mcpConfigFrom({ servers }, "mcp", { env }), { restart: FAST_RESTART, ...opts, env });
  await manager.start();
  return manager;
}

const everything = { name: "everything", command: process.execPath, args: [EVERYTHING, "stdio"] };
const dynamic = (env: Record<string, string> = {}, extra: Record<string, unknown> = {}) => ({
  name: "fixture",
  command: process.execPath,
  args: [DYNAMIC],
  env,
  ...extra,
});

/** Host pids of processes whose command line holds `script` (a server run inside a sandbox has a pid of its own there). */
function serverProcesses(script: string): number[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return readFileSync(`/proc/${d}/cmdline`, "utf8").includes(script);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** The error a promise rejects with (fails the test if it resolves). */
async function failure(p: Promise<unknown>): Promise<KovaError> {
  const outcome = await p.then(
    (v) => ({ ok: true as const, v }),
    (e: unknown) => ({ ok: false as const, e }),
  );
  if (outcome.ok) throw new Error(`expected a failure, got ${JSON.stringify(outcome.v)}`);
  if (!isKovaError(outcome.e)) throw outcome.e;
  return outcome.e;
}

describe("mcp over stdio: server-everything", () => {
  let manager: McpManager;
  beforeAll(async () => {
    manager = await startManager([everything]);
  });
  afterAll(async () => {
    await manager.close();
  });

  it("mcp stdio - lists server-everything's tools as everything/<tool> with schemas, descriptions and idempotency from annotations", async () => {
    expect(manager.status()[0]).toMatchObject({ name: "everything", state: "ready", transport: "stdio", restarts: 0 });
    const echo = toolNamed(manager, "everything/echo");
    expect(echo.description).toBe("Echoes back the input string");
    expect(echo.parameters).toMatchObject({ type: "object", properties: { message: { type: "string" } }, required: ["message"] });
    expect(echo.idempotent).toBe(true); // idempotentHint + readOnlyHint
    expect(toolNamed(manager, "everything/gzip-file-as-resource").idempotent).toBe(true); // idempotentHint alone
    expect(toolNamed(manager, "everything/toggle-simulated-logging").idempotent).toBe(false); // both hints false
    // Registered after initialization (then announced with list_changed); it needs task-based calls.
    const status = await poll(() => manager.status()[0]!.skippedTools.length > 0 && manager.status()[0]!, {
      timeoutMs: 5000,
      what: "the task-only tool to be listed",
    });
    expect(status.skippedTools).toEqual([{ name: "simulate-research-query", reason: expect.stringContaining("task-based") }]);
    expect(manager.list().every((t) => t.name.startsWith("everything/"))).toBe(true);
  });

  it("mcp stdio - echo and get-sum return the server's text to the model", async () => {
    expect(await toolNamed(manager, "everything/echo").run({ message: "hello kova" }, toolContext())).toEqual({ text: "Echo: hello kova" });
    const sum = (await toolNamed(manager, "everything/get-sum").run({ a: 2, b: 40 }, toolContext())) as { text: string };
    expect(sum.text).toContain("is 42");
  });

  it("mcp stdio - a tool's isError result becomes MCP_TOOL_ERROR with its text for the model", async () => {
    const err = await failure(Promise.resolve(toolNamed(manager, "everything/get-sum").run({ a: "two", b: 3 }, toolContext())));
    expect(err.code).toBe(McpErrorCode.MCP_TOOL_ERROR);
    expect(err.retryable).toBe(false);
    expect(err.message).toContain("everything/get-sum reported an error");
    expect((err.data as { result: { text: string } }).result.text).toMatch(/Input validation error/);
  });

  it("mcp stdio - images and resources are summarised by MIME type and size; structured content is kept", async () => {
    const image = (await toolNamed(manager, "everything/get-tiny-image").run({}, toolContext())) as { text: string; attachments: unknown[] };
    expect(image.text).toBe("Here's the image you requested:\nThe image above is the MCP logo.");
    expect(image.attachments).toEqual([{ type: "image", mimeType: "image/png", bytes: expect.any(Number) }]);
    expect((image.attachments[0] as { bytes: number }).bytes).toBeGreaterThan(100);

    const data = `data:text/plain;base64,${Buffer.from("kova ".repeat(200)).toString("base64")}`;
    const gz = (await toolNamed(manager, "everything/gzip-file-as-resource").run({ name: "k.txt.gz", data, outputType: "resource" }, toolContext())) as {
      attachments: unknown[];
    };
    expect(gz.attachments).toEqual([{ type: "resource", uri: expect.stringContaining("k.txt.gz"), mimeType: "application/gzip", bytes: expect.any(Number) }]);
    const bytes = (gz.attachments[0] as { bytes: number }).bytes;
    expect(bytes).toBeGreaterThan(10);
    expect(bytes).toBeLessThan(1000); // 1,000 repetitive bytes gzip small: the size is of the blob, not its base64

    const weather = await toolNamed(manager, "everything/get-structured-content").run({ location: "Chicago" }, toolContext());
    expect(weather).toEqual({ structuredContent: { temperature: 36, conditions: "Light rain / drizzle", humidity: 82 } });
  });

  it("mcp stdio - a long-running call is cancelled when the caller's signal aborts, and the server keeps serving", async () => {
    const abort = new AbortController();
    const started = performance.now();
    const call = toolNamed(manager, "everything/trigger-long-running-operation").run({ duration: 30, steps: 30 }, toolContext({ signal: abort.signal }));
    setTimeout(() => abort.abort(new Error("interrupted by the test")), 200);
    const err = await failure(Promise.resolve(call));
    expect(err.code).toBe(McpErrorCode.MCP_CALL_ABORTED);
    expect(performance.now() - started).toBeLessThan(5000);
    expect(await toolNamed(manager, "everything/echo").run({ message: "still here" }, toolContext())).toEqual({ text: "Echo: still here" });
  });

  it("mcp stdio - an already-passed deadline fails the call as a timeout before anything is sent", async () => {
    const err = await failure(Promise.resolve(toolNamed(manager, "everything/echo").run({ message: "x" }, toolContext({ deadline: Date.now() - 1 }))));
    expect(err.code).toBe(McpErrorCode.MCP_CALL_TIMEOUT);
    expect(err.message).toContain("deadline passed");
  });
});

describe("mcp over stdio: the fixture server", () => {
  it("mcp stdio - a 1 MB result (and a 1 MB error) is capped at max_result_bytes before it leaves the tool", async () => {
    await using manager = await startManager([dynamic({})], { maxResultBytes: 4096 });
    const big = toolNamed(manager, "fixture/big");
    const out = (await big.run({ bytes: 1_000_000, images: 100 }, toolContext())) as McpToolOutput;
    // What the registry would serialize, journal and send: bounded by the cap, not the server.
    expect(Buffer.byteLength(JSON.stringify(out))).toBeLessThan(3 * 4096);
    expect(Buffer.byteLength(out.text!)).toBeLessThanOrEqual(4096);
    expect(out.text).toMatch(/^T+\n\[… truncated by Kova: showing the first \d+ of 1000000 bytes\]$/);
    expect(out.structuredContent).toMatch(/^\{"data":"S+\n\[… truncated by Kova: showing the first \d+ of 1000011 bytes\]$/);
    expect(out.attachments).toHaveLength(MAX_ATTACHMENTS);
    expect(out.moreAttachments).toBe(100 - MAX_ATTACHMENTS);
    // An error's data is journaled with the step: capped the same way.
    const err = await failure(Promise.resolve(big.run({ bytes: 1_000_000, error: true }, toolContext())));
    expect(err.code).toBe(McpErrorCode.MCP_TOOL_ERROR);
    expect(Buffer.byteLength(JSON.stringify(toWire(err)))).toBeLessThan(4 * 4096);
    // A small result passes untouched.
    expect(await big.run({ bytes: 3 }, toolContext())).toEqual({ text: "TTT", structuredContent: { data: "SSS" } });
  });

  it("mcp stdio - a call past timeout_ms fails with MCP_CALL_TIMEOUT naming the key, and the server is told to cancel", async () => {
    const logs = captureLogs();
    await using manager = await startManager([dynamic({}, { timeout_ms: 300 })], { logger: logs.logger });
    const started = performance.now();
    const err = await failure(Promise.resolve(toolNamed(manager, "fixture/slow").run({ ms: 20_000 }, toolContext())));
    const elapsed = performance.now() - started;
    expect(err.code).toBe(McpErrorCode.MCP_CALL_TIMEOUT);
    expect(err.retryable).toBe(true);
    expect(err.message).toContain("mcp.servers[0].timeout_ms");
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(5000);
    // The server logs the cancellation it received on stderr, which reaches the node log.
    await poll(() => logs.text().includes("slow call cancelled"), { timeoutMs: 5000, what: "the server's cancellation line in the log" });
  });

  it("mcp stdio - a call whose caller aborts once the server runs it fails MCP_CALL_ABORTED, and the server is told to cancel", async () => {
    const logs = captureLogs();
    await using manager = await startManager([dynamic({})], { logger: logs.logger });
    const abort = new AbortController();
    const call = toolNamed(manager, "fixture/slow").run({ ms: 20_000 }, toolContext({ signal: abort.signal }));
    const settled = failure(Promise.resolve(call));
    await poll(() => logs.text().includes("slow call started"), { timeoutMs: 10_000, what: "the server to start the slow call" });
    abort.abort(new Error("interrupted by the test"));
    const err = await settled;
    expect(err.code).toBe(McpErrorCode.MCP_CALL_ABORTED);
    await poll(() => logs.text().includes("slow call cancelled"), { timeoutMs: 5000, what: "the server's cancellation line in the log" });
    expect(await toolNamed(manager, "fixture/slow").run({ ms: 1 }, toolContext())).toEqual({ text: "waited 1 ms" });
  });

  it("mcp stdio - lists every page of a paginated tools/list", async () => {
    await using manager = await startManager([dynamic({ FIXTURE_PAGE_SIZE: "3", FIXTURE_EXTRA_TOOLS: "10" })]);
    const names = manager.list().map((t) => t.name);
    expect(names).toHaveLength(16);
    expect(names).toEqual(
      expect.arrayContaining(["fixture/report-env", "fixture/add-tool", "fixture/slow", "fixture/plain", "fixture/filler-0", "fixture/filler-9"]),
    );
    expect(toolNamed(manager, "fixture/plain").idempotent).toBe(false); // no annotations: unknown means not idempotent
  });

  it("mcp stdio - notifications/tools/list_changed re-lists the tools and tells the registry", async () => {
    await using manager = await startManager([dynamic({ FIXTURE_PAGE_SIZE: "2" })]);
    expect(manager.list().some((t) => t.name === "fixture/late")).toBe(false);
    const changed = toolsWhen(manager, (tools) => tools.some((t) => t.name === "fixture/late"));
    expect(await toolNamed(manager, "fixture/add-tool").run({ name: "late" }, toolContext())).toEqual({ text: "added late" });
    const tools = await changed;
    expect(tools).toHaveLength(7);
    const late = toolNamed(manager, "fixture/late");
    expect(late.idempotent).toBe(true);
    expect(await late.run({}, toolContext())).toEqual({ text: "late" });
  });

  it("mcp stdio - idempotent_tools overrides the server's annotations", async () => {
    await using manager = await startManager([dynamic({}, { idempotent_tools: ["plain", "fixture/slow"] })]);
    expect(toolNamed(manager, "fixture/plain").idempotent).toBe(true);
    expect(toolNamed(manager, "fixture/slow").idempotent).toBe(true);
    expect(toolNamed(manager, "fixture/add-tool").idempotent).toBe(false);
  });

  it("mcp stdio - a tool whose inputSchema does not compile is not offered: skipped at listing with a warning naming server, tool and the schema error; the server's other tools are offered", async () => {
    const logs = captureLogs();
    await using manager = await startManager([dynamic({ FIXTURE_BAD_SCHEMAS: "1" })], { logger: logs.logger });
    const names = manager.list().map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(["fixture/plain", "fixture/slow"]));
    expect(names).not.toContain("fixture/bad-type");
    expect(names).not.toContain("fixture/bad-ref");
    const skipped = Object.fromEntries(manager.status()[0]!.skippedTools.map((s) => [s.name, s.reason]));
    expect(Object.keys(skipped).sort()).toEqual(["bad-ref", "bad-type"]);
    expect(skipped["bad-type"]).toMatch(/^inputSchema is not a valid JSON Schema: .*type/);
    expect(skipped["bad-ref"]).toMatch(/^inputSchema is not a valid JSON Schema: .*#\/definitions\/missing/);
    const warnings = logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "tool not offered");
    expect(warnings).toHaveLength(2);
    for (const w of warnings) {
      expect(w).toMatchObject({ level: 40, server: "fixture", tool: expect.stringMatching(/^bad-(type|ref)$/) });
      expect(w.reason).toBe(skipped[w.tool as string]);
    }
  });

  it("mcp stdio - ${VAR} env values reach the server from the node's environment and never reach the log", async () => {
    const secret = `sk-${Math.random().toString(36).slice(2)}-kova`;
    const logs = captureLogs();
    const env = { ...process.env, MCP_FIXTURE_SECRET: secret, NOT_FORWARDED: "parent-only" };
    await using manager = await startManager(
      [dynamic({ API_TOKEN: "${MCP_FIXTURE_SECRET}", WRAPPED: "pre-${MCP_FIXTURE_SECRET}-post", MODE: "plain", FIXTURE_STDERR_VAR: "API_TOKEN" })],
      { logger: logs.logger, env },
    );
    const out = await toolNamed(manager, "fixture/report-env").run(
      { names: ["API_TOKEN", "WRAPPED", "MODE", "NOT_FORWARDED", "MCP_FIXTURE_SECRET"] },
      toolContext(),
    );
    expect(out).toEqual({
      structuredContent: { API_TOKEN: secret, WRAPPED: `pre-${secret}-post`, MODE: "plain", NOT_FORWARDED: null, MCP_FIXTURE_SECRET: null },
    });
    // The server printed the secret on stderr at start; the node log has that line, redacted.
    await poll(() => logs.text().includes("fixture server ready"), { timeoutMs: 5000, what: "the server's stderr in the log" });
    expect(logs.text()).toContain("starting with API_TOKEN=[redacted]");
    expect(logs.text()).toContain('"server":"fixture"');
    expect(logs.text()).not.toContain(secret);
    expect(JSON.stringify(manager.status())).not.toContain(secret);
  });

  it("mcp stdio - a server killed with SIGKILL fails calls fast while down, is restarted with backoff, and the next call works", async () => {
    const logs = captureLogs();
    // The first restart waits 1.5 s, so that a call made meanwhile shows it does not wait for it.
    await using manager = await startManager([dynamic()], { logger: logs.logger, restart: { ...FAST_RESTART, initialDelayMs: 1500 } });
    const before = manager.status()[0]!;
    expect(before.pid).toBeGreaterThan(0);
    const slow = toolNamed(manager, "fixture/slow");

    // A call in flight when the process dies: its outcome is unknown; not retryable (not idempotent).
    const inFlight = Promise.resolve(slow.run({ ms: 30_000 }, toolContext()));
    await poll(() => logs.text().includes("fixture server ready"), { timeoutMs: 5000, what: "the server to be up" });
    process.kill(before.pid!, "SIGKILL");
    const lost = await failure(inFlight);
    expect(lost.code).toBe(McpErrorCode.MCP_CONNECTION_LOST);
    expect(lost.retryable).toBe(false);

    const down = await poll(() => manager.status()[0]!.state === "restarting" && manager.status()[0]!, {
      timeoutMs: 5000,
      what: "the restart to be scheduled",
    });
    expect(down.lastError).toContain("exited");
    const unavailable = await failure(Promise.resolve(toolNamed(manager, "fixture/plain").run({}, toolContext())));
    expect(manager.status()[0]!.state).toBe("restarting"); // answered before the restart, not after it
    expect(unavailable.code).toBe(McpErrorCode.MCP_SERVER_UNAVAILABLE);
    expect(unavailable.retryable).toBe(true);
    expect(manager.list().map((t) => t.name)).toContain("fixture/plain"); // names stay while it restarts

    const up = await poll(() => manager.status()[0]!.state === "ready" && manager.status()[0]!, { timeoutMs: 10_000, what: "the server to be restarted" });
    expect(up.restarts).toBe(1);
    expect(up.pid).not.toBe(before.pid);
    expect(await toolNamed(manager, "fixture/plain").run({}, toolContext())).toEqual({ text: "plain" });
    expect(logs.text()).toContain("MCP server down; restarting it after the delay");
  });

  it("mcp stdio - a command that cannot start leaves the server restarting with the reason; calls fail fast", async () => {
    await using manager = await startManager([{ name: "broken", command: join(tmpdir(), "no-such-mcp-server-binary") }]);
    const s = manager.status()[0]!;
    expect(s.state).toBe("restarting");
    expect(s.lastError).toContain("ENOENT");
    expect(s.nextAttemptAt).toBeGreaterThan(Date.now() - 1000);
    const started = performance.now();
    await expect(manager.server("broken")!.callTool("x", {}, toolContext(), false)).rejects.toMatchObject({
      code: McpErrorCode.MCP_SERVER_UNAVAILABLE,
      retryable: true,
    });
    expect(performance.now() - started).toBeLessThan(20_000); // not the 60 s call timeout
    expect(manager.status()[0]!.state).toBe("restarting");
  });

  it("mcp stdio - a lazy server starts at first use (prepare with an agent's patterns), not with the node", async () => {
    await using manager = await startManager([dynamic({}, { start: "lazy" })]);
    expect(manager.status()[0]).toMatchObject({ state: "idle", tools: 0 });
    expect(manager.list()).toEqual([]);
    const listed = toolsWhen(manager, (tools) => tools.length > 0);
    await manager.prepare(["file_read", "mcp:fixture/*"]);
    expect((await listed).map((t) => t.name)).toContain("fixture/report-env");
    expect(manager.status()[0]!.state).toBe("ready");
  });

  it("mcp stdio - close() stops every server process (no orphans) and later calls fail with MCP_SERVER_CLOSED", async () => {
    const manager = await startManager([everything, dynamic()]);
    const pids = manager.status().map((s) => s.pid!);
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(isAlive(pid)).toBe(true);
    const fixture = toolNamed(manager, "fixture/plain");
    await manager.close();
    for (const pid of pids) await waitGone(pid);
    expect(manager.status().map((s) => s.state)).toEqual(["closed", "closed"]);
    await expect(Promise.resolve(fixture.run({}, toolContext()))).rejects.toMatchObject({ code: McpErrorCode.MCP_SERVER_CLOSED });
  });
});

describe("mcp over stdio: server-filesystem", () => {
  it("mcp stdio - server-filesystem rooted in a temp dir reads a file the test wrote and refuses one outside", async () => {
    const root = mkdtempSync(join(tmpdir(), "kova-mcp-fs-"));
    writeFileSync(join(root, "note.txt"), "written by the test\nsecond line\n");
    await using manager = await startManager([{ name: "fs", command: process.execPath, args: [FILESYSTEM, root] }]);
    const read = toolNamed(manager, "fs/read_text_file");
    expect(read.idempotent).toBe(true);
    const out = (await read.run({ path: join(root, "note.txt") }, toolContext())) as { text: string; structuredContent: { content: string } };
    expect(out.structuredContent.content).toBe("written by the test\nsecond line\n");
    expect(out.text).toBe(out.structuredContent.content);
    const err = await failure(Promise.resolve(read.run({ path: "/etc/hostname" }, toolContext())));
    expect(err.code).toBe(McpErrorCode.MCP_TOOL_ERROR);
    expect(err.message).toMatch(/outside allowed directories|Access denied/);
  });
});

describe("mcp over stdio: sandbox = true", () => {
  /**
   * A host layout for the sandbox: a secret and a world-writable directory it must not reach,
   * a directory bound read-write and one bound read-only. The directories are open to
   * uid 65534, which a root node's sandbox runs as.
   */
  function hostLayout() {
    const base = mkdtempSync(join(tmpdir(), "kova-mcp-box-"));
    chmodSync(base, 0o755);
    const dirs = { secret: join(base, "secret"), out: join(base, "out"), shared: join(base, "shared"), ro: join(base, "ro") };
    for (const d of Object.values(dirs)) mkdirSync(d, { mode: 0o777 });
    for (const d of Object.values(dirs)) chmodSync(d, 0o777);
    const secretText = `SECRET-${Math.random()}`;
    writeFileSync(join(dirs.secret, "secret.txt"), secretText);
    writeFileSync(join(dirs.ro, "readme.txt"), "read me");
    return { base, ...dirs, secretText, [Symbol.dispose]: () => rmSync(base, { recursive: true, force: true }) };
  }
  // The servers' code and Node, copied where the sandbox's user can reach them and a bind may show them.
  let stage: SandboxStage;
  beforeAll(() => {
    stage = sandboxStage(["@modelcontextprotocol/server-filesystem"], [DYNAMIC]);
  });
  afterAll(() => stage[Symbol.dispose]());

  it("mcp stdio sandbox - the server runs as uid 65534 on a root node, in /work, with the sandbox's environment plus its own env only", async () => {
    const env = { ...process.env, KOVA_TEST_MCP_KEY: "k-123456", LOGNAME: "root", SHELL: "/bin/bash", TERM: "xterm" };
    const script = stage.at(DYNAMIC);
    const fixture = { ...dynamic({ API_KEY: "${KOVA_TEST_MCP_KEY}" }), command: stage.node, args: [script], sandbox: true, ro_binds: [stage.dir] };
    await using manager = await startManager([fixture], { env });
    expect(manager.status()[0], JSON.stringify(manager.status()[0])).toMatchObject({ state: "ready" });
    const who = (await toolNamed(manager, "fixture/report-process").run({}, toolContext())) as McpToolOutput;
    const id = process.getuid?.() === 0 ? 65534 : process.getuid?.();
    expect(who.structuredContent).toEqual({ uid: id, gid: process.getuid?.() === 0 ? 65534 : process.getgid?.(), cwd: "/work" });
    const names = ["HOME", "USER", "PATH", "LOGNAME", "SHELL", "TERM", "API_KEY", "KOVA_TEST_MCP_KEY"];
    const seen = (await toolNamed(manager, "fixture/report-env").run({ names }, toolContext())) as McpToolOutput;
    expect(seen.structuredContent).toEqual({
      HOME: "/work",
      USER: "sandbox",
      PATH: "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
      LOGNAME: null,
      SHELL: null,
      TERM: null,
      API_KEY: "k-123456",
      KOVA_TEST_MCP_KEY: null,
    });
    // Closing it ends bwrap (host pid) and with it the sandboxed server (--die-with-parent).
    const pid = manager.status()[0]!.pid!;
    const inside = serverProcesses(script);
    expect(inside.length).toBeGreaterThan(0);
    await manager.close();
    await waitGone(pid);
    await poll(() => inside.every((p) => !isAlive(p)), { timeoutMs: 6000, what: "the sandboxed server process to exit" });
  });

  it("mcp stdio sandbox - server-filesystem allowed everything reads and writes only what is bound; unsandboxed the same calls reach the host", async () => {
    using host = hostLayout();
    // The sandbox's user must reach the server's code, as it must on a real node.
    const server = stage.at(FILESYSTEM);
    const unreadable = execFileSync("setpriv", [
      "--reuid=65534",
      "--regid=65534",
      "--clear-groups",
      "--",
      "/bin/sh",
      "-c",
      `test -r ${JSON.stringify(server)} || echo no`,
    ]);
    expect(unreadable.toString(), `uid 65534 (the sandbox's user) cannot read ${server}`).toBe("");
    // "/" as the server's allowed directory: the server itself refuses nothing, so every refusal below is the sandbox's.
    const fs = { name: "fs", command: stage.node, args: [server, "/"] };
    await using boxed = await startManager([{ ...fs, sandbox: true, ro_binds: [stage.dir, host.ro], rw_binds: [host.shared] }]);
    expect(boxed.status()[0], JSON.stringify(boxed.status()[0])).toMatchObject({ state: "ready" });
    const call = (m: McpManager, tool: string, args: Record<string, unknown>) => Promise.resolve(toolNamed(m, `fs/${tool}`).run(args, toolContext()));

    // Read: the bound directory yes; the secret, /etc/passwd and /root no.
    expect(((await call(boxed, "read_text_file", { path: join(host.ro, "readme.txt") })) as { text: string }).text).toBe("read me");
    for (const path of [join(host.secret, "secret.txt"), "/etc/passwd", "/root"]) {
      const err = await failure(call(boxed, "read_text_file", { path }));
      expect(err.code, path).toBe(McpErrorCode.MCP_TOOL_ERROR);
      expect(err.message).not.toContain(host.secretText);
    }
    // Write: the rw bind yes; a world-writable host directory outside the binds, and the ro bind, no.
    await call(boxed, "write_file", { path: join(host.shared, "ok.txt"), content: "from the sandbox" });
    expect(readFileSync(join(host.shared, "ok.txt"), "utf8")).toBe("from the sandbox");
    for (const path of [join(host.out, "pwned.txt"), join(host.ro, "pwned.txt")]) {
      expect((await failure(call(boxed, "write_file", { path, content: "pwned" }))).code, path).toBe(McpErrorCode.MCP_TOOL_ERROR);
      expect(existsSync(path), path).toBe(false);
    }
    // The binds' parent exists in the sandbox only as a directory of its own /tmp (a tmpfs):
    // a write there succeeds and never reaches the host.
    await call(boxed, "write_file", { path: join(host.base, "pwned.txt"), content: "pwned" });
    expect(existsSync(join(host.base, "pwned.txt"))).toBe(false);
    // What the server sees of the host: the allow-list, not the host's root.
    const listing = ((await call(boxed, "list_directory", { path: "/" })) as { text: string }).text;
    expect(listing).toContain("[DIR] usr");
    for (const hidden of ["root", "home", "var", "srv", "opt"]) expect(listing).not.toContain(`[DIR] ${hidden}\n`);

    // The control: the same server and calls without the sandbox reach the host.
    await using open = await startManager([fs]);
    expect(((await call(open, "read_text_file", { path: join(host.secret, "secret.txt") })) as { text: string }).text).toBe(host.secretText);
    await call(open, "write_file", { path: join(host.out, "reached.txt"), content: "x" });
    expect(existsSync(join(host.out, "reached.txt"))).toBe(true);
  });
});

describe("mcp over streamable HTTP", () => {
  it("mcp http - server-everything over streamable HTTP lists and calls tools", async () => {
    await using http = await EverythingHttp.start();
    await using manager = await startManager([{ name: "remote", url: http.url }]);
    expect(manager.status()[0]).toMatchObject({ state: "ready", transport: "http", url: http.url });
    expect(toolNamed(manager, "remote/echo").idempotent).toBe(true);
    expect(await toolNamed(manager, "remote/echo").run({ message: "over http" }, toolContext())).toEqual({ text: "Echo: over http" });
    const sum = (await toolNamed(manager, "remote/get-sum").run({ a: 1, b: 2 }, toolContext())) as { text: string };
    expect(sum.text).toContain("is 3");
  });

  it("mcp http - a server that went away fails calls with MCP_SERVER_UNAVAILABLE, and is reconnected when it is back", async () => {
    await using http = await EverythingHttp.start();
    await using manager = await startManager([{ name: "remote", url: http.url }]);
    await http.kill();
    const err = await failure(Promise.resolve(toolNamed(manager, "remote/echo").run({ message: "x" }, toolContext())));
    expect(err.code).toBe(McpErrorCode.MCP_SERVER_UNAVAILABLE);
    expect(err.retryable).toBe(true);
    expect(manager.status()[0]!.state).not.toBe("ready");
    await http.launch();
    await poll(() => manager.status()[0]!.state === "ready", { timeoutMs: 10_000, what: "the HTTP server to be reconnected" });
    expect(await toolNamed(manager, "remote/echo").run({ message: "back" }, toolContext())).toEqual({ text: "Echo: back" });
  });

  describe("headers_env", () => {
    let server: Server;
    let url: string;
    const seen: (string | undefined)[] = [];
    beforeAll(async () => {
      // A stateless MCP endpoint that wants a bearer token, in this process.
      server = createServer((req, res) => {
        seen.push(req.headers.authorization);
        if (req.headers.authorization !== "Bearer right-token") {
          res.writeHead(401).end();
          return;
        }
        const mcp = new McpServer({ name: "auth-check", version: "1.0.0" });
        mcp.registerTool("whoami", { description: "Says who the caller is" }, async () => ({ content: [{ type: "text", text: "an authorised caller" }] }));
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
        res.on("close", () => void mcp.close());
        void mcp.connect(transport).then(() => transport.handleRequest(req, res));
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      url = `http://127.0.0.1:${(server.address() as { port: number }).port}/mcp`;
    });
    afterAll(async () => {
      await new Promise((resolve) => server.close(resolve));
    });

    it("mcp http - headers_env sends the header's value from the named environment variable", async () => {
      await using manager = await startManager([{ name: "auth", url, headers_env: { Authorization: "KOVA_TEST_MCP_TOKEN" } }], {
        env: { KOVA_TEST_MCP_TOKEN: "Bearer right-token" },
      });
      expect(await toolNamed(manager, "auth/whoami").run({}, toolContext())).toEqual({ text: "an authorised caller" });
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.every((h) => h === "Bearer right-token")).toBe(true);
    });

    it("mcp http - a refused token leaves the server unavailable with the HTTP status as the reason", async () => {
      await using manager = await startManager([{ name: "auth", url, headers_env: { Authorization: "KOVA_TEST_MCP_TOKEN" } }], {
        env: { KOVA_TEST_MCP_TOKEN: "Bearer wrong" },
      });
      const s = manager.status()[0]!;
      expect(s.state).toBe("restarting");
      expect(s.lastError).toContain("401");
      expect(JSON.stringify(s)).not.toContain("Bearer wrong");
    });
  });
});
