import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "smol-toml";
import { describe, expect, it } from "vitest";
import { builtinTools, toolsConfigFrom } from "../../src/tools/config.js";
import { ToolRegistry } from "../../src/tools/registry.js";
import { configError } from "../fixtures/config-error.js";

const dir = mkdtempSync(join(tmpdir(), "kova-tools-cfg-"));

function tools(toml: string, env: NodeJS.ProcessEnv = {}) {
  return toolsConfigFrom(parse(toml).tools, "tools", env, dir);
}

describe("tools config", () => {
  it("tools config - the [tools] example of docs/tools.md parses into camelCase and enables those built-ins", () => {
    const cfg = tools(
      `
[tools]
max_result_bytes = 8192
[tools.file]
root = "."
max_bytes = 4096
[tools.http]
allow_hosts = ["api.github.com", "*.example.com"]
deny_hosts = ["evil.example.com"]
timeout_ms = 5000
max_response_bytes = 65536
max_redirects = 3
allow_cidrs = ["10.20.0.0/16"]
[tools.web_search]
endpoint = "http://127.0.0.1:8888/search"
max_results = 8
headers_env = { Authorization = "SEARCH_TOKEN" }
`,
      { SEARCH_TOKEN: "Bearer s3cret" },
    );
    expect(cfg.maxResultBytes).toBe(8192);
    expect(cfg.maxArgumentRepairs).toBe(2);
    expect(cfg.file).toMatchObject({ maxBytes: 4096, readOnly: false });
    expect(cfg.http).toMatchObject({ allowPrivate: false, timeoutMs: 5000, maxResponseBytes: 65536, maxRedirects: 3 });
    expect(cfg.http!.allowHosts!.map((h) => h.written)).toEqual(["api.github.com", "*.example.com"]);
    expect(cfg.http!.allowCidrs.map((c) => c.text)).toEqual(["10.20.0.0/16"]);
    expect(cfg.webSearch).toMatchObject({ maxResults: 8, adapter: "searxng", headers: { authorization: "Bearer s3cret" } });
    const names = new ToolRegistry()
      .register(...builtinTools(cfg))
      .list()
      .map((t) => t.name);
    expect(names).toEqual(["clock_now", "calculator", "file_read", "file_write", "http_request", "web_search"]);
    expect(builtinTools(tools("")).map((t) => t.name)).toEqual(["clock_now", "calculator"]);
  });

  it("tools config - every error names the key as written in the file and the fix", () => {
    const cases: Array<[string, string, string]> = [
      [`[tools.http]\nallow_hosts = ["ok.com", "bad host"]`, "tools.http.allow_hosts[1]", "not a host name"],
      [`[tools.http]\nallow_cidrs = ["10.0.0.0/99"]`, "tools.http.allow_cidrs[0]", "not a CIDR block"],
      [`[tools.http]\nmax_redirects = 50`, "tools.http.max_redirects", "from 0 to 20"],
      [`[tools.http]\nmethods = ["GET", "TRACE"]`, "tools.http.methods[1]", "not a method"],
      [`[tools.http]\nallow_private = "yes"`, "tools.http.allow_private", "true or false"],
      [`[tools.http]\nallow_host = []`, "tools.http.allow_host", "did you mean tools.http.allow_hosts?"],
      [`[tools.web_search]\nmax_results = 5`, "tools.web_search.endpoint", "is required"],
      [`[tools.web_search]\nendpoint = "ftp://x/"`, "tools.web_search.endpoint", "http or https"],
      [
        `[tools.web_search]\nendpoint = "http://x/"\nheaders_env = { Authorization = "MISSING_TOKEN" }`,
        "tools.web_search.headers_env.Authorization",
        "export MISSING_TOKEN=",
      ],
      [`[tools.file]\nroot = "does-not-exist"`, "tools.file.root", "mkdir -p"],
      [`[tools]\nmax_result_bytes = 10`, "tools.max_result_bytes", "from 1024"],
      [`[tools.shel]\nsandbox = "bwrap"`, "tools.shel", "unknown key"],
      [`tools = 3`, "tools", "must be a table"],
    ];
    for (const [toml, key, text] of cases) {
      const err = configError(() => tools(toml));
      expect(err.key, toml).toBe(key);
      expect(err.message, toml).toContain(text);
    }
  });
});
