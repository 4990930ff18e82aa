import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import * as kova from "../../src/index.js";
import * as natsCore from "@nats-io/transport-node";
import * as natsJs from "@nats-io/jetstream";
import * as natsKv from "@nats-io/kv";

const doc = readFileSync(join(import.meta.dirname, "../../docs/api.md"), "utf8");
const documented = new Set([...doc.matchAll(/`([A-Za-z_][A-Za-z0-9_]*)`/g)].map((m) => m[1]!));

describe("public API", () => {
  it("api - every value the package exports is listed in docs/api.md", () => {
    const exported = Object.keys(kova);
    expect(exported.length).toBeGreaterThan(30);
    expect(exported.filter((name) => !documented.has(name))).toEqual([]);
  });

  it("api - no exported name shadows an export of nats.js", () => {
    const nats = new Set([...Object.keys(natsCore), ...Object.keys(natsJs), ...Object.keys(natsKv)]);
    expect(nats.has("TimeoutError")).toBe(true); // the check below compares against real names
    expect(Object.keys(kova).filter((name) => nats.has(name))).toEqual([]);
  });

  it("api - the version comes from package.json", () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, "../../package.json"), "utf8")) as { version: string };
    expect(kova.KOVA_VERSION).toBe(pkg.version);
  });
});
