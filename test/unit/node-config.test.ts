import { describe, expect, it } from "vitest";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultConfig, loadConfig, parseConfig } from "../../src/node/config.js";
import { configError } from "../fixtures/config-error.js";

/** A file the parser must refuse with a ConfigError naming `key` and saying `text`. */
function refused(toml: string, key: string, text: string): void {
  const err = configError(() => parseConfig(toml, { env: {} }));
  expect(err.key).toBe(key);
  expect(err.message).toContain(text);
}

describe("node config", () => {
  it("config - parses a full file into camelCase with paths relative to the file", () => {
    const cfg = parseConfig(
      `
[node]
id = "node-1"
data_dir = "data"
[cluster]
name = "prod"
heartbeat_ms = 500
stale_after_ms = 3000
drain_timeout_ms = 1500
[nats]
urls = ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]
replicas = 3
[wal]
sync = "normal"
ring_bits = 12
[mailbox]
ack_wait_ms = 5000
max_deliver = 7
backoff_ms = [100, 2000]
[[actors]]
id = "c1"
type = "counter"
[[actors]]
id = "p1"
type = "probe"
module = "./probe.mjs"
`,
      { path: "/etc/kova/kova.toml", env: {} },
    );
    expect(cfg.nodeId).toBe("node-1");
    expect(cfg.cluster).toBe("prod");
    expect(cfg.dataDir).toBe("/etc/kova/data");
    expect(cfg.natsUrls).toEqual(["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]);
    expect(cfg.replicas).toBe(3);
    expect(cfg.heartbeatMs).toBe(500);
    expect(cfg.staleAfterMs).toBe(3000);
    expect(cfg.drainTimeoutMs).toBe(1500);
    expect(cfg.wal).toEqual({ sync: "normal", ringBits: 12 });
    expect(cfg.mailbox).toEqual({ ackWaitMs: 5000, maxDeliver: 7, backoffMs: [100, 2000] });
    expect(cfg.actors).toEqual([
      { id: "c1", type: "counter" },
      { id: "p1", type: "probe", module: "/etc/kova/probe.mjs" },
    ]);
    expect(cfg.modules).toEqual(["/etc/kova/probe.mjs"]);
  });

  it("config - environment overrides the file", () => {
    const cfg = parseConfig(`[node]\nid = "from-file"\n[cluster]\nname = "a"\n[nats]\nurls = ["nats://x:1"]`, {
      env: { KOVA_NODE_ID: "from-env", KOVA_CLUSTER: "b", NATS_URL: "nats://h1:4222,nats://h2:4222", KOVA_DATA_DIR: "/srv/kova" },
    });
    expect(cfg.nodeId).toBe("from-env");
    expect(cfg.cluster).toBe("b");
    expect(cfg.natsUrls).toEqual(["nats://h1:4222", "nats://h2:4222"]);
    expect(cfg.dataDir).toBe("/srv/kova");
  });

  it("config - defaults need no file and leave NATS discovery to the node", () => {
    const cfg = defaultConfig({ KOVA_NODE_ID: "solo" });
    expect(cfg.nodeId).toBe("solo");
    expect(cfg.cluster).toBe("default");
    expect(cfg.natsUrls).toBeUndefined();
    expect(cfg.replicas).toBeUndefined(); // chosen from the NATS server at start
    expect(cfg.staleAfterMs).toBe(5 * cfg.heartbeatMs);
    expect(cfg.dataDir.endsWith(join(".kova-data", "solo"))).toBe(true);
  });

  it("config - unknown_agent_after_ms defaults to 10 min (docs/security.md) and is bounded", () => {
    expect(defaultConfig({ KOVA_NODE_ID: "solo" }).unknownAgentAfterMs).toBe(600_000);
    expect(parseConfig(`[cluster]\nunknown_agent_after_ms = 1500`, { env: {} }).unknownAgentAfterMs).toBe(1500);
    expect(configError(() => parseConfig(`[cluster]\nunknown_agent_after_ms = 5`, { env: {} })).key).toBe("cluster.unknown_agent_after_ms");
  });

  it("config - marker_compaction is a duration (default 10 min), 0 turns it off", () => {
    expect(defaultConfig({ KOVA_NODE_ID: "solo" }).markerCompactionMs).toBe(600_000);
    expect(parseConfig(`[cluster]\nmarker_compaction = "1h"`, { env: {} }).markerCompactionMs).toBe(3_600_000);
    expect(parseConfig(`[cluster]\nmarker_compaction = "0"`, { env: {} }).markerCompactionMs).toBe(0);
    expect(configError(() => parseConfig(`[cluster]\nmarker_compaction = "soon"`, { env: {} })).key).toBe("cluster.marker_compaction");
  });

  it("config - [checkpoint] processed_window is an integer from 1 to 1,000,000 (default 1000); a bad value or key is refused naming it", () => {
    const parse = (toml: string) => parseConfig(toml, { env: {} });
    expect(defaultConfig({ KOVA_NODE_ID: "solo" }).processedWindow).toBe(1000);
    expect(parse("[checkpoint]").processedWindow).toBe(1000);
    expect(parse("[checkpoint]\nprocessed_window = 1").processedWindow).toBe(1);
    expect(parse("[checkpoint]\nprocessed_window = 1000000").processedWindow).toBe(1_000_000);
    for (const bad of ["0", "-1", "1000001", "2.5", '"1000"', "true", "[10]"]) {
      refused(`[checkpoint]\nprocessed_window = ${bad}`, "checkpoint.processed_window", "must be an integer from 1 to 1000000");
    }
    refused("[checkpoint]\nprocessed-window = 10", "checkpoint.processed-window", "did you mean checkpoint.processed_window");
    refused("checkpoint = 10", "checkpoint", "must be a table");
  });

  it("config - [journal] nats is true or false (default true); a bad value or key is refused naming it", () => {
    const parse = (toml: string) => parseConfig(toml, { env: {} });
    expect(defaultConfig({ KOVA_NODE_ID: "solo" }).natsJournal).toBe(true);
    expect(parse("[journal]").natsJournal).toBe(true);
    expect(parse("[journal]\nnats = true").natsJournal).toBe(true);
    expect(parse("[journal]\nnats = false").natsJournal).toBe(false);
    for (const bad of ['"false"', "0", "1", '"no"']) refused(`[journal]\nnats = ${bad}`, "journal.nats", "must be true or false");
    refused("[journal]\nnat = false", "journal.nat", "did you mean journal.nats");
    refused('journal = "nats"', "journal", "must be a table");
  });

  it("config - an unknown key is named with a suggestion", () => {
    const err = configError(() => parseConfig(`[cluster]\nheartbeat-ms = 10`, { env: {} }));
    expect(err.key).toBe("cluster.heartbeat-ms");
    expect(err.message).toContain("did you mean cluster.heartbeat_ms");
  });

  it("config - an invalid node id names the key and the allowed alphabet", () => {
    const err = configError(() => parseConfig(`[node]\nid = "a.b"`, { env: {} }));
    expect(err.key).toBe("node.id");
    expect(err.message).toMatch(/\[A-Za-z0-9_-\]/);
  });

  it("config - a bad env override names the variable", () => {
    const err = configError(() => parseConfig("", { env: { KOVA_CLUSTER: "has space" } }));
    expect(err.key).toBe("KOVA_CLUSTER");
  });

  it("config - staleness shorter than two heartbeats is refused with the fix", () => {
    const err = configError(() => parseConfig(`[cluster]\nheartbeat_ms = 1000\nstale_after_ms = 1500`, { env: {} }));
    expect(err.key).toBe("cluster.stale_after_ms");
    expect(err.message).toContain("2000");
  });

  it("config - actors need an id and a type, and ids are unique", () => {
    expect(configError(() => parseConfig(`[[actors]]\ntype = "counter"`, { env: {} })).key).toBe("actors[0].id");
    expect(configError(() => parseConfig(`[[actors]]\nid = "x"`, { env: {} })).key).toBe("actors[0].type");
    const dup = configError(() => parseConfig(`[[actors]]\nid = "x"\ntype = "t"\n[[actors]]\nid = "x"\ntype = "t"`, { env: {} }));
    expect(dup.key).toBe("actors[1].id");
  });

  it.each([
    ["actors", "actors", "[[actors]]"],
    ["actor_templates", "actor_templates", "[[actor_templates]]"],
    ["schedules", "schedules", "[[schedules]]"],
    ["agents", "agents", "[[agents]]"],
    ["agent_templates", "agent_templates", "[[agent_templates]]"],
    ["swarms", "swarms", "[[swarms]]"],
    ["mcp.servers", "[mcp]\nservers", "[[mcp.servers]]"],
  ])("config - %s written as a single table says to write each entry as an array of tables", (key, written, fix) => {
    const notArray = configError(() => parseConfig(`${written} = { id = "x" }`, { env: {} }));
    expect(notArray.key).toBe(key);
    expect(notArray.message).toContain(`must be an array of tables: write each`);
    expect(notArray.message).toContain(fix);
    const notTable = configError(() => parseConfig(`${written} = [{ id = "x" }, 3]`, { env: {} }));
    expect(notTable.key).toBe(`${key}[1]`);
    expect(notTable.message).toContain("must be a table");
  });

  it("config - a malformed NATS url and a wrong sync mode are refused", () => {
    expect(configError(() => parseConfig(`[nats]\nurls = ["http//nope"]`, { env: {} })).key).toBe("nats.urls[0]");
    expect(configError(() => parseConfig(`[wal]\nsync = "always"`, { env: {} })).key).toBe("wal.sync");
    expect(configError(() => parseConfig(`[mailbox]\nbackoff_ms = [100, "x"]`, { env: {} })).key).toBe("mailbox.backoff_ms[1]");
  });

  it("config - wal keys come from named environment variables, never the file", () => {
    const cfg = parseConfig(`[wal]\nencryption = { algorithm = "sm4", key_env = "K1" }\nhmac = { key_env = "K2" }`, {
      env: { K1: "secret-1", K2: "secret-2" },
    });
    expect(cfg.wal.encryption).toEqual({ algorithm: "sm4", key: "secret-1" });
    expect(cfg.wal.hmac).toEqual({ key: "secret-2" });
    const err = configError(() => parseConfig(`[wal]\nhmac = { key_env = "MISSING" }`, { env: {} }));
    expect(err.key).toBe("wal.hmac.key_env");
    expect(err.message).toContain("export MISSING=");
  });

  it("config - broken TOML reports the line", () => {
    const err = configError(() => parseConfig(`[node]\nid = "x`, { env: {} }));
    expect(err.message).toMatch(/line 2/);
  });

  it("config - a missing file says how to fix it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kova-cfg-"));
    await expect(loadConfig(join(dir, "nope.toml"), {})).rejects.toThrow(/cannot read .*nope\.toml/);
    await writeFile(join(dir, "kova.toml"), `[node]\nid = "n9"`);
    expect((await loadConfig(join(dir, "kova.toml"), {})).nodeId).toBe("n9");
  });
});
