import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { ConfigError } from "../../core/errors.js";

/**
 * Readers for one `[tools.<name>]` table. Each names the key as written in the file
 * (`tools.shell.timeout_ms`) and says the fix, because the reader of the error is editing
 * that file.
 */
export type TomlTable = Record<string, unknown>;

/** A table's key as the file spells it: `tools.shell` + `timeout_ms`. */
export function keyOf(prefix: string, key: string): string {
  return prefix === "" ? key : `${prefix}.${key}`;
}

/** @throws ConfigError when the value is not a table */
export function tableAt(value: unknown, key: string): TomlTable {
  if (value === undefined) return {};
  if (typeof value !== "object" || value === null || Array.isArray(value) || value instanceof Date) {
    throw new ConfigError(key, `must be a table ([${key}] or { ... }), not ${describe(value)}`);
  }
  return value as TomlTable;
}

/** @throws ConfigError naming the first key that is not in `allowed` (with a close match when there is one) */
export function rejectUnknownKeys(t: TomlTable, allowed: readonly string[], prefix: string): void {
  for (const k of Object.keys(t)) {
    if (allowed.includes(k)) continue;
    const hint = allowed.find((a) => a.replace(/_/g, "") === k.replace(/[_-]/g, "").toLowerCase());
    throw new ConfigError(keyOf(prefix, k), `unknown key${hint ? `: did you mean ${keyOf(prefix, hint)}?` : `; allowed here: ${allowed.join(", ")}`}`);
  }
}

/** @throws ConfigError unless the value is absent or an integer in [min, max] */
export function intAt(t: TomlTable, prefix: string, key: string, min: number, max: number): number | undefined {
  const value = t[key];
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(keyOf(prefix, key), `must be an integer from ${min} to ${max}, not ${describe(value)}`);
  }
  return value;
}

/** @throws ConfigError unless the value is absent or a non-empty string */
export function stringAt(t: TomlTable, prefix: string, key: string): string | undefined {
  const value = t[key];
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.length === 0) {
    throw new ConfigError(keyOf(prefix, key), `must be a non-empty string, not ${describe(value)}`);
  }
  return value;
}

/** @throws ConfigError unless the value is absent or a boolean */
export function boolAt(t: TomlTable, prefix: string, key: string): boolean | undefined {
  const value = t[key];
  if (value === undefined) return undefined;
  if (typeof value !== "boolean") throw new ConfigError(keyOf(prefix, key), `must be true or false, not ${describe(value)}`);
  return value;
}

/** A path from the file; relative paths are taken from `baseDir` (the config file's directory). */
export function pathAt(t: TomlTable, prefix: string, key: string, baseDir: string): string | undefined {
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
export function secretAt(t: TomlTable, prefix: string, name: string, env: NodeJS.ProcessEnv, example: string): string {
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

export function describe(value: unknown): string {
  if (Array.isArray(value)) return "an array";
  if (value instanceof Date) return "a date";
  return typeof value === "string" ? JSON.stringify(value) : `${typeof value} ${String(value)}`;
}
