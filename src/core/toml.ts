import { parse, TomlError } from "smol-toml";
import type { ConfigTable } from "./config-table.js";
import { ConfigError } from "./errors.js";

/**
 * Parses TOML text (kova.toml, a workflow file) into its top-level table; core/config-table.ts
 * reads the tables. A syntax error names the file and the line and column to fix.
 * @param source the file as the user named it (or a stand-in such as `(config text)`)
 * @param fail builds the error (a ConfigError keyed by `source` by default; a workflow file's is its own)
 * @throws ConfigError (or what `fail` builds): `invalid TOML at line 2, column 5: …; fix the syntax there`
 */
export function parseTomlText(text: string, source: string, fail: (source: string, why: string, cause: unknown) => Error = configError): ConfigTable {
  try {
    return parse(text) as ConfigTable;
  } catch (err) {
    const where = err instanceof TomlError ? `line ${err.line}, column ${err.column}` : "unknown position";
    const first = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw fail(source, `invalid TOML at ${where}: ${first}; fix the syntax there`, err);
  }
}

function configError(source: string, why: string, cause: unknown): Error {
  return new ConfigError(source, why, { cause });
}
