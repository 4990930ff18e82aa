export * from "./errors.js";
export * from "./ids.js";
export * from "./clock.js";
export * from "./logger.js";
export * from "./version.js";
export * from "./format-version.js";
export * from "./config-table.js";
export * from "./close-matches.js";
