/**
 * `kova/testing`: what Kova's own suites use, exported for users' tests.
 */
export * from "./nats-server.js";
