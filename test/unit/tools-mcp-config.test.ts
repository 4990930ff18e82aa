import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { parse } from "smol-toml";
import { describe, expect, it } from "vitest";
import { ConfigError, isKovaError } from "../../src/core/errors.js";
import { Backoff } from "../../src/tools/mcp/backoff.js";
import { toolOutput } from "../../src/tools/mcp/call-result.js";
import { mcpConfigFrom, type McpHttpServerConfig, type McpStdioServerConfig } from "../../src/tools/mcp/config.js";
import { renderTemplate, templateVariables } from "../../src/tools/mcp/env-template.js";
import { McpErrorCode, McpToolError } from "../../src/tools/mcp/errors.js";
import { McpManager } from "../../src/tools/mcp/manager.js";
import { isIdempotent } from "../../src/tools/mcp/mcp-tool.js";
import { forwardLines, MAX_LINE_CHARS } from "../../src/tools/mcp/stderr-lines.js";
import { tempDir } from "../fixtures/disposable.js";

const SEED = `
[[mcp.servers]]
name = "everything"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
[[mcp.servers]]
name = "remote"
url = "https://mcp.example.com/mcp"
headers_env = { Authorization = "REMOTE_MCP_TOKEN" }
`;

function configOf(toml: string, env: NodeJS.ProcessEnv = {}) {
  return mcpConfigFrom((parse(toml) as { mcp?: unknown }).mcp, "mcp", { env, baseDir: "/srv/kova" });
}

/** The ConfigError's key, or a failure naming what was thrown instead. */
function keyOf(toml: string, env: NodeJS.ProcessEnv = {}): { key: string; message: string } {
  try {
    configOf(toml, env);
  } catch (err) {
    if (err instanceof ConfigError) return { key: err.key, message: err.message };
    throw err;
  }
  throw new Error("parsed without error");
}

describe("mcp config", () => {
  it("mcp config - loads the documented [[mcp.servers]] example as written", () => {
    const config = configOf(SEED, { REMOTE_MCP_TOKEN: "Bearer t0ken-value" });
    const [everything, remote] = config.servers as [McpStdioServerConfig, McpHttpServerConfig];
    expect(everything).toEqual({
      name: "everything",
      transport: "stdio",
      command: "npx",
      args: ["-y", "@modelcontextprotocol/server-everything"],
      env: {},
      start: "eager",
      timeoutMs: 60_000,
      idempotentTools: [],
      key: "mcp.servers[0]",
    });
    expect(remote).toEqual({
      name: "remote",
      transport: "http",
      url: "https://mcp.example.com/mcp",
      headersEnv: { Authorization: "REMOTE_MCP_TOKEN" },
      start: "eager",
      timeoutMs: 60_000,
      idempotentTools: [],
      key: "mcp.servers[1]",
    });
  });

  it("mcp config - reads env, cwd, start, timeout_ms and idempotent_tools; keeps ${VAR} templates, never the secret", () => {
    const config = configOf(
      `[[mcp.servers]]
name = "tools_1"
command = "/usr/bin/my-server"
env = { API_KEY = "\${MY_SECRET}", MODE = "demo", URL = "https://x/\${MY_SECRET}/y" }
cwd = "work"
start = "lazy"
timeout_ms = 2500
idempotent_tools = ["search", "tools_1/lookup"]`,
      { MY_SECRET: "s3cr3t-value" },
    );
    const s = config.servers[0] as McpStdioServerConfig;
    expect(s.env).toEqual({ API_KEY: "${MY_SECRET}", MODE: "demo", URL: "https://x/${MY_SECRET}/y" });
    expect(s.cwd).toBe("/srv/kova/work");
    expect(s.start).toBe("lazy");
    expect(s.timeoutMs).toBe(2500);
    expect(s.idempotentTools).toEqual(["search", "lookup"]);
    expect(JSON.stringify(config)).not.toContain("s3cr3t-value");
  });

  it("mcp config - no [mcp] table means no servers", () => {
    expect(configOf("")).toEqual({ servers: [] });
    expect(configOf("[mcp]")).toEqual({ servers: [] });
  });

  it.each([
    ["a missing name", `[[mcp.servers]]\ncommand = "x"`, {}, "mcp.servers[0].name", "is required"],
    ["a name with a dot", `[[mcp.servers]]\nname = "a.b"\ncommand = "x"`, {}, "mcp.servers[0].name", "[A-Za-z0-9_-]"],
    // <server>/<tool> must stay a valid tool name, whose server part is at most 64 characters.
    ["a name of 65 characters", `[[mcp.servers]]\nname = "${"s".repeat(65)}"\ncommand = "x"`, {}, "mcp.servers[0].name", "use 1-64 characters"],
    ["neither command nor url", `[[mcp.servers]]\nname = "a"`, {}, "mcp.servers[0]", "needs command"],
    ["both command and url", `[[mcp.servers]]\nname = "a"\ncommand = "x"\nurl = "http://h/mcp"`, {}, "mcp.servers[0]", "keep one"],
    ["a url that is not http", `[[mcp.servers]]\nname = "a"\nurl = "ftp://h/mcp"`, {}, "mcp.servers[0].url", "http(s) URL"],
    ["credentials inside the url", `[[mcp.servers]]\nname = "a"\nurl = "https://u:p@h/mcp"`, {}, "mcp.servers[0].url", "headers_env"],
    ["an unset headers_env variable", SEED, {}, "mcp.servers[1].headers_env.Authorization", "REMOTE_MCP_TOKEN is not set"],
    ["an unset ${VAR}", `[[mcp.servers]]\nname = "a"\ncommand = "x"\nenv = { API_KEY = "\${NOPE}" }`, {}, "mcp.servers[0].env.API_KEY", "NOPE is not set"],
    ["a malformed ${", `[[mcp.servers]]\nname = "a"\ncommand = "x"\nenv = { K = "\${OOPS" }`, {}, "mcp.servers[0].env.K", "closing"],
    ["a non-string env value", `[[mcp.servers]]\nname = "a"\ncommand = "x"\nenv = { K = 3 }`, {}, "mcp.servers[0].env.K", "must be a string"],
    ["a non-string arg", `[[mcp.servers]]\nname = "a"\ncommand = "x"\nargs = ["ok", 2]`, {}, "mcp.servers[0].args[1]", "must be a string"],
    ["env on an HTTP server", `[[mcp.servers]]\nname = "a"\nurl = "http://h/mcp"\nenv = { K = "v" }`, {}, "mcp.servers[0].env", "only to command"],
    [
      "headers_env on a stdio server",
      `[[mcp.servers]]\nname = "a"\ncommand = "x"\nheaders_env = { A = "B" }`,
      { B: "1" },
      "mcp.servers[0].headers_env",
      "only to url",
    ],
    ["a bad start mode", `[[mcp.servers]]\nname = "a"\ncommand = "x"\nstart = "later"`, {}, "mcp.servers[0].start", '"lazy"'],
    ["a zero timeout", `[[mcp.servers]]\nname = "a"\ncommand = "x"\ntimeout_ms = 0`, {}, "mcp.servers[0].timeout_ms", "integer from 1"],
    ["a misspelt key", `[[mcp.servers]]\nname = "a"\ncommand = "x"\ntimeoutMs = 5`, {}, "mcp.servers[0].timeoutMs", "did you mean mcp.servers[0].timeout_ms"],
    [
      "a second server with the same name",
      `[[mcp.servers]]\nname = "a"\ncommand = "x"\n[[mcp.servers]]\nname = "a"\ncommand = "y"`,
      {},
      "mcp.servers[1].name",
      "mcp.servers[0]",
    ],
    ["servers that is not an array", `[mcp]\nservers = "x"`, {}, "mcp.servers", "[[mcp.servers]]"],
  ])("mcp config - refuses %s, naming the key as written", (_what, toml, env, key, hint) => {
    const err = keyOf(toml, env as NodeJS.ProcessEnv);
    expect(err.key).toBe(key);
    expect(err.message).toContain(hint);
  });

  it("mcp env template - renders every ${VAR} and names the first missing one", () => {
    expect(templateVariables("a-${X}-${Y_2}", "mcp.servers[0].env.A")).toEqual(["X", "Y_2"]);
    expect(
      renderTemplate("a-${X}-${Y_2}", { X: "1", Y_2: "" }, () => {
        throw new Error("none missing");
      }),
    ).toBe("a-1-");
    expect(() =>
      renderTemplate("${X}${Z}", { X: "1" }, (name) => {
        throw new Error(`missing ${name}`);
      }),
    ).toThrow("missing Z");
    expect(() => templateVariables("${1X}", "mcp.servers[0].env.A")).toThrow("mcp.servers[0].env.A: ${1X} is not a variable reference");
  });
});

describe("mcp sandbox config", () => {
  const PATH = "/usr/local/bin:/usr/bin:/bin";
  // sh: a command every host has on the sandbox's PATH (/usr/bin or /bin), so these parse anywhere.
  const stdio = (extra: string) => `[[mcp.servers]]\nname = "fs"\ncommand = "sh"\n${extra}`;

  it("mcp sandbox config - sandbox = true with ro_binds and rw_binds finds bwrap (and setpriv on a root node)", () => {
    const [server] = configOf(stdio('sandbox = true\nro_binds = ["/opt/mcp"]\nrw_binds = ["/srv/files"]\ncwd = "/srv/files/work"'), { PATH }).servers as [
      McpStdioServerConfig,
    ];
    expect(server.sandbox).toMatchObject({ bwrapPath: expect.stringMatching(/\/bwrap$/), roBinds: ["/opt/mcp"], rwBinds: ["/srv/files"] });
    expect(server.sandbox!.setprivPath !== undefined).toBe(process.getuid?.() === 0);
    expect((configOf(stdio("sandbox = false")).servers[0] as McpStdioServerConfig).sandbox).toBeUndefined();
  });

  it("mcp sandbox config - each mistake is a ConfigError naming its key", () => {
    expect(keyOf(stdio('sandbox = "yes"'), { PATH })).toEqual({
      key: "mcp.servers[0].sandbox",
      message: 'mcp.servers[0].sandbox: must be true (run the server in the bubblewrap sandbox shell_exec uses) or false, not "yes"',
    });
    expect(keyOf(stdio('ro_binds = ["/opt/mcp"]'), { PATH })).toMatchObject({
      key: "mcp.servers[0].ro_binds",
      message: expect.stringContaining("only with sandbox = true"),
    });
    expect(keyOf(stdio('sandbox = false\nrw_binds = ["/srv"]'), { PATH }).key).toBe("mcp.servers[0].rw_binds");
    expect(keyOf(stdio('sandbox = true\nrw_binds = ["srv/files"]'), { PATH }).key).toBe("mcp.servers[0].rw_binds[0]");
    expect(keyOf(stdio('sandbox = true\nro_binds = ["/opt", "/etc"]'), { PATH })).toMatchObject({
      key: "mcp.servers[0].ro_binds[1]",
      message: expect.stringContaining("never shown to the sandbox"),
    });
    expect(keyOf(stdio('sandbox = true\nrw_binds = "/srv"'), { PATH }).message).toContain('rw_binds = ["/opt/tools"]');
    expect(keyOf(stdio('sandbox = true\nrw_binds = ["/srv/files"]\ncwd = "/srv/other"'), { PATH })).toMatchObject({
      key: "mcp.servers[0].cwd",
      message: expect.stringContaining("not visible in the sandbox"),
    });
    expect(keyOf(stdio("sandbox = true"), { PATH: "/nonexistent" })).toMatchObject({
      key: "mcp.servers[0].sandbox",
      message: expect.stringContaining("apt-get install bubblewrap"),
    });
    expect(keyOf('[[mcp.servers]]\nname = "r"\nurl = "https://mcp.example.com/mcp"\nsandbox = true', { PATH })).toMatchObject({
      key: "mcp.servers[0].sandbox",
      message: expect.stringContaining("only to command (stdio) servers"),
    });
  });
});

describe("mcp sandbox config: the command", () => {
  const PATH = "/usr/local/bin:/usr/bin:/bin";
  /** A first, unsandboxed server, so that the sandboxed one is mcp.servers[1]. */
  const boxed = (command: string, extra = "") =>
    `[[mcp.servers]]\nname = "plain"\ncommand = "sh"\n[[mcp.servers]]\nname = "boxed"\ncommand = ${JSON.stringify(command)}\nsandbox = true\n${extra}`;
  const binds = (...dirs: string[]) => `ro_binds = ${JSON.stringify(dirs)}`;

  it("mcp sandbox config - a command the sandbox cannot see is a ConfigError naming mcp.servers[i].command and the directory to bind", async () => {
    await using dir = await tempDir("kova-mcp-cmd-");
    const bin = join(dir.path, "bin");
    const links = join(dir.path, "links");
    mkdirSync(bin);
    mkdirSync(links);
    const tool = join(bin, "kova-test-tool");
    writeFileSync(tool, "#!/bin/sh\n");
    chmodSync(tool, 0o755);
    symlinkSync(tool, join(links, "kova-test-tool"));

    // An absolute path: visible only once its directory is bound.
    expect(keyOf(boxed(tool), { PATH })).toEqual({
      key: "mcp.servers[1].command",
      message: `mcp.servers[1].command: ${tool} is not visible in the sandbox (the sandbox shows only /usr, /bin, /lib*, /sbin and the server's ro_binds and rw_binds): add its directory to ro_binds: ro_binds = ["${bin}"]`,
    });
    expect((configOf(boxed(tool, binds(bin)), { PATH }).servers[1] as McpStdioServerConfig).command).toBe(tool);
    expect(configOf(boxed(tool, `rw_binds = ["${bin}"]`), { PATH }).servers).toHaveLength(2);
    // A symlink in a bound directory whose target is not bound dangles in the sandbox.
    const link = join(links, "kova-test-tool");
    expect(keyOf(boxed(link, binds(links)), { PATH }).message).toBe(
      `mcp.servers[1].command: ${link} (a link to ${tool}) is not visible in the sandbox (the sandbox shows only /usr, /bin, /lib*, /sbin and the server's ro_binds and rw_binds): add its directory to ro_binds: ro_binds = ["${bin}"]`,
    );
    expect(configOf(boxed(link, binds(links, bin)), { PATH }).servers).toHaveLength(2);
    // A bare name is looked up on the sandbox's PATH, not the node's: found by the node only, it is refused with where the node finds it.
    expect(keyOf(boxed("kova-test-tool"), { PATH: `${bin}:${PATH}` })).toMatchObject({
      key: "mcp.servers[1].command",
      message: expect.stringContaining(`though the node finds it at ${tool}: set command = "${tool}" and add its directory to ro_binds: ro_binds = ["${bin}"]`),
    });
    // … the server's own env.PATH is the sandbox's PATH: there, with the directory bound, it is found.
    expect(configOf(boxed("kova-test-tool", `${binds(bin)}\nenv = { PATH = "${bin}:/usr/bin:/bin" }`), { PATH }).servers).toHaveLength(2);
    expect(keyOf(boxed("kova-test-tool", `env = { PATH = "${bin}:/usr/bin:/bin" }`), { PATH }).key).toBe("mcp.servers[1].command");
    expect(keyOf(boxed("kova-no-such-program"), { PATH }).message).toMatch(
      /^mcp\.servers\[1\]\.command: "kova-no-such-program" is not found on the sandbox's PATH \(\/usr\/local\/bin:\/usr\/bin:\/bin:\/usr\/sbin:\/sbin; .*\): install it there, or give its absolute path and add its directory to ro_binds$/,
    );
    // A relative path would be taken from the fresh /work; from a bound cwd it is found.
    expect(keyOf(boxed("./kova-test-tool"), { PATH }).message).toContain("from the sandbox's fresh, empty /work");
    expect(configOf(boxed("./kova-test-tool", `${binds(bin)}\ncwd = "${bin}"`), { PATH }).servers).toHaveLength(2);
    // Under /root (or /home) the directory cannot be bound: the message says to install it elsewhere.
    expect(keyOf(boxed("/root/.nvm/versions/node/v24/bin/node"), { PATH }).message).toContain(
      "its directory /root/.nvm/versions/node/v24/bin may hold secrets and cannot be bound: install the program elsewhere",
    );
    // The system directories need no bind.
    expect(configOf(boxed("/bin/sh"), { PATH }).servers).toHaveLength(2);
  });

  it("mcp sandbox config - a bind is judged by where it really leads: a symlink to /root is refused", async () => {
    await using dir = await tempDir("kova-mcp-bind-");
    symlinkSync("/root", join(dir.path, "innocent"));
    expect(keyOf(boxed("/bin/sh", `rw_binds = ["${join(dir.path, "innocent", "data")}"]`), { PATH })).toMatchObject({
      key: "mcp.servers[1].rw_binds[0]",
      message: expect.stringContaining("leads through a symlink to /root/data, which may hold secrets"),
    });
  });
});

describe("mcp result mapping", () => {
  it("mcp result - joins text, keeps structuredContent, summarises images and resources with MIME type and size", () => {
    const png = Buffer.alloc(70, 7).toString("base64");
    const out = toolOutput("s/t", {
      content: [
        { type: "text", text: "first" },
        { type: "image", data: png, mimeType: "image/png" },
        { type: "text", text: "second" },
        { type: "resource", resource: { uri: "file:///a.gz", mimeType: "application/gzip", blob: Buffer.alloc(10).toString("base64") } },
        { type: "resource", resource: { uri: "mem://note", text: "héllo" } },
        { type: "resource_link", uri: "file:///big.bin", name: "big.bin", mimeType: "application/octet-stream", size: 4096 },
      ],
      structuredContent: { n: 1 },
    });
    expect(out).toEqual({
      text: "first\nsecond",
      structuredContent: { n: 1 },
      attachments: [
        { type: "image", mimeType: "image/png", bytes: 70 },
        { type: "resource", uri: "file:///a.gz", mimeType: "application/gzip", bytes: 10 },
        { type: "resource", uri: "mem://note", bytes: 6 },
        { type: "resource_link", uri: "file:///big.bin", name: "big.bin", mimeType: "application/octet-stream", bytes: 4096 },
      ],
    });
  });

  it("mcp result - drops text that only repeats structuredContent as JSON", () => {
    const out = toolOutput("s/t", { content: [{ type: "text", text: JSON.stringify({ a: [1, 2] }, null, 2) }], structuredContent: { a: [1, 2] } });
    expect(out).toEqual({ structuredContent: { a: [1, 2] } });
  });

  it("mcp result - isError becomes MCP_TOOL_ERROR carrying the mapped result", () => {
    let thrown: unknown;
    try {
      toolOutput("srv/tool", { content: [{ type: "text", text: "bad path" }], isError: true });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(McpToolError);
    const err = thrown as McpToolError;
    expect(isKovaError(err, McpErrorCode.MCP_TOOL_ERROR)).toBe(true);
    expect(err.retryable).toBe(false);
    expect(err.message).toContain("srv/tool reported an error: bad path");
    expect(err.data).toEqual({ tool: "srv/tool", result: { text: "bad path" } });
  });

  it("mcp idempotency - idempotentHint or readOnlyHint or the config list; no annotation means not idempotent", () => {
    const def = (annotations?: Record<string, boolean>) => ({ name: "t", inputSchema: { type: "object" as const }, ...(annotations ? { annotations } : {}) });
    const none = new Set<string>();
    expect(isIdempotent(def({ idempotentHint: true }), none)).toBe(true);
    expect(isIdempotent(def({ readOnlyHint: true }), none)).toBe(true);
    expect(isIdempotent(def({ readOnlyHint: false, idempotentHint: false }), none)).toBe(false);
    expect(isIdempotent(def(), none)).toBe(false);
    expect(isIdempotent(def({ idempotentHint: false }), new Set(["t"]))).toBe(true);
  });
});

describe("mcp restart backoff", () => {
  it("mcp backoff - doubles up to the cap and starts over after a healthy period", () => {
    const b = new Backoff({ initialDelayMs: 100, maxDelayMs: 1000, healthyAfterMs: 5000 });
    expect([0, 0, 0, 0, 0, 0].map(() => b.next(0))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(b.next(4999)).toBe(1000);
    expect(b.next(5000)).toBe(100);
    expect(b.failures).toBe(1);
  });
});

describe("mcp stderr lines", () => {
  it("mcp stderr - splits lines across chunks, CRLF and split multi-byte characters; caps long lines; flushes the rest at end", async () => {
    const stream = new PassThrough();
    const lines: string[] = [];
    forwardLines(stream, (l) => lines.push(l));
    const ended = new Promise((r) => stream.on("end", r));
    const euro = Buffer.from("€");
    stream.write("one\r\ntw");
    stream.write(Buffer.concat([Buffer.from("o "), euro.subarray(0, 1)]));
    stream.write(Buffer.concat([euro.subarray(1), Buffer.from("\n")]));
    stream.write("x".repeat(MAX_LINE_CHARS + 5));
    stream.end("\ntail");
    stream.resume();
    await ended;
    expect(lines).toEqual(["one", "two €", "x".repeat(MAX_LINE_CHARS), "xxxxx", "tail"]);
  });
});

describe("mcp manager without servers running", () => {
  it("mcp manager - prepare() names the unknown server and the configured ones", async () => {
    const manager = new McpManager(configOf(`[[mcp.servers]]\nname = "known"\ncommand = "x"\nstart = "lazy"`));
    await expect(manager.prepare(["file_read", "mcp:unknown/*"])).rejects.toMatchObject({
      code: McpErrorCode.MCP_UNKNOWN_SERVER,
      message: expect.stringContaining("configured: known"),
    });
    expect(manager.status()).toMatchObject([{ name: "known", state: "idle", tools: 0 }]);
    expect(manager.list()).toEqual([]);
    await manager.close();
    expect(manager.status()[0]!.state).toBe("closed");
  });
});
