import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { ConfigError } from "../../core/errors.js";
import type { Logger } from "../../core/logger.js";
import type { McpServerConfig } from "./config.js";
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
    childEnv[name] = renderTemplate(template, env, missing(`${config.key}.env.${name}`));
    for (const v of templateVariables(template)) secrets.push(env[v]!);
  }
  // Variable names only: their values may be secrets.
  log.debug({ command: config.command, args: config.args, env: Object.keys(childEnv), cwd: config.cwd }, "spawning MCP server");
  const transport = new sdk.StdioClientTransport({
    command: config.command,
    args: config.args,
    env: childEnv,
    stderr: "pipe",
    ...(config.cwd ? { cwd: config.cwd } : {}),
  });
  const redact = redactor(secrets);
  forwardLines(transport.stderr!, (line) => onStderr(redact(line)));
  return transport;
}

function redactor(secrets: string[]): (line: string) => string {
  const values = [...new Set(secrets.filter((s) => s.length >= MIN_REDACTED_LENGTH))].sort((a, b) => b.length - a.length);
  if (values.length === 0) return (line) => line;
  return (line) => values.reduce((text, v) => text.split(v).join("[redacted]"), line);
}
