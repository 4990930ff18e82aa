/**
 * `${VAR}` references in `[[mcp.servers]]` env values. The config keeps the template, never
 * the value, so a config object can be logged or shown by `kova tools ls` without leaking a
 * secret; values are read from the node's environment only when the server is spawned.
 */
import { ConfigError } from "../../core/index.js";

/** An environment variable name as POSIX shells accept it. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

const REFERENCE = /\$\{([^}]*)\}/g;

/**
 * The variables a template names, in order.
 * @param at the config key the template is the value of
 * @throws ConfigError naming the key and the problem when a reference is empty, malformed or unterminated
 */
export function templateVariables(template: string, at: string): string[] {
  const names: string[] = [];
  for (const m of template.matchAll(REFERENCE)) {
    const name = m[1]!;
    if (!ENV_NAME.test(name)) throw new ConfigError(at, `\${${name}} is not a variable reference: write \${NAME} with NAME from [A-Za-z0-9_]`);
    names.push(name);
  }
  if (template.replace(REFERENCE, "").includes("${")) throw new ConfigError(at, 'has a "${" without a closing "}": write ${NAME}');
  return names;
}

/** The template with each `${VAR}` replaced; `missing` receives the first unset name. */
export function renderTemplate(template: string, env: NodeJS.ProcessEnv, missing: (name: string) => never): string {
  return template.replace(REFERENCE, (_, name: string) => env[name] ?? missing(name));
}
