import { dirname, isAbsolute, resolve } from "node:path";
import { describeValue, intValue, rejectUnknown, tableAt, tablesAt, type ConfigTable, ConfigError, isValidId } from "../../core/index.js";
import { isWithin, realPath } from "../builtin/host-path.js";
import { bindList, findOnPath, mayHoldSecrets } from "../builtin/shell-config.js";
import { SANDBOX_ENV, SANDBOX_WORK_DIR, visibleInSandbox } from "../builtin/shell-sandbox.js";
import { ENV_NAME, renderTemplate, templateVariables } from "./env-template.js";

/**
 * `[[mcp.servers]]` in kova.toml, parsed (documented in docs/tools.md, "MCP servers:
 * [[mcp.servers]]"). An entry as a user writes it (`name`, `command`, `args` and `env`
 * are the usual minimum):
 *
 * ```toml
 * [[mcp.servers]]
 * name = "everything"                  # tools appear as everything/<tool>; 1-64 of [A-Za-z0-9_-]
 * command = "npx"
 * args = ["-y", "@modelcontextprotocol/server-everything"]
 * env = { API_KEY = "${EVERYTHING_KEY}", MODE = "demo" }   # ${VAR}: from the node's environment
 * cwd = "./work"                       # relative to the config file
 * start = "lazy"                       # or "eager" (default): spawned when the node starts
 * timeout_ms = 30000                   # per call (default 60000)
 * idempotent_tools = ["search"]        # safe to re-run after a crash, whatever the server says
 * sandbox = true                       # run it in shell_exec's bubblewrap sandbox (stdio only)
 * ro_binds = ["/opt/mcp/node_modules"] # with sandbox: host paths it may read
 * rw_binds = ["/srv/agent-files"]      # with sandbox: host paths it may write
 *
 * [[mcp.servers]]
 * name = "remote"
 * url = "https://mcp.example.com/mcp"  # streamable HTTP
 * headers_env = { Authorization = "REMOTE_MCP_TOKEN" }   # header value from that variable
 * ```
 *
 * Secrets never sit in the parsed form: env values stay templates and headers stay variable
 * names, read from the environment when the server is started. Parsing checks that every
 * variable named is set, so a missing secret fails the node's start, not its first call.
 */
export type McpStartMode = "eager" | "lazy";

interface McpServerConfigBase {
  /** `[A-Za-z0-9_-]+`: the prefix of its tools' names. */
  name: string;
  start: McpStartMode;
  timeoutMs: number;
  /** Tool names (as the server names them) to treat as idempotent whatever their annotations say. */
  idempotentTools: string[];
  /** Where this entry stands in the file, e.g. `mcp.servers[1]`, for messages that point at it. */
  key: string;
}

export interface McpStdioServerConfig extends McpServerConfigBase {
  transport: "stdio";
  command: string;
  args: string[];
  /** Variable → value template; `${VAR}` is replaced from the node's environment at spawn. */
  env: Record<string, string>;
  /** Absolute working directory of the server process. */
  cwd?: string;
  /** Run inside the bubblewrap sandbox (`sandbox = true`). */
  sandbox?: McpSandboxConfig;
}

/** How a sandboxed stdio server is started: see transport.ts and docs/tools.md. */
export interface McpSandboxConfig {
  bwrapPath: string;
  /** Drops a root node's sandbox to uid/gid 65534, as shell_exec does (found only when the node is root). */
  setprivPath?: string;
  /** Host paths the server sees read-only, at the same place. */
  roBinds: string[];
  /** Host paths the server may write, at the same place. */
  rwBinds: string[];
}

export interface McpHttpServerConfig extends McpServerConfigBase {
  transport: "http";
  url: string;
  /** Header name → name of the environment variable holding its value. */
  headersEnv: Record<string, string>;
}

export type McpServerConfig = McpStdioServerConfig | McpHttpServerConfig;

export interface McpConfig {
  servers: McpServerConfig[];
}

export const DEFAULT_MCP_TIMEOUT_MS = 60_000;
const MAX_SERVER_NAME = 64;

const SERVER_KEYS = [
  "name",
  "command",
  "args",
  "env",
  "cwd",
  "sandbox",
  "ro_binds",
  "rw_binds",
  "url",
  "headers_env",
  "start",
  "timeout_ms",
  "idempotent_tools",
];
const STDIO_ONLY = ["command", "args", "env", "cwd", "sandbox", "ro_binds", "rw_binds"];
const HTTP_ONLY = ["url", "headers_env"];
/** RFC 9110 token characters: what an HTTP header name may hold. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

export interface McpConfigOptions {
  /** Where `${VAR}` and `headers_env` variables are checked (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Directory that relative `cwd` values are relative to: the config file's (default process.cwd()). */
  baseDir?: string;
}

/**
 * Parses the `[mcp]` table of kova.toml (the value under the `mcp` key, or undefined).
 * @param keyPrefix how the table is named in messages (default `mcp`)
 * @throws ConfigError naming the key as written in the file and the fix
 */
export function mcpConfigFrom(raw: unknown, keyPrefix = "mcp", opts: McpConfigOptions = {}): McpConfig {
  if (raw === undefined) return { servers: [] };
  const mcp = tableAt(raw, keyPrefix);
  rejectUnknown(mcp, ["servers"], `${keyPrefix}.`);
  const entries = tablesAt(mcp.servers, `${keyPrefix}.servers`, "write each server as [[mcp.servers]] with a name and a command or url");
  const env = opts.env ?? process.env;
  const baseDir = opts.baseDir ?? process.cwd();
  const byName = new Map<string, string>();
  return {
    servers: entries.map(({ table, key }) => {
      const server = serverFrom(table, key, env, baseDir);
      const earlier = byName.get(server.name);
      if (earlier !== undefined) {
        throw new ConfigError(
          `${server.key}.name`,
          `"${server.name}" is already the name of ${earlier}: tool names would clash, give each server its own name`,
        );
      }
      byName.set(server.name, server.key);
      return server;
    }),
  };
}

function serverFrom(t: ConfigTable, key: string, env: NodeJS.ProcessEnv, baseDir: string): McpServerConfig {
  rejectUnknown(t, SERVER_KEYS, `${key}.`);
  if (t.name === undefined) throw new ConfigError(`${key}.name`, 'is required: name the server, e.g. name = "everything" (its tools become everything/<tool>)');
  // 64, not the 128 of other ids: `<server>/<tool>` must stay a valid tool name (names.ts),
  // or the registry would leave every tool of the server out.
  if (!isValidId(t.name) || t.name.length > MAX_SERVER_NAME) {
    throw new ConfigError(`${key}.name`, `${describeValue(t.name)} is not a valid server name: use 1-${MAX_SERVER_NAME} characters from [A-Za-z0-9_-]`);
  }
  const base: McpServerConfigBase = {
    name: t.name,
    start: startMode(t.start, `${key}.start`),
    timeoutMs: intValue(t.timeout_ms, `${key}.timeout_ms`, 1, 3_600_000) ?? DEFAULT_MCP_TIMEOUT_MS,
    idempotentTools: stringList(t.idempotent_tools, `${key}.idempotent_tools`, t.name),
    key,
  };
  const hasCommand = t.command !== undefined;
  const hasUrl = t.url !== undefined;
  if (hasCommand === hasUrl) {
    throw new ConfigError(
      key,
      hasCommand
        ? "has both command and url: a server is either a process spoken to over stdio (command) or a streamable HTTP endpoint (url), keep one"
        : 'needs command (a process spoken to over stdio, e.g. command = "npx") or url (streamable HTTP, e.g. url = "https://mcp.example.com/mcp")',
    );
  }
  const misplaced = Object.keys(t).find((k) => (hasCommand ? HTTP_ONLY : STDIO_ONLY).includes(k) && k !== "command" && k !== "url");
  if (misplaced !== undefined) {
    throw new ConfigError(
      `${key}.${misplaced}`,
      hasCommand ? "applies only to url (HTTP) servers: remove it" : "applies only to command (stdio) servers: remove it",
    );
  }
  if (hasCommand) {
    if (typeof t.command !== "string" || t.command.trim() === "") {
      throw new ConfigError(`${key}.command`, `must be a non-empty string naming the program, e.g. command = "npx", not ${describeValue(t.command)}`);
    }
    const server: McpStdioServerConfig = {
      ...base,
      transport: "stdio",
      command: t.command,
      args: argList(t.args, `${key}.args`),
      env: envTable(t.env, `${key}.env`, env),
    };
    if (t.cwd !== undefined) {
      if (typeof t.cwd !== "string" || t.cwd === "") throw new ConfigError(`${key}.cwd`, `must be a directory path, not ${describeValue(t.cwd)}`);
      server.cwd = isAbsolute(t.cwd) ? t.cwd : resolve(baseDir, t.cwd);
    }
    const sandbox = sandboxFrom(t, key, env);
    if (sandbox) {
      server.sandbox = sandbox;
      if (server.cwd !== undefined && ![...sandbox.roBinds, ...sandbox.rwBinds].some((b) => isWithin(resolve(server.cwd!), b))) {
        throw new ConfigError(
          `${key}.cwd`,
          `${server.cwd} is not visible in the sandbox: name a directory inside ro_binds or rw_binds, or leave cwd out (the server then starts in a fresh /work)`,
        );
      }
      checkSandboxedCommand(server, env);
    }
    return server;
  }
  return { ...base, transport: "http", url: httpUrl(t.url, `${key}.url`), headersEnv: headersEnvTable(t.headers_env, `${key}.headers_env`, env) };
}

/**
 * `sandbox`, `ro_binds`, `rw_binds` of a stdio server; undefined without `sandbox = true`.
 * @throws ConfigError for a non-boolean `sandbox`, binds without it, a bad bind, or no bwrap (or setpriv, on a root node) on PATH
 */
function sandboxFrom(t: ConfigTable, key: string, env: NodeJS.ProcessEnv): McpSandboxConfig | undefined {
  if (t.sandbox !== undefined && typeof t.sandbox !== "boolean") {
    throw new ConfigError(
      `${key}.sandbox`,
      `must be true (run the server in the bubblewrap sandbox shell_exec uses) or false, not ${describeValue(t.sandbox)}`,
    );
  }
  if (t.sandbox !== true) {
    const stray = ["ro_binds", "rw_binds"].find((k) => t[k] !== undefined);
    if (stray) throw new ConfigError(`${key}.${stray}`, "applies only with sandbox = true: add it, or remove this key");
    return undefined;
  }
  const bwrapPath = findOnPath("bwrap", env.PATH);
  if (bwrapPath === undefined) {
    throw new ConfigError(
      `${key}.sandbox`,
      "bwrap (bubblewrap) is not on the node's PATH: install it (apt-get install bubblewrap), or set sandbox = false knowingly",
    );
  }
  const sandbox: McpSandboxConfig = { bwrapPath, roBinds: bindList(t.ro_binds, `${key}.ro_binds`), rwBinds: bindList(t.rw_binds, `${key}.rw_binds`) };
  if (process.getuid?.() === 0) {
    const setpriv = findOnPath("setpriv", env.PATH);
    if (setpriv === undefined) {
      throw new ConfigError(
        `${key}.sandbox`,
        "the node runs as root and setpriv (util-linux), which drops the sandbox to uid 65534, is not on its PATH: install util-linux",
      );
    }
    sandbox.setprivPath = setpriv;
  }
  return sandbox;
}

/** What a sandbox shows of the host, for messages. */
const SHOWN = "the sandbox shows only /usr, /bin, /lib*, /sbin and the server's ro_binds and rw_binds";

/**
 * Checks that the sandbox's bash (transport.ts: `exec "$@"`) will find a sandboxed server's
 * command, where it looks for it: a path with a slash from the server's cwd inside the
 * sandbox (a fresh /work without cwd), a bare name on the sandbox's PATH (the server's
 * `env.PATH`, else SANDBOX_ENV's). Otherwise the server would fail at every start with only
 * "No such file or directory" on its stderr.
 * @throws ConfigError naming `<key>.command` and the directory to add to ro_binds
 */
function checkSandboxedCommand(server: McpStdioServerConfig, env: NodeJS.ProcessEnv): void {
  const box = server.sandbox!;
  const binds = [...box.roBinds, ...box.rwBinds];
  const key = `${server.key}.command`;
  const { command } = server;
  if (command.includes("/")) {
    if (!isAbsolute(command) && server.cwd === undefined) {
      throw new ConfigError(
        key,
        `"${command}" would be taken from the sandbox's fresh, empty ${SANDBOX_WORK_DIR}: give its absolute path and add its directory to ro_binds`,
      );
    }
    const path = resolve(server.cwd ?? SANDBOX_WORK_DIR, command);
    if (visibleInSandbox(path, binds)) return;
    const real = realPath(path);
    const what = real === path ? path : `${path} (a link to ${real})`;
    throw new ConfigError(key, `${what} is not visible in the sandbox (${SHOWN}): ${bindAdvice(path)}`);
  }
  const sandboxPath =
    server.env.PATH === undefined
      ? SANDBOX_ENV.PATH!
      : renderTemplate(server.env.PATH, env, (name) => {
          throw new ConfigError(`${server.key}.env.PATH`, `environment variable ${name} is not set`);
        });
  if (findOnPath(command, sandboxPath, (candidate) => visibleInSandbox(candidate, binds)) !== undefined) return;
  const onNode = findOnPath(command, env.PATH);
  throw new ConfigError(
    key,
    onNode === undefined
      ? `"${command}" is not found on the sandbox's PATH (${sandboxPath}; ${SHOWN}): install it there, or give its absolute path and add its directory to ro_binds`
      : `"${command}" is not on the sandbox's PATH (${sandboxPath}; ${SHOWN}), though the node finds it at ${onNode}: set command = "${onNode}" and ${bindAdvice(onNode)}`,
  );
}

/** How to make host file `path` visible: bind the directory it really lies in, unless that may not be bound. */
function bindAdvice(path: string): string {
  const dir = dirname(realPath(path));
  return mayHoldSecrets(dir)
    ? `its directory ${dir} may hold secrets and cannot be bound: install the program elsewhere (e.g. under /opt) and add that directory to ro_binds`
    : `add its directory to ro_binds: ro_binds = ["${dir}"]`;
}

function startMode(value: unknown, key: string): McpStartMode {
  if (value === undefined) return "eager";
  if (value === "eager" || value === "lazy") return value;
  throw new ConfigError(key, `must be "eager" (spawn when the node starts) or "lazy" (at first use), not ${describeValue(value)}`);
}

function httpUrl(value: unknown, key: string): string {
  let url: URL | undefined;
  try {
    if (typeof value === "string") url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new ConfigError(
      key,
      `${describeValue(value)} is not an http(s) URL: write the server's streamable HTTP endpoint, e.g. url = "https://mcp.example.com/mcp"`,
    );
  }
  if (url.username !== "" || url.password !== "") {
    throw new ConfigError(
      key,
      'must not carry credentials: put the token in an environment variable and name it in headers_env, e.g. headers_env = { Authorization = "REMOTE_MCP_TOKEN" }',
    );
  }
  return url.href;
}

function argList(value: unknown, key: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new ConfigError(key, `must be an array of strings, e.g. args = ["-y", "some-server"], not ${describeValue(value)}`);
  return value.map((a, i) => {
    if (typeof a !== "string") throw new ConfigError(`${key}[${i}]`, `must be a string, not ${describeValue(a)}: quote it`);
    return a;
  });
}

function stringList(value: unknown, key: string, server: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new ConfigError(key, `must be an array of tool names, e.g. ["search"], not ${describeValue(value)}`);
  return value.map((v, i) => {
    if (typeof v !== "string" || v === "") throw new ConfigError(`${key}[${i}]`, `must be a tool name as the server lists it, not ${describeValue(v)}`);
    // `<server>/<tool>` is how the tool appears everywhere else, so accept it here too.
    return v.startsWith(`${server}/`) ? v.slice(server.length + 1) : v;
  });
}

function envTable(value: unknown, key: string, env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  if (value === undefined) return out;
  for (const [name, template] of Object.entries(tableAt(value, key))) {
    const at = `${key}.${name}`;
    if (!ENV_NAME.test(name)) throw new ConfigError(at, "is not an environment variable name: use letters, digits and _ (not starting with a digit)");
    if (typeof template !== "string")
      throw new ConfigError(at, `must be a string (a value, or "\${VAR}" to take it from the node's environment), not ${describeValue(template)}`);
    for (const v of templateVariables(template, at)) requireEnv(env, v, at);
    out[name] = template;
  }
  return out;
}

function headersEnvTable(value: unknown, key: string, env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  if (value === undefined) return out;
  for (const [header, variable] of Object.entries(tableAt(value, key))) {
    const at = `${key}.${header}`;
    if (!HEADER_NAME.test(header)) throw new ConfigError(at, "is not an HTTP header name: use letters, digits and -");
    if (typeof variable !== "string" || !ENV_NAME.test(variable)) {
      throw new ConfigError(
        at,
        `must name the environment variable that holds the header's value, e.g. ${header} = "REMOTE_MCP_TOKEN", not ${describeValue(variable)}`,
      );
    }
    requireEnv(env, variable, at);
    out[header] = variable;
  }
  return out;
}

function requireEnv(env: NodeJS.ProcessEnv, name: string, key: string): void {
  if (env[name] === undefined) throw new ConfigError(key, `environment variable ${name} is not set: export ${name}=<value> before starting the node`);
}
