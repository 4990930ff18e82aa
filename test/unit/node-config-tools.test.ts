import { tmpdir } from "node:os";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/node/config.js";
import { configError } from "../fixtures/config-error.js";

// docs/tools.md's example, as a user would paste it into kova.toml.
const TOOLS_TOML = `
[tools.file]
root = "${tmpdir()}"
[tools.http]
allow_hosts = ["api.github.com"]
[tools.shell]
sandbox = "bwrap"
timeout_ms = 10000
[tools.db]
url_env = "KOVA_DB_URL"
[tools.web_search]
endpoint = "http://127.0.0.1:8888/search"

[[mcp.servers]]
name = "everything"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
[[mcp.servers]]
name = "remote"
url = "https://mcp.example.com/mcp"
headers_env = { Authorization = "REMOTE_MCP_TOKEN" }
`;

describe("node config: tools and MCP", () => {
  it("config - the [tools] and [[mcp.servers]] example of docs/tools.md loads as written", () => {
    const cfg = parseConfig(TOOLS_TOML, { env: { KOVA_DB_URL: "postgres://reader@127.0.0.1/test", REMOTE_MCP_TOKEN: "Bearer x" } });
    expect(cfg.tools.file?.rootWritten).toBe(tmpdir());
    expect(cfg.tools.shell).toMatchObject({ timeoutMs: 10000 });
    expect(cfg.tools.db).toBeDefined();
    expect(cfg.tools.webSearch).toBeDefined();
    expect(cfg.mcp.servers.map((s) => s.name)).toEqual(["everything", "remote"]);
    // The secrets themselves are not kept in the parsed config.
    expect(JSON.stringify(cfg.mcp)).not.toContain("Bearer x");
  });

  it("config - tool and MCP mistakes are ConfigErrors naming the key", () => {
    expect(configError(() => parseConfig(`[tools.shel]\n`, { env: {} })).message).toMatch(/tools.shel/);
    expect(configError(() => parseConfig(`[tools.file]\nroot = "/nonexistent/kova-root"\n`, { env: {} })).message).toMatch(/tools.file.root: .*mkdir -p/);
    expect(configError(() => parseConfig(`[tools.db]\nurl_env = "UNSET_DB_URL"\n`, { env: {} })).message).toMatch(/tools.db.url_env/);
    expect(configError(() => parseConfig(`[[mcp.servers]]\nname = "x"\n`, { env: {} })).message).toMatch(/mcp.servers\[0\]/);
  });
});
