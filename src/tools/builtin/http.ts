import type { OutgoingHttpHeaders } from "node:http";
import { boolValue, intValue, rejectUnknown, stringList, type ConfigTable, ConfigError } from "../../core/index.js";
import { defineTool } from "../define-tool.js";
import { HttpRequestRefusedError, HttpTargetRefusedError, HttpTooManyRedirectsError } from "../errors.js";
import { shortenText } from "../result-cap.js";
import type { Tool } from "../types.js";
import { refuseAddress, refusalText, type AddressPolicyOptions } from "./address-policy.js";
import { deadlineSignal, exchange, type HttpReply } from "./http-client.js";
import { canonicalHost, matchHost, parseHostPattern, type HostPattern } from "./host-list.js";
import { parseCidr, parseIp, type Cidr } from "./ip-address.js";
import { guardedLookup, systemResolver, type Resolver } from "./ssrf-guard.js";

/**
 * `http_request`: lets a model call HTTP APIs without letting a hostile page it read turn
 * the node against its own network. Every connection's addresses are checked at connect
 * time (see ssrf-guard.ts), every redirect hop is checked again, and the host lists,
 * scheme rule and size and time limits apply to each hop. What the model sent for one
 * origin stays there: a redirect to another carries only the safe headers
 * (CROSS_ORIGIN_HEADERS), and one that would resend the body is handed back unfollowed.
 *
 * ```toml
 * [tools.http]
 * allow_hosts = ["api.github.com", "*.example.com"]  # optional; absent = any public host
 * deny_hosts = ["evil.example.com"]                  # checked first
 * allow_private = false          # true lifts the private-address refusal (tests, intranets)
 * allow_cidrs = ["10.20.0.0/16"] # or reach only these private/reserved blocks
 * timeout_ms = 30000             # whole request, redirects included
 * max_response_bytes = 1048576   # body bytes read; the rest is not downloaded
 * max_redirects = 5
 * methods = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]
 * ```
 *
 * Replay: one tool whose idempotency is decided per call. GET, HEAD and OPTIONS run again
 * after a crash; any other method gets "outcome unknown" (the static `idempotent` flag is
 * false for callers that do not ask per call).
 */
export interface HttpToolConfig {
  allowHosts?: HostPattern[];
  denyHosts: HostPattern[];
  allowPrivate: boolean;
  allowCidrs: Cidr[];
  timeoutMs: number;
  maxResponseBytes: number;
  maxRedirects: number;
  methods: string[];
}

const ALL_METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"];
const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
const KEYS = ["allow_hosts", "deny_hosts", "allow_private", "allow_cidrs", "timeout_ms", "max_response_bytes", "max_redirects", "methods"];
/** Request bodies the model may send: enough for API calls, small enough for its output. */
const MAX_BODY_CHARS = 1024 * 1024;

/**
 * Parses `[tools.http]`.
 * @param keyPrefix the table's key as written (`tools.http`), for errors
 * @throws ConfigError naming the key and the fix
 */
export function httpConfigFrom(table: ConfigTable, keyPrefix = "tools.http", _env: NodeJS.ProcessEnv = process.env): HttpToolConfig {
  const k = (name: string): string => `${keyPrefix}.${name}`;
  rejectUnknown(table, KEYS, `${keyPrefix}.`);
  const hosts = (name: string) =>
    stringList(table[name], k(name), '["api.github.com", "*.example.com"]')?.map((h, i) => parseHostPattern(h, `${k(name)}[${i}]`));
  const allowHosts = hosts("allow_hosts");
  const methods = stringList(table.methods, k("methods"), '["GET", "POST"]', (m, key) => {
    const upper = m.toUpperCase();
    if (!ALL_METHODS.includes(upper)) throw new ConfigError(key, `${JSON.stringify(m)} is not a method http_request offers: use ${ALL_METHODS.join(", ")}`);
    return upper;
  });
  if (methods?.length === 0) throw new ConfigError(k("methods"), "must name at least one method, or leave [tools.http] out to disable the tool");
  const config: HttpToolConfig = {
    denyHosts: hosts("deny_hosts") ?? [],
    allowPrivate: boolValue(table.allow_private, k("allow_private")) ?? false,
    allowCidrs:
      stringList(table.allow_cidrs, k("allow_cidrs"), '["10.20.0.0/16"]', (c, key) => {
        const cidr = parseCidr(c);
        if (!cidr) throw new ConfigError(key, `${JSON.stringify(c)} is not a CIDR block: write it as "10.20.0.0/16", "fd12:3456::/48" or a single address`);
        return c;
      })?.map((c) => parseCidr(c)!) ?? [],
    timeoutMs: intValue(table.timeout_ms, k("timeout_ms"), 100, 600_000) ?? 30_000,
    maxResponseBytes: intValue(table.max_response_bytes, k("max_response_bytes"), 1024, 100 * 1024 * 1024) ?? 1024 * 1024,
    maxRedirects: intValue(table.max_redirects, k("max_redirects"), 0, 20) ?? 5,
    methods: methods ?? ALL_METHODS,
  };
  if (allowHosts) config.allowHosts = allowHosts;
  return config;
}

/** What the model sends. */
interface HttpArgs {
  url: string;
  method: string;
  headers?: Record<string, string>;
  body?: string;
  follow_redirects: boolean;
}

/** What the model gets back. */
export interface HttpToolResult {
  url: string;
  status: number;
  status_text: string;
  headers: Record<string, string | string[]>;
  body: string;
  body_encoding: "utf8" | "base64";
  /** The body was longer than max_response_bytes; only its start is here. */
  truncated: boolean;
  /** Every URL redirected to, in order. */
  redirects: string[];
  /** Set when the response is a redirect the tool did not follow, and why. */
  redirect_not_followed?: string;
}

/** For tests: resolve names with this instead of the system resolver. */
export interface HttpToolDeps {
  resolver?: Resolver;
}

/** Builds `http_request`. */
export function createHttpTools(config: HttpToolConfig, deps: HttpToolDeps = {}): Tool[] {
  const policy: AddressPolicyOptions = { allowPrivate: config.allowPrivate, allowCidrs: config.allowCidrs };
  const lookup = guardedLookup(policy, deps.resolver ?? systemResolver);
  const tool = defineTool<HttpArgs, HttpToolResult>({
    name: "http_request",
    description:
      "Sends an HTTP(S) request and returns status, headers and body (text, or base64 for binary). " +
      "Redirects are followed. Requests to private, loopback and link-local addresses are refused" +
      (config.allowHosts ? `; allowed hosts: ${config.allowHosts.map((h) => h.written).join(", ")}` : "") +
      ".",
    idempotent: false,
    idempotentFor: (args) => SAFE_METHODS.has(args.method),
    parameters: {
      type: "object",
      properties: {
        url: { type: "string", description: "Absolute http or https URL.", minLength: 1, maxLength: 8192 },
        method: { type: "string", enum: config.methods, default: config.methods[0] },
        headers: { type: "object", description: "Request headers.", additionalProperties: { type: "string" } },
        body: { type: "string", description: "Request body (JSON text is sent as application/json unless content-type is given).", maxLength: MAX_BODY_CHARS },
        follow_redirects: { type: "boolean", default: true },
      },
      required: ["url"],
      additionalProperties: false,
    },
    run: async (args, ctx) => {
      const deadline = deadlineSignal(config.timeoutMs, `http_request ${args.method} ${shortUrl(args.url)}`, ctx.signal);
      try {
        return await follow(args, config, policy, lookup, deadline.signal);
      } catch (err) {
        if (err instanceof HttpTargetRefusedError || err instanceof HttpRequestRefusedError) {
          ctx.logger.warn({ tool: "http_request", url: shortUrl(args.url), code: err.code, reason: err.message }, "http_request refused");
        }
        throw err;
      } finally {
        deadline.dispose();
      }
    },
  });
  return [tool];
}

async function follow(
  args: HttpArgs,
  config: HttpToolConfig,
  policy: AddressPolicyOptions,
  lookup: ReturnType<typeof guardedLookup>,
  signal: AbortSignal,
): Promise<HttpToolResult> {
  let url = parseTarget(args.url);
  let method = args.method.toUpperCase();
  if (!config.methods.includes(method)) throw new HttpRequestRefusedError(`method ${method} is not enabled; use one of ${config.methods.join(", ")}`);
  let headers = requestHeaders(args);
  if (args.body !== undefined && (method === "GET" || method === "HEAD")) {
    throw new HttpRequestRefusedError(`a ${method} request carries no body: send it with POST, PUT or PATCH, or put the data in the URL's query`);
  }
  let body = args.body === undefined ? undefined : Buffer.from(args.body, "utf8");
  const redirects: string[] = [];
  for (;;) {
    checkTarget(url, config, policy);
    const reply = await exchange({ method, url, headers, body, lookup, signal, maxResponseBytes: config.maxResponseBytes });
    const location = header(reply, "location");
    if (!args.follow_redirects || !isRedirect(reply.status) || location === undefined) return toResult(url, reply, redirects, method);
    if (redirects.length >= config.maxRedirects) throw new HttpTooManyRedirectsError(shortUrl(args.url), config.maxRedirects);
    let next: URL;
    try {
      next = new URL(location, url);
    } catch {
      throw new HttpTargetRefusedError(shortUrl(location), `redirect from ${shortUrl(url.href)} to a malformed URL`);
    }
    // As browsers do: 303 turns any method into GET, 301/302 turn POST into GET; 307/308 keep both.
    if (reply.status === 303 ? method !== "HEAD" : (reply.status === 301 || reply.status === 302) && method === "POST") {
      method = "GET";
      body = undefined;
      headers = withoutHeaders(headers, ["content-type"]);
    }
    if (next.origin !== url.origin) {
      // What the model sent to one origin does not travel to another: a body would (307/308),
      // so that redirect is handed back instead; of the headers, only the safe list goes on.
      if (body !== undefined) {
        return {
          ...toResult(url, reply, redirects, method),
          redirect_not_followed: `a ${reply.status} redirect to another origin (${next.origin}) would send the request body there; send the request to ${shortUrl(next.href)} yourself if that is meant`,
        };
      }
      headers = crossOriginHeaders(headers);
    }
    redirects.push(next.href);
    url = next;
  }
}

/** @throws HttpTargetRefusedError for a malformed URL */
function parseTarget(text: string): URL {
  try {
    return new URL(text);
  } catch {
    throw new HttpTargetRefusedError(shortUrl(text), "not an absolute URL: write it as https://host/path");
  }
}

/**
 * Everything that can be refused before connecting: scheme, credentials, host lists, and
 * an IP literal's address (a socket skips `lookup` for literals, so they are checked here).
 * @throws HttpTargetRefusedError
 */
function checkTarget(url: URL, config: HttpToolConfig, policy: AddressPolicyOptions): void {
  const target = shortUrl(url.href);
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new HttpTargetRefusedError(target, `only http and https URLs can be requested, not ${url.protocol.slice(0, -1)}`);
  }
  if (url.username !== "" || url.password !== "") {
    throw new HttpTargetRefusedError(target, "URLs with credentials (user:password@host) are refused: send credentials in a header instead");
  }
  const host = canonicalHost(url.hostname);
  if (host === undefined) throw new HttpTargetRefusedError(target, "the URL has no host");
  const denied = matchHost(config.denyHosts, host);
  if (denied) throw new HttpTargetRefusedError(target, `host ${host} matches tools.http.deny_hosts entry ${JSON.stringify(denied.written)}`);
  if (config.allowHosts && !matchHost(config.allowHosts, host)) {
    throw new HttpTargetRefusedError(target, `host ${host} is not in tools.http.allow_hosts (${config.allowHosts.map((h) => h.written).join(", ")})`);
  }
  const literal = parseIp(host);
  if (literal) {
    const refusal = refuseAddress(literal, policy);
    if (refusal) throw new HttpTargetRefusedError(target, refusalText(refusal));
  }
}

/** Headers Kova sets itself, or that would let a request smuggle another one. */
const REFUSED_HEADERS = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "accept-encoding",
]);
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function requestHeaders(args: HttpArgs): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(args.headers ?? {})) {
    const lower = name.toLowerCase();
    if (!TOKEN.test(name)) throw new HttpRequestRefusedError(`header name ${JSON.stringify(name)} is not a valid HTTP token`);
    if (REFUSED_HEADERS.has(lower) || lower.startsWith("proxy-")) {
      throw new HttpRequestRefusedError(`header ${name} is set by Kova and cannot be given; leave it out`);
    }
    if (/[\r\n\0]/.test(value)) throw new HttpRequestRefusedError(`header ${name} contains a line break or NUL`);
    out[lower] = value;
  }
  // Identity encoding: the model reads the body, so it must not arrive compressed.
  out["accept-encoding"] = "identity";
  out["user-agent"] ??= "kova-http-request";
  if (args.body !== undefined && out["content-type"] === undefined) {
    out["content-type"] = isJson(args.body) ? "application/json" : "text/plain; charset=utf-8";
  }
  return out;
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * Headers that go on to another origin after a redirect: content negotiation and the user
 * agent, nothing that could identify or authorize (Authorization, Cookie, X-Api-Key and any
 * other custom header are dropped, and stay dropped if a later hop comes back). No
 * Content-Type: a request that keeps its body is not redirected to another origin.
 */
const CROSS_ORIGIN_HEADERS = new Set(["accept", "accept-language", "user-agent", "accept-encoding"]);

function crossOriginHeaders(headers: OutgoingHttpHeaders): OutgoingHttpHeaders {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => CROSS_ORIGIN_HEADERS.has(name)));
}

function withoutHeaders(headers: OutgoingHttpHeaders, names: string[]): OutgoingHttpHeaders {
  const out = { ...headers };
  for (const n of names) delete out[n];
  return out;
}

function isRedirect(status: number): boolean {
  return status === 301 || status === 302 || status === 303 || status === 307 || status === 308;
}

function header(reply: HttpReply, name: string): string | undefined {
  const v = reply.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function toResult(url: URL, reply: HttpReply, redirects: string[], method: string): HttpToolResult {
  const decoded = method === "HEAD" ? { body: "", encoding: "utf8" as const } : decodeBody(reply.body, header(reply, "content-type"));
  return {
    url: url.href,
    status: reply.status,
    status_text: reply.statusText,
    headers: reply.headers,
    body: decoded.body,
    body_encoding: decoded.encoding,
    truncated: reply.truncated,
    redirects,
  };
}

/** Text when the body decodes cleanly (in its declared charset, else UTF-8), base64 otherwise. */
export function decodeBody(body: Buffer, contentType: string | undefined): { body: string; encoding: "utf8" | "base64" } {
  const charset = /charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? "")?.[1]?.toLowerCase();
  try {
    return { body: new TextDecoder(charset ?? "utf-8", { fatal: true }).decode(body), encoding: "utf8" };
  } catch {
    return { body: body.toString("base64"), encoding: "base64" };
  }
}

/** A URL as shown in errors and logs: no query string (it may hold a token), at most 200 characters. */
function shortUrl(text: string): string {
  let shown = text;
  try {
    const u = new URL(text);
    shown = `${u.protocol}//${u.host}${u.pathname}${u.search ? "?…" : ""}`;
  } catch {
    // not a URL: show what was given, shortened
  }
  return shortenText(shown, 200);
}
