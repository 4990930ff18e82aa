import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { boolValue, intValue, stringValue, type ConfigTable } from "../../core/config-table.js";
import { ConfigError } from "../../core/errors.js";

/**
 * Readers for one `[tools.<name>]` table that take the table's key as written in the file
 * (`tools.shell`) and the key within it (`timeout_ms`), so that errors name
 * `tools.shell.timeout_ms`. The checks themselves are core's (core/config-table.ts), the
 * same for every section of kova.toml.
 */

/** A table's key as the file spells it: `tools.shell` + `timeout_ms`. */
export function keyOf(prefix: string, key: string): string {
  return prefix === "" ? key : `${prefix}.${key}`;
}

/** @throws ConfigError unless the value is absent or an integer in [min, max] */
export function intAt(t: ConfigTable, prefix: string, key: string, min: number, max: number): number | undefined {
  return intValue(t[key], keyOf(prefix, key), min, max);
}

/** @throws ConfigError unless the value is absent or a non-empty string */
export function stringAt(t: ConfigTable, prefix: string, key: string): string | undefined {
  return stringValue(t[key], keyOf(prefix, key));
}

/** @throws ConfigError unless the value is absent or a boolean */
export function boolAt(t: ConfigTable, prefix: string, key: string): boolean | undefined {
  return boolValue(t[key], keyOf(prefix, key));
}

/** A path from the file; relative paths are taken from `baseDir` (the config file's directory). */
export function pathAt(t: ConfigTable, prefix: string, key: string, baseDir: string): string | undefined {
  const raw = stringAt(t, prefix, key);
  if (raw === undefined) return undefined;
  if (raw.includes("\0")) throw new ConfigError(keyOf(prefix, key), "must not contain a NUL byte");
  return isAbsolute(raw) ? resolve(raw) : resolve(baseDir, raw);
}

/**
 * A secret named by the file, never written in it: `<name>_env` names an environment
 * variable, `<name>_file` a file the node reads (trailing newline dropped). Returns the value.
 * @throws ConfigError when the secret is written inline, both or neither source is given,
 *   the variable is unset, or the file cannot be read
 */
export function secretAt(t: ConfigTable, prefix: string, name: string, env: NodeJS.ProcessEnv, example: string): string {
  const envKey = `${name}_env`;
  const fileKey = `${name}_file`;
  if (t[name] !== undefined) {
    throw new ConfigError(
      keyOf(prefix, name),
      `secrets never live in the config file: put it in an environment variable and write ${envKey} = "${example}" (or ${fileKey} = "/path/to/file")`,
    );
  }
  const variable = stringAt(t, prefix, envKey);
  const file = stringAt(t, prefix, fileKey);
  if (variable !== undefined && file !== undefined) {
    throw new ConfigError(keyOf(prefix, envKey), `give either ${envKey} or ${fileKey}, not both`);
  }
  if (file !== undefined) {
    if (!isAbsolute(file)) throw new ConfigError(keyOf(prefix, fileKey), `must be an absolute path, not ${JSON.stringify(file)}`);
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? String(err);
      throw new ConfigError(keyOf(prefix, fileKey), `cannot read ${file} (${code}): check the path and that the node may read it`, { cause: err });
    }
    const value = text.replace(/\r?\n$/, "");
    if (value === "") throw new ConfigError(keyOf(prefix, fileKey), `${file} is empty: write the secret into it`);
    return value;
  }
  if (variable === undefined) {
    throw new ConfigError(keyOf(prefix, envKey), `is required: name the environment variable that holds it, e.g. ${envKey} = "${example}"`);
  }
  const value = env[variable];
  if (value === undefined || value === "") {
    throw new ConfigError(keyOf(prefix, envKey), `environment variable ${variable} is not set: export ${variable}=<value> before starting the node`);
  }
  return value;
}
