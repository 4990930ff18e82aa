import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createHttpTools, httpConfigFrom } from "../../src/tools/builtin/http.js";
import { systemResolver, type Resolver } from "../../src/tools/builtin/ssrf-guard.js";
import { isIdempotentCall } from "../../src/tools/idempotency.js";
import type { Tool } from "../../src/tools/types.js";
import { poll } from "../fixtures/poll.js";
import { callTool } from "../fixtures/tool-call.js";

const CORPUS = join(import.meta.dirname, "../fixtures/security/ssrf-urls.txt");
const REFUSALS = new Set(["HTTP_TARGET_REFUSED", "HTTP_TOO_MANY_REDIRECTS"]);

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

function listen(host: string, port: number, handler: Handler): Promise<Server> {
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => handler(req, res, body));
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}

/**
 * The servers every test here uses, all on one port P:
 * - the sink on 127.0.0.1:P and [::1]:P counts every request that reaches it: a guard that
 *   let a loopback URL through in any notation would land there;
 * - the redirector on 127.0.0.3:P, the only address the tool allows (allow_cidrs), serves
 *   redirects (`/hop?n=&status=&to=`), an echo, a large body and a request that never answers.
 */
const BIG_CHUNKS = 800;

async function startServers() {
  const sinkHits: string[] = [];
  const bigSentChunks: number[] = [];
  const sink: Handler = (req, res) => {
    sinkHits.push(`${req.socket.localAddress} ${req.method} ${req.url}`);
    res.end("sink reached");
  };
  const redirector: Handler = (req, res, body) => {
    const u = new URL(req.url!, "http://x");
    if (u.pathname === "/hop") {
      const n = Number(u.searchParams.get("n"));
      const status = Number(u.searchParams.get("status") ?? 302);
      const to = u.searchParams.get("to")!;
      const next = n > 1 ? `/hop?n=${n - 1}&status=${status}&to=${encodeURIComponent(to)}` : to;
      res.writeHead(status, { location: next }).end();
    } else if (u.pathname === "/echo") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
    } else if (u.pathname === "/big") {
      // 50 MiB offered in 64 KiB chunks of 2-byte characters, written only as fast as the
      // client reads; how many went out before the client closed is recorded.
      res.setHeader("content-type", "text/plain; charset=utf-8");
      const chunk = "é".repeat(32 * 1024);
      let sent = 0;
      let closed = false;
      const more = (): void => {
        while (!closed && sent < BIG_CHUNKS) {
          sent++;
          if (!res.write(chunk)) return void res.once("drain", more);
        }
        if (!closed) res.end();
      };
      res.on("close", () => {
        closed = true;
        bigSentChunks.push(sent);
      });
      more();
    } else if (u.pathname === "/binary") {
      res.setHeader("content-type", "application/octet-stream");
      res.end(Buffer.from([0xff, 0x00, 0xfe, 0x80]));
    } else if (u.pathname === "/slow") {
      // never answers
    } else {
      res.end("ok");
    }
  };
  for (let attempt = 0; ; attempt++) {
    const r = await listen("127.0.0.3", 0, redirector);
    const port = (r.address() as AddressInfo).port;
    try {
      const s4 = await listen("127.0.0.1", port, sink);
      const s6 = await listen("::1", port, sink).catch(async (err) => {
        s4.close();
        throw err;
      });
      const servers = [r, s4, s6];
      return {
        port,
        sinkHits,
        bigSentChunks,
        async [Symbol.asyncDispose]() {
          for (const s of servers) s.closeAllConnections();
          await Promise.all(servers.map((s) => new Promise((res) => s.close(res))));
        },
      };
    } catch (err) {
      r.close();
      if (attempt > 20) throw err;
    }
  }
}

/** A resolver that answers the corpus's names, alternates for the rebinding name, and asks the system for the rest. */
function testResolver(table: Map<string, string[]>) {
  const calls: string[] = [];
  let rebinds = 0;
  const resolver: Resolver = async (written) => {
    const name = written.toLowerCase().replace(/\.$/, "");
    calls.push(name);
    if (name === "rebind.example.com") {
      return [{ address: rebinds++ === 0 ? "127.0.0.3" : "127.0.0.1", family: 4 }];
    }
    const answer = table.get(name);
    if (answer) return answer.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
    return systemResolver(name);
  };
  return { resolver, calls, resetRebind: () => (rebinds = 0) };
}

function httpTool(resolver: Resolver, extra: Record<string, unknown> = {}): Tool {
  const config = httpConfigFrom({ allow_cidrs: ["127.0.0.3/32"], timeout_ms: 3000, max_response_bytes: 100_000, ...extra });
  return createHttpTools(config, { resolver })[0]!;
}

interface Entry {
  line: number;
  text: string;
  url: string;
}

function corpus(port: number, names: Map<string, string[]>): Entry[] {
  const out: Entry[] = [];
  readFileSync(CORPUS, "utf8")
    .split("\n")
    .forEach((raw, i) => {
      const text = raw.trim();
      if (text === "" || text.startsWith("#")) return;
      const fields = text.replaceAll("{port}", String(port)).split(/\s+/);
      const [kind] = fields;
      let url: string;
      if (kind === "url") url = fields[1]!;
      else if (kind === "resolve") {
        names.set(fields[1]!, fields[2]!.split(","));
        url = fields[3]!;
      } else if (kind === "redirect") {
        url = `http://127.0.0.3:${port}/hop?n=${fields[2]}&status=${fields[1]}&to=${encodeURIComponent(fields[3]!)}`;
      } else if (kind === "rebind") url = fields[2]!;
      else throw new Error(`ssrf-urls.txt line ${i + 1}: unknown kind ${kind}`);
      out.push({ line: i + 1, text, url });
    });
  return out;
}

describe("http_request SSRF guard", () => {
  it("http_request - refuses every entry of the SSRF corpus and no request reaches the sink", async () => {
    await using servers = await startServers();
    const names = new Map<string, string[]>();
    const entries = corpus(servers.port, names);
    const dns = testResolver(names);
    const tool = httpTool(dns.resolver);
    const results: string[] = [];
    const passed: string[] = [];
    for (const e of entries) {
      const out = await callTool(tool, { url: e.url });
      const code = out.error?.code ?? `status ${String((out.value as { status?: number })?.status)}`;
      const reason = (out.error?.message ?? "").replace(/^request to .*? refused: /, "");
      results.push(`${REFUSALS.has(code) ? "refused" : "ALLOWED"} ${e.text}\n    ${code}: ${reason}`);
      if (!REFUSALS.has(code)) passed.push(`line ${e.line}: ${e.text} -> ${code}`);
    }
    const refused = entries.length - passed.length;
    console.log(`SSRF corpus: ${refused}/${entries.length} refused, sink hits: ${servers.sinkHits.length}\n${results.join("\n")}`);
    expect(entries.length).toBeGreaterThanOrEqual(40);
    expect(passed).toEqual([]);
    expect(servers.sinkHits).toEqual([]);
    // The rebinding name was looked up once per connection: allowed, then refused.
    expect(dns.calls.filter((n) => n === "rebind.example.com")).toHaveLength(2);
  });

  it("http_request - with allow_private the same loopback notations reach the sink (the refusals above are the guard's)", async () => {
    await using servers = await startServers();
    const dns = testResolver(new Map([["internal.example.com", ["127.0.0.1"]]]));
    const tool = httpTool(dns.resolver, { allow_private: true });
    const urls = [
      `http://2130706433:${servers.port}/a`,
      `http://0x7f.1:${servers.port}/b`,
      `http://[::1]:${servers.port}/c`,
      `http://internal.example.com:${servers.port}/d`,
      `http://127.0.0.3:${servers.port}/hop?n=1&to=${encodeURIComponent(`http://127.0.0.1:${servers.port}/e`)}`,
    ];
    for (const url of urls) {
      const out = await callTool(tool, { url });
      expect(out.status, JSON.stringify(out.error)).toBe("ok");
      expect((out.value as { body: string }).body).toBe("sink reached");
    }
    expect(servers.sinkHits.map((h) => h.split(" ").pop())).toEqual(["/a", "/b", "/c", "/d", "/e"]);
    // Metadata and the unspecified address stay refused even so.
    for (const url of ["http://169.254.169.254/latest/meta-data/", `http://0.0.0.0:${servers.port}/`]) {
      const out = await callTool(tool, { url });
      expect(out.error?.code).toBe("HTTP_TARGET_REFUSED");
      expect(out.error?.message).toContain("always refused");
    }
    expect(servers.sinkHits).toHaveLength(5);
  });

  it("http_request - a name answering an allowed and then a private address is refused at the second connection", async () => {
    await using servers = await startServers();
    const dns = testResolver(new Map());
    const tool = httpTool(dns.resolver);
    const first = await callTool(tool, { url: `http://rebind.example.com:${servers.port}/ok` });
    expect(first.status).toBe("ok");
    expect((first.value as { body: string }).body).toBe("ok");
    const second = await callTool(tool, { url: `http://rebind.example.com:${servers.port}/ok` });
    expect(second.error?.code).toBe("HTTP_TARGET_REFUSED");
    expect(second.error?.message).toContain("rebind.example.com resolves to 127.0.0.1, a loopback address");
    expect(servers.sinkHits).toEqual([]);
  });

  it("http_request - follows allowed redirects, switching POST to GET on 303 and dropping custom headers across origins", async () => {
    await using servers = await startServers();
    const dns = testResolver(new Map([["api.example.com", ["127.0.0.3"]]]));
    const tool = httpTool(dns.resolver);
    const echo = `http://api.example.com:${servers.port}/echo`;
    const out = await callTool(tool, {
      url: `http://127.0.0.3:${servers.port}/hop?n=2&status=303&to=${encodeURIComponent(echo)}`,
      method: "POST",
      headers: { Authorization: "Bearer secret", "X-Trace": "t1" },
      body: '{"a":1}',
    });
    expect(out.status, JSON.stringify(out.error)).toBe("ok");
    const v = out.value as { status: number; url: string; redirects: string[]; body: string; body_encoding: string };
    expect(v.status).toBe(200);
    expect(v.url).toBe(echo);
    expect(v.redirects).toHaveLength(2);
    const seen = JSON.parse(v.body);
    expect(seen.method).toBe("GET");
    expect(seen.body).toBe("");
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers["x-trace"]).toBeUndefined();

    const kept = await callTool(tool, {
      url: `http://127.0.0.3:${servers.port}/hop?n=1&status=307&to=${encodeURIComponent("/echo")}`,
      method: "POST",
      headers: { Authorization: "Bearer secret" },
      body: '{"a":1}',
    });
    const seen307 = JSON.parse((kept.value as { body: string }).body);
    expect(seen307).toMatchObject({ method: "POST", body: '{"a":1}' });
    expect(seen307.headers).toMatchObject({ authorization: "Bearer secret", "content-type": "application/json", "accept-encoding": "identity" });
  });

  describe("redirects to another origin", () => {
    /** The redirector's origin (A), and a second server on another port (B) that records what reaches it. */
    async function twoOrigins() {
      const servers = await startServers();
      const seenByB: Array<{ method: string; url: string; headers: Record<string, unknown>; body: string }> = [];
      const b = await listen("127.0.0.3", 0, (req, res, body) => {
        seenByB.push({ method: req.method!, url: req.url!, headers: req.headers, body });
        const u = new URL(req.url!, "http://x");
        // /back redirects to origin A's echo: a chain that returns to the first origin.
        if (u.pathname === "/back") res.writeHead(302, { location: `http://127.0.0.3:${servers.port}/echo` }).end();
        else res.setHeader("content-type", "application/json").end(JSON.stringify({ headers: req.headers, body }));
      });
      const a = `http://127.0.0.3:${servers.port}`;
      const bOrigin = `http://127.0.0.3:${(b.address() as AddressInfo).port}`;
      return {
        a,
        b: bOrigin,
        seenByB,
        hop: (status: number, to: string) => `${a}/hop?n=1&status=${status}&to=${encodeURIComponent(to)}`,
        async [Symbol.asyncDispose]() {
          b.closeAllConnections();
          await new Promise((r) => b.close(r));
          await servers[Symbol.asyncDispose]();
        },
      };
    }
    const secrets = {
      Authorization: "Bearer secret-a",
      Cookie: "session=secret-b",
      "X-Api-Key": "secret-c",
      "X-Trace": "t1",
      Accept: "application/json",
      "Accept-Language": "de",
      "User-Agent": "kova-test-agent",
    };
    /** The request headers a server saw, without those of the connection itself. */
    const sent = (headers: Record<string, unknown>) => Object.fromEntries(Object.entries(headers).filter(([k]) => k !== "host" && k !== "connection"));

    it("http_request - a redirect to another origin carries only Accept, Accept-Language, User-Agent (and Kova's Accept-Encoding)", async () => {
      await using o = await twoOrigins();
      const tool = httpTool(testResolver(new Map()).resolver);
      for (const status of [301, 302, 303, 307, 308]) {
        const out = await callTool(tool, { url: o.hop(status, `${o.b}/echo`), method: "GET", headers: secrets });
        expect(out.status, JSON.stringify(out.error)).toBe("ok");
        expect((out.value as { url: string }).url).toBe(`${o.b}/echo`);
      }
      expect(o.seenByB).toHaveLength(5);
      for (const seen of o.seenByB) {
        expect(sent(seen.headers)).toEqual({
          accept: "application/json",
          "accept-language": "de",
          "user-agent": "kova-test-agent",
          "accept-encoding": "identity",
        });
      }
      // Dropped headers stay dropped when a later hop returns to the first origin.
      const back = await callTool(tool, { url: o.hop(302, `${o.b}/back`), headers: secrets });
      const echoed = JSON.parse((back.value as { body: string }).body);
      expect((back.value as { redirects: string[] }).redirects).toEqual([`${o.b}/back`, `${o.a}/echo`]);
      expect(echoed.headers["x-api-key"]).toBeUndefined();
      expect(echoed.headers.authorization).toBeUndefined();
    });

    it("http_request - a redirect within the origin keeps every header, and the body on 307/308", async () => {
      await using o = await twoOrigins();
      const tool = httpTool(testResolver(new Map()).resolver);
      const get = await callTool(tool, { url: o.hop(302, "/echo"), headers: secrets });
      expect(sent(JSON.parse((get.value as { body: string }).body).headers)).toMatchObject({
        authorization: "Bearer secret-a",
        cookie: "session=secret-b",
        "x-api-key": "secret-c",
        "x-trace": "t1",
      });
      const post = await callTool(tool, { url: o.hop(308, "/echo"), method: "POST", headers: secrets, body: '{"k":1}' });
      expect(JSON.parse((post.value as { body: string }).body)).toMatchObject({ body: '{"k":1}', headers: { "x-api-key": "secret-c" } });
      expect(o.seenByB).toEqual([]);
    });

    it("http_request - a 307/308 to another origin that would resend the body is handed back, not followed", async () => {
      await using o = await twoOrigins();
      const tool = httpTool(testResolver(new Map()).resolver);
      for (const status of [307, 308]) {
        const out = await callTool(tool, { url: o.hop(status, `${o.b}/echo`), method: "POST", headers: secrets, body: '{"password":"p"}' });
        expect(out.value).toMatchObject({
          status,
          url: o.hop(status, `${o.b}/echo`),
          headers: { location: `${o.b}/echo` },
          redirects: [],
          redirect_not_followed: expect.stringContaining("would send the request body there"),
        });
      }
      // 301/302/303 turn the POST into a GET without a body: that one is followed, with the safe headers only.
      const out = await callTool(tool, { url: o.hop(303, `${o.b}/echo`), method: "POST", headers: secrets, body: '{"password":"p"}' });
      expect((out.value as { status: number }).status).toBe(200);
      expect(o.seenByB.map((s) => [s.method, s.body, s.headers["x-api-key"]])).toEqual([["GET", "", undefined]]);
    });
  });

  it("http_request - caps the response body without splitting a character and stops downloading", async () => {
    await using servers = await startServers();
    const tool = httpTool(testResolver(new Map()).resolver, { max_response_bytes: 100_001 });
    const out = await callTool(tool, { url: `http://127.0.0.3:${servers.port}/big` });
    const v = out.value as { body: string; truncated: boolean; body_encoding: string };
    expect(v.truncated).toBe(true);
    expect(v.body_encoding).toBe("utf8");
    expect(v.body).toBe("é".repeat(50_000));
    // The client closed the connection at the cap instead of downloading the rest.
    await poll(() => servers.bigSentChunks.length === 1, { timeoutMs: 5000, what: "the big response to close" });
    expect(servers.bigSentChunks[0]).toBeLessThan(BIG_CHUNKS);
    const bin = await callTool(tool, { url: `http://127.0.0.3:${servers.port}/binary` });
    expect(bin.value).toMatchObject({ body: Buffer.from([0xff, 0x00, 0xfe, 0x80]).toString("base64"), body_encoding: "base64" });
  });

  it("http_request - a server that never answers ends in TIMEOUT after timeout_ms", async () => {
    await using servers = await startServers();
    const tool = httpTool(testResolver(new Map()).resolver, { timeout_ms: 300 });
    const started = performance.now();
    const out = await callTool(tool, { url: `http://127.0.0.3:${servers.port}/slow` });
    const took = performance.now() - started;
    expect(out.error?.code).toBe("TIMEOUT");
    expect(out.error?.message).toContain("timed out after 300 ms");
    expect(took).toBeGreaterThanOrEqual(290);
    expect(took).toBeLessThan(3000);
  });

  it("http_request - allow_hosts and deny_hosts decide by host before any connection", async () => {
    await using servers = await startServers();
    const dns = testResolver(
      new Map([
        ["api.example.com", ["127.0.0.3"]],
        ["evil.example.com", ["127.0.0.3"]],
        ["other.test", ["127.0.0.3"]],
      ]),
    );
    const tool = httpTool(dns.resolver, { allow_hosts: ["*.example.com"], deny_hosts: ["evil.example.com"] });
    const ok = await callTool(tool, { url: `http://API.example.com.:${servers.port}/ok` });
    expect(ok.status, JSON.stringify(ok.error)).toBe("ok");
    const denied = await callTool(tool, { url: `http://evil.example.com:${servers.port}/ok` });
    expect(denied.error?.message).toContain('matches tools.http.deny_hosts entry "evil.example.com"');
    const outside = await callTool(tool, { url: `http://other.test:${servers.port}/ok` });
    expect(outside.error?.message).toContain("is not in tools.http.allow_hosts");
    const apex = await callTool(tool, { url: `http://example.com:${servers.port}/ok` });
    expect(apex.error?.code).toBe("HTTP_TARGET_REFUSED");
    expect(dns.calls).toEqual(["api.example.com"]);
  });

  it("http_request - refuses headers Kova owns and methods not enabled; GET is idempotent per call, POST is not", async () => {
    const tool = httpTool(testResolver(new Map()).resolver, { methods: ["GET", "POST"] });
    const withBody = await callTool(tool, { url: "http://127.0.0.3/", method: "GET", body: "x" });
    expect(withBody.error?.message).toContain("a GET request carries no body");
    const host = await callTool(tool, { url: "http://127.0.0.3/", headers: { Host: "internal" } });
    expect(host.error).toMatchObject({ code: "HTTP_REQUEST_REFUSED" });
    expect(host.error?.message).toContain("header Host is set by Kova");
    const smuggle = await callTool(tool, { url: "http://127.0.0.3/", headers: { "X-A": "1\r\nX-B: 2" } });
    expect(smuggle.error?.message).toContain("line break");
    expect(tool.parameters).toMatchObject({ properties: { method: { enum: ["GET", "POST"] } } });
    expect(isIdempotentCall(tool, { url: "x", method: "GET" })).toBe(true);
    expect(isIdempotentCall(tool, { url: "x", method: "POST" })).toBe(false);
    expect(tool.idempotent).toBe(false);
  });
});
