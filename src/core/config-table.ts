import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { closeMatches } from "./close-matches.js";
import { ConfigError } from "./errors.js";

/**
 * The one reader of parsed TOML tables (core/toml.ts parses the text). Every layer that owns
 * a section of `kova.toml` (node, tools, agents, models, gateway, ...) and the workflow files
 * read their tables with these, so that every error names the key as written in the file
 * (`tools.http.allow_hosts[2]`) and says the fix the same way. Two forms of each check: on a
 * value with its full key (`intValue(t.port, "gateway.port", ...)`), and on a table with its
 * key and the key within it (`intAt(t, "tools.shell", "timeout_ms", ...)`).
 */
export type ConfigTable = Record<string, unknown>;

/**
 * The value at `key` as a table.
 * @throws ConfigError when it is not a table
 */
export function tableAt(value: unknown, key: string): ConfigTable {
  if (typeof value !== "object" || value === null || Array.isArray(value) || value instanceof Date) {
    throw new ConfigError(key, `must be a table ([${key}] or { ... }), not ${describeValue(value)}`);
  }
  return value as ConfigTable;
}

/**
 * The entries of an array of tables (`[[agents]]`), each checked to be a table and paired
 * with its key as written in the file (`agents[2]`); none when absent.
 * @param hint how to write one entry, for the error: `write each agent as [[agents]] with id and model`
 * @throws ConfigError when present but not an array, or when an entry is not a table
 */
export function tablesAt(value: unknown, key: string, hint: string): Array<{ table: ConfigTable; key: string }> {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new ConfigError(key, `must be an array of tables: ${hint}`);
  return value.map((entry, i) => {
    const entryKey = `${key}[${i}]`;
    return { table: tableAt(entry, entryKey), key: entryKey };
  });
}

/**
 * `doc[name]` as a table, or an empty table when absent.
 * @param key the key as written in the file, for errors (default: `name`)
 * @throws ConfigError when present but not a table
 */
export function optionalTable(doc: ConfigTable, name: string, key = name): ConfigTable {
  return doc[name] === undefined ? {} : tableAt(doc[name], key);
}

/**
 * Refuses keys the section does not know, suggesting the allowed one a typo was meant as.
 * @param prefix the section's key path with its trailing dot (`"tools.http."`)
 * @throws ConfigError naming the first unknown key
 */
export function rejectUnknown(t: ConfigTable, allowed: readonly string[], prefix: string): void {
  for (const k of Object.keys(t)) {
    if (!allowed.includes(k)) {
      const hint = allowed.find((a) => a.replace(/_/g, "") === k.replace(/[_-]/g, "").toLowerCase()) ?? closeMatches(k, allowed, 1)[0];
      throw new ConfigError(`${prefix}${k}`, `unknown key${hint ? `: did you mean ${prefix}${hint}?` : `; allowed here: ${allowed.join(", ")}`}`);
    }
  }
}

/** @throws ConfigError when present but not a string with something besides white space */
export function stringValue(value: unknown, key: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.trim().length === 0) throw new ConfigError(key, `must be a non-empty string, not ${describeValue(value)}`);
  return value;
}

/** @throws ConfigError when present but not an integer within [min, max] */
export function intValue(value: unknown, key: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(key, `must be an integer from ${min} to ${max}, not ${describeValue(value)}`);
  }
  return value;
}

/** @throws ConfigError when present but not a finite number of 0 or more */
export function numberValue(value: unknown, key: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0)
    throw new ConfigError(key, `must be a number of 0 or more, not ${describeValue(value)}`);
  return value;
}

/** @throws ConfigError when present but not true or false */
export function boolValue(value: unknown, key: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "boolean") throw new ConfigError(key, `must be true or false, not ${describeValue(value)}`);
  return value;
}

/**
 * An array of non-empty strings; each element is checked by `check` (which throws a
 * ConfigError naming `key[i]`) and may be normalised by it.
 * @throws ConfigError naming the array or the element at fault
 */
export function stringList(value: unknown, key: string, example: string, check: (item: string, itemKey: string) => string = (s) => s): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) throw new ConfigError(key, `must be an array of strings, e.g. ${key.split(".").pop()} = ${example}`);
  return value.map((item, i) => {
    const itemKey = `${key}[${i}]`;
    if (typeof item !== "string" || item.length === 0) throw new ConfigError(itemKey, `must be a non-empty string, not ${describeValue(item)}`);
    return check(item, itemKey);
  });
}

/**
 * Secrets never live in the file: it names an environment variable that holds them.
 * @param key the `*_env` key as written in the file
 * @throws ConfigError when the name is missing or the variable is unset or empty
 */
export function secretFromEnv(name: unknown, key: string, env: NodeJS.ProcessEnv, what = "the key"): string {
  if (typeof name !== "string" || name.length === 0) {
    throw new ConfigError(key, `must name the environment variable that holds ${what}, e.g. ${key.split(".").pop()} = "KOVA_SECRET"`);
  }
  const value = env[name];
  if (!value) throw new ConfigError(key, `environment variable ${name} is not set: export ${name}=<${what.replace(/^the /, "")}> before starting the node`);
  return value;
}

/** A short description of a config value for error messages (never its full contents). */
export function describeValue(value: unknown): string {
  if (Array.isArray(value)) return "an array";
  if (value instanceof Date) return "a date";
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "object" && value !== null) return "a table";
  return `${typeof value} ${String(value)}`;
}

/** A table's key as the file spells it: `tools.shell` + `timeout_ms`. */
export function keyOf(prefix: string, key: string): string {
  return prefix === "" ? key : `${prefix}.${key}`;
}

/** @throws ConfigError unless the value is absent or an integer in [min, max] */
export function intAt(t: ConfigTable, prefix: string, key: string, min: number, max: number): number | undefined {
  return intValue(t[key], keyOf(prefix, key), min, max);
}

/** @throws ConfigError unless the value is absent or a finite number of 0 or more */
export function numberAt(t: ConfigTable, prefix: string, key: string): number | undefined {
  return numberValue(t[key], keyOf(prefix, key));
}

/** @throws ConfigError unless the value is absent or a non-empty string */
export function stringAt(t: ConfigTable, prefix: string, key: string): string | undefined {
  return stringValue(t[key], keyOf(prefix, key));
}

/** @throws ConfigError unless the value is absent or a boolean */
export function boolAt(t: ConfigTable, prefix: string, key: string): boolean | undefined {
  return boolValue(t[key], keyOf(prefix, key));
}

/**
 * A path from the file; relative paths are taken from `baseDir` (the config file's directory).
 * @throws ConfigError unless the value is absent or a non-empty string without a NUL byte
 */
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
