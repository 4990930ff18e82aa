import { closeMatches } from "./close-matches.js";
import { ConfigError } from "./errors.js";

/**
 * Helpers for reading one parsed TOML table. Every layer that owns a section of
 * `kova.toml` (node, tools, agents, ...) parses it with these, so that every error names
 * the key as written in the file (`tools.http.allow_hosts[2]`) and says the fix the same way.
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

/** @throws ConfigError when present but not a non-empty string */
export function stringValue(value: unknown, key: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.length === 0) throw new ConfigError(key, `must be a non-empty string, not ${describeValue(value)}`);
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
