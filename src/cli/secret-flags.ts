import { readFileSync } from "node:fs";
import { ArgumentError } from "../core/index.js";

/**
 * A secret named by a flag pair: `envFlag` names an environment variable that holds it,
 * `fileFlag` a file (one trailing newline dropped). Secrets are never flag values
 * themselves: those show in `ps` and in shell history.
 * @throws ArgumentError for an unset variable or an unreadable file
 */
export function secretFromFlags(envName: string | undefined, file: string | undefined, envFlag: string, fileFlag: string): string | undefined {
  if (envName !== undefined) {
    const value = process.env[envName];
    if (!value) throw new ArgumentError(envFlag, `environment variable ${envName} is not set: export it first`);
    return value;
  }
  if (file !== undefined) return readFileSync(readableFile(file, fileFlag), "utf8").replace(/\r?\n$/, "");
  return undefined;
}

/** @throws ArgumentError naming the flag when `path` cannot be read */
export function readableFile(path: string, flag: string): string {
  try {
    readFileSync(path, { flag: "r" });
  } catch (err) {
    throw new ArgumentError(flag, `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path and its permissions`);
  }
  return path;
}
