export * from "./errors.js";
export * from "./ids.js";
export * from "./clock.js";
export * from "./logger.js";
export * from "./version.js";
export * from "./format-version.js";
export * from "./config-table.js";
export * from "./close-matches.js";
export * from "./phases.js";
export * from "./duration.js";
export * from "./principals.js";
export * from "./loopback.js";
export * from "./toml.js";
export * from "./public-error.js";
// For the layers above (every import from another layer comes through this file).
export { describeError } from "./describe-error.js";
