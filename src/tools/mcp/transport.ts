import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { ConfigError, type Logger } from "../../core/index.js";
import { execPrologue, NOBODY, SANDBOX_ENV, SANDBOX_WORK_DIR, sandboxArgs } from "../builtin/shell-sandbox.js";
import type { McpServerConfig, McpStdioServerConfig } from "./config.js";
import { renderTemplate, templateVariables } from "./env-template.js";
import type { McpSdk } from "./sdk.js";
import { forwardLines } from "./stderr-lines.js";

/** Secrets shorter than this are not redacted from stderr lines: masking every "1" would make logs unreadable. */
const MIN_REDACTED_LENGTH = 4;

/**
 * The SDK transport for one server, with its secrets read from `env` now (not at config
 * time): a stdio server gets only the SDK's safe default variables (HOME, PATH, …) plus its
 * configured `env`; an HTTP server gets its `headers_env` headers. A stdio server's stderr
 * goes to `onStderr` line by line, with the values of its `${VAR}` references redacted.
 * @throws ConfigError when a variable the config names is no longer set
 */
export function createTransport(sdk: McpSdk, config: McpServerConfig, env: NodeJS.ProcessEnv, log: Logger, onStderr: (line: string) => void): Transport {
  const missing =
    (key: string) =>
    (name: string): never => {
      throw new ConfigError(key, `environment variable ${name} is not set: export ${name}=<value> before starting the node`);
    };
  if (config.transport === "http") {
    const headers: Record<string, string> = {};
    for (const [header, variable] of Object.entries(config.headersEnv)) {
      headers[header] = env[variable] ?? missing(`${config.key}.headers_env.${header}`)(variable);
    }
    return new sdk.StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers } });
  }
  const childEnv: Record<string, string> = {};
  const secrets: string[] = [];
  for (const [name, template] of Object.entries(config.env)) {
    const at = `${config.key}.env.${name}`;
    childEnv[name] = renderTemplate(template, env, missing(at));
    for (const v of templateVariables(template, at)) secrets.push(env[v]!);
  }
  // Variable names only: their values may be secrets.
  log.debug(
    { command: config.command, args: config.args, env: Object.keys(childEnv), cwd: config.cwd, sandbox: config.sandbox !== undefined },
    "spawning MCP server",
  );
  const transport = new sdk.StdioClientTransport({
    ...(config.sandbox
      ? sandboxed(config, childEnv)
      : { command: config.command, args: config.args, env: childEnv, ...(config.cwd ? { cwd: config.cwd } : {}) }),
    stderr: "pipe",
  });
  const redact = redactor(secrets);
  forwardLines(transport.stderr!, (line) => onStderr(redact(line)));
  return transport;
}

/** Sizes of the sandbox's tmpfs /tmp, /dev/shm and /work (shell_exec's defaults). */
const SANDBOX_TMPFS_BYTES = 64 * 1024 * 1024;
/** Variables the SDK passes from the node on its own (besides PATH, HOME, USER, which SANDBOX_ENV sets). */
const NODE_VARIABLES = ["LOGNAME", "SHELL", "TERM"];

/**
 * The process to spawn for a sandboxed server: bwrap with shell_exec's sandbox (sandboxArgs:
 * namespaces, no network, the read-only allow-list of host paths, tmpfs /tmp, /dev/shm and
 * /work) plus the server's own ro_binds and rw_binds, then bash closing inherited descriptors
 * and exec'ing the command. A root node starts bwrap through setpriv as uid/gid 65534, as
 * shell_exec does. The environment is SANDBOX_ENV and the server's `env`, passed through the
 * environment (not bwrap's argv, which other users of the host can read); the variables the
 * SDK adds from the node are unset.
 */
function sandboxed(config: McpStdioServerConfig, childEnv: Record<string, string>): { command: string; args: string[]; env: Record<string, string> } {
  const box = config.sandbox!;
  const lateBinds = [...box.roBinds.map((path) => ({ path, writable: false })), ...box.rwBinds.map((path) => ({ path, writable: true }))];
  const bwrap = [
    ...sandboxArgs({
      roBinds: [],
      lateBinds,
      tmpBytes: SANDBOX_TMPFS_BYTES,
      work: { kind: "tmpfs", bytes: SANDBOX_TMPFS_BYTES },
      cwd: config.cwd ?? SANDBOX_WORK_DIR,
    }),
    ...NODE_VARIABLES.flatMap((name) => ["--unsetenv", name]),
    "--",
    "/bin/bash",
    "-c",
    execPrologue("ulimit -HS -c 0"),
    "kova-mcp",
    config.command,
    ...config.args,
  ];
  const env = { ...SANDBOX_ENV, ...childEnv };
  if (box.setprivPath === undefined) return { command: box.bwrapPath, args: bwrap, env };
  const id = String(NOBODY);
  return { command: box.setprivPath, args: [`--reuid=${id}`, `--regid=${id}`, "--clear-groups", "--", box.bwrapPath, ...bwrap], env };
}

function redactor(secrets: string[]): (line: string) => string {
  const values = [...new Set(secrets.filter((s) => s.length >= MIN_REDACTED_LENGTH))].sort((a, b) => b.length - a.length);
  if (values.length === 0) return (line) => line;
  return (line) => values.reduce((text, v) => text.split(v).join("[redacted]"), line);
}
