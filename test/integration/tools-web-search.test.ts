import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { createWebSearchTools, webSearchConfigFrom, type SearchAdapter } from "../../src/tools/builtin/web-search.js";
import { callTool } from "../fixtures/tool-call.js";

/** A SearxNG-compatible endpoint on 127.0.0.1 that records its requests. */
async function searx() {
  const requests: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    requests.push(req);
    const u = new URL(req.url!, "http://x");
    const q = u.searchParams.get("q") ?? "";
    if (q === "slow") return; // never answers
    if (q === "broken") return void res.writeHead(500).end("internal error");
    if (q === "html") return void res.end("<html>not json</html>");
    if (q === "huge") return void res.end(JSON.stringify({ results: [{ url: "https://a.example", content: "x".repeat(5000) }] }));
    res.setHeader("content-type", "application/json");
    res.end(
      JSON.stringify({
        query: q,
        results: [
          { url: "https://nats.io/blog/2-11", title: " NATS 2.11 ", content: "What changed\n in   NATS 2.11", engine: "ddg" },
          { url: "javascript:alert(1)", title: "bad", content: "dropped" },
          { url: "https://docs.nats.io/", content: "😀".repeat(400) },
          { url: "https://github.com/nats-io/nats-server/releases", title: "Releases", content: "" },
          { title: "no url" },
          { url: "https://example.org/4", title: "Four", content: "four" },
        ],
      }),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}/search`,
    requests,
    async [Symbol.asyncDispose]() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

describe("web_search", () => {
  it("web_search - queries a SearxNG endpoint on loopback and returns normalised, limited results", async () => {
    await using s = await searx();
    const config = webSearchConfigFrom({ endpoint: s.endpoint, max_results: 3, headers_env: { Authorization: "TOKEN" } }, "tools.web_search", {
      TOKEN: "Bearer t0k",
    });
    const [tool] = createWebSearchTools(config);
    const out = await callTool(tool!, { query: "nats 2.11", language: "en", time_range: "month" });
    expect(out.status, JSON.stringify(out.error)).toBe("ok");
    const v = out.value as { query: string; results: Array<{ title: string; url: string; snippet: string }> };
    expect(v.query).toBe("nats 2.11");
    expect(v.results).toHaveLength(3);
    expect(v.results[0]).toEqual({ title: "NATS 2.11", url: "https://nats.io/blog/2-11", snippet: "What changed in NATS 2.11" });
    expect(v.results[1]!.title).toBe("https://docs.nats.io/");
    expect(v.results[1]!.snippet).toBe(`${"😀".repeat(249)}…`); // 500 units would split the 250th emoji
    expect(v.results[1]!.snippet.endsWith("😀…")).toBe(true);
    expect(v.results[2]).toEqual({ title: "Releases", url: "https://github.com/nats-io/nats-server/releases", snippet: "" });
    const req = new URL(s.requests[0]!.url!, "http://x");
    expect(Object.fromEntries(req.searchParams)).toEqual({ q: "nats 2.11", format: "json", language: "en", time_range: "month" });
    expect(s.requests[0]!.headers.authorization).toBe("Bearer t0k");
    const fewer = await callTool(tool!, { query: "nats", max_results: 1 });
    expect((fewer.value as { results: unknown[] }).results).toHaveLength(1);
  });

  it("web_search - endpoint failures are WEB_SEARCH_FAILED or TIMEOUT with the reason", async () => {
    await using s = await searx();
    const [tool] = createWebSearchTools(webSearchConfigFrom({ endpoint: s.endpoint, timeout_ms: 300, max_response_bytes: 2048 }, "tools.web_search", {}));
    const broken = await callTool(tool!, { query: "broken" });
    expect(broken.error).toMatchObject({ code: "WEB_SEARCH_FAILED", retryable: true });
    expect(broken.error?.message).toContain("HTTP 500");
    const html = await callTool(tool!, { query: "html" });
    expect(html.error?.message).toContain("did not answer JSON");
    const huge = await callTool(tool!, { query: "huge" });
    expect(huge.error?.message).toContain("larger than max_response_bytes (2048)");
    const slow = await callTool(tool!, { query: "slow" });
    expect(slow.error).toMatchObject({ code: "TIMEOUT" });
  });

  it("web_search - another search API plugs in as an adapter", async () => {
    await using s = await searx();
    const adapter: SearchAdapter = {
      name: "custom",
      request: (endpoint, q) => ({ url: new URL(`${endpoint}?q=${encodeURIComponent(q.query)}&n=${q.maxResults}`) }),
      parse: (body) => (body as { results: Array<{ url: string; title?: string }> }).results.map((r) => ({ url: r.url, title: `[${r.title ?? "?"}]` })),
    };
    const [tool] = createWebSearchTools(webSearchConfigFrom({ endpoint: s.endpoint }, "tools.web_search", {}), { adapter });
    const out = await callTool(tool!, { query: "x" });
    expect((out.value as { results: Array<{ title: string }> }).results.map((r) => r.title)).toEqual(["[ NATS 2.11 ]", "[?]", "[Releases]", "[Four]"]);
    expect(s.requests[0]!.url).toContain("n=5");
  });
});
