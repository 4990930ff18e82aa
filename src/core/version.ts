import { readFileSync } from "node:fs";
import { ErrorCode, KovaError } from "./errors.js";

/**
 * Kova's version, read from package.json: the one place it is written. The path works from
 * both `src/core` (tests) and `dist/core` (the built package): two levels up is the
 * package root either way.
 */
export const KOVA_VERSION: string = (() => {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version?: unknown };
  if (typeof pkg.version !== "string") throw new KovaError(ErrorCode.INTERNAL, "package.json has no version: reinstall kova");
  return pkg.version;
})();
