import { intValue, rejectUnknown, secretFromEnv, stringValue, tableAt, type ConfigTable, ConfigError } from "../../core/index.js";
import { defineTool } from "../define-tool.js";
import { WebSearchFailedError } from "../errors.js";
import { shortenText } from "../result-cap.js";
import type { Tool } from "../types.js";
import { deadlineSignal, exchange } from "./http-client.js";

/**
 * `web_search`: queries a search endpoint the operator configured and trusts, so it may be
 * on loopback or the intranet (a local SearxNG) and is not put through http_request's
 * private-address refusal; it still gets a deadline and a response cap, and redirects are
 * not followed (a trusted endpoint answers directly). The endpoint speaks through an
 * adapter: SearxNG's JSON API by default; code can pass another.
 *
 * ```toml
 * [tools.web_search]
 * endpoint = "http://127.0.0.1:8888/search"
 * adapter = "searxng"           # the built-in one
 * max_results = 5               # the most a call returns (the model may ask for fewer)
 * timeout_ms = 15000
 * max_response_bytes = 2097152
 * headers_env = { Authorization = "SEARCH_TOKEN" }   # header values from the environment
 * ```
 */
export interface WebSearchConfig {
  endpoint: URL;
  adapter: string;
  maxResults: number;
  timeoutMs: number;
  maxResponseBytes: number;
  /** Resolved from the environment; never logged. */
  headers: Record<string, string>;
}

export interface SearchQuery {
  query: string;
  maxResults: number;
  language?: string;
  timeRange?: "day" | "week" | "month" | "year";
}

export interface SearchResult {
  title: string;
  url: string;
  snippet: string;
}

/** Turns a query into a request for one kind of endpoint, and its answer into results. */
export interface SearchAdapter {
  readonly name: string;
  request(endpoint: URL, query: SearchQuery): { url: URL; method?: "GET" | "POST"; headers?: Record<string, string>; body?: string };
  /**
   * @param body the endpoint's answer, parsed as JSON
   * @throws WebSearchFailedError when it is not what the adapter expects
   */
  parse(body: unknown): Array<Partial<SearchResult>>;
}

/** SearxNG's JSON API (`/search?q=…&format=json`; the instance must enable the json format). */
export const searxngAdapter: SearchAdapter = {
  name: "searxng",
  request(endpoint, q) {
    const url = new URL(endpoint);
    url.searchParams.set("q", q.query);
    url.searchParams.set("format", "json");
    if (q.language) url.searchParams.set("language", q.language);
    if (q.timeRange) url.searchParams.set("time_range", q.timeRange);
    return { url };
  },
  parse(body) {
    const results = (body as { results?: unknown })?.results;
    if (!Array.isArray(results)) throw new WebSearchFailedError('the endpoint answered JSON without a "results" array; is it a SearxNG /search URL?');
    return results.map((r: Record<string, unknown>) => ({
      title: typeof r.title === "string" ? r.title : undefined,
      url: typeof r.url === "string" ? r.url : undefined,
      snippet: typeof r.content === "string" ? r.content : undefined,
    }));
  },
};

const ADAPTERS: Record<string, SearchAdapter> = { searxng: searxngAdapter };
/** A snippet longer than this adds little for the model and costs context. */
const SNIPPET_MAX = 500;

/**
 * Parses `[tools.web_search]`.
 * @throws ConfigError naming the key and the fix
 */
export function webSearchConfigFrom(table: ConfigTable, keyPrefix = "tools.web_search", env: NodeJS.ProcessEnv = process.env): WebSearchConfig {
  const k = (name: string): string => `${keyPrefix}.${name}`;
  rejectUnknown(table, ["endpoint", "adapter", "max_results", "timeout_ms", "max_response_bytes", "headers_env"], `${keyPrefix}.`);
  const endpointText = stringValue(table.endpoint, k("endpoint"));
  if (endpointText === undefined) throw new ConfigError(k("endpoint"), 'is required: the search API URL, e.g. endpoint = "http://127.0.0.1:8888/search"');
  let endpoint: URL;
  try {
    endpoint = new URL(endpointText);
  } catch {
    throw new ConfigError(k("endpoint"), `${JSON.stringify(endpointText)} is not a URL: write it as http(s)://host[:port]/path`);
  }
  if (endpoint.protocol !== "http:" && endpoint.protocol !== "https:") throw new ConfigError(k("endpoint"), "must be an http or https URL");
  if (endpoint.username || endpoint.password) throw new ConfigError(k("endpoint"), "must not carry credentials: put them in headers_env");
  const adapter = stringValue(table.adapter, k("adapter")) ?? "searxng";
  if (!(adapter in ADAPTERS))
    throw new ConfigError(
      k("adapter"),
      `unknown adapter ${JSON.stringify(adapter)}: built in is ${Object.keys(ADAPTERS).join(", ")}; pass others in code to createWebSearchTools`,
    );
  const headers: Record<string, string> = {};
  if (table.headers_env !== undefined) {
    for (const [name, envName] of Object.entries(tableAt(table.headers_env, k("headers_env")))) {
      headers[name.toLowerCase()] = secretFromEnv(envName, `${k("headers_env")}.${name}`, env, "the header value");
    }
  }
  return {
    endpoint,
    adapter,
    maxResults: intValue(table.max_results, k("max_results"), 1, 50) ?? 5,
    timeoutMs: intValue(table.timeout_ms, k("timeout_ms"), 100, 600_000) ?? 15_000,
    maxResponseBytes: intValue(table.max_response_bytes, k("max_response_bytes"), 1024, 100 * 1024 * 1024) ?? 2 * 1024 * 1024,
    headers,
  };
}

interface SearchArgs {
  query: string;
  max_results?: number;
  language?: string;
  time_range?: "day" | "week" | "month" | "year";
}

export interface WebSearchResult {
  query: string;
  results: SearchResult[];
}

/** Builds `web_search`; `adapter` replaces the configured one (a search API of your own). */
export function createWebSearchTools(config: WebSearchConfig, options: { adapter?: SearchAdapter } = {}): Tool[] {
  const adapter = options.adapter ?? ADAPTERS[config.adapter]!;
  return [
    defineTool<SearchArgs, WebSearchResult>({
      name: "web_search",
      description: `Searches the web. Returns up to ${config.maxResults} results, each with title, url and snippet.`,
      idempotent: true,
      parameters: {
        type: "object",
        properties: {
          query: { type: "string", minLength: 1, maxLength: 400 },
          max_results: { type: "integer", minimum: 1, maximum: config.maxResults },
          language: { type: "string", description: 'Language code such as "en" or "de".', maxLength: 16 },
          time_range: { enum: ["day", "week", "month", "year"] },
        },
        required: ["query"],
        additionalProperties: false,
      },
      run: async (args, ctx) => {
        const q: SearchQuery = { query: args.query, maxResults: args.max_results ?? config.maxResults };
        if (args.language) q.language = args.language;
        if (args.time_range) q.timeRange = args.time_range;
        const req = adapter.request(config.endpoint, q);
        const deadline = deadlineSignal(config.timeoutMs, "web_search", ctx.signal);
        try {
          const reply = await exchange({
            method: req.method ?? "GET",
            url: req.url,
            headers: { accept: "application/json", "accept-encoding": "identity", ...req.headers, ...config.headers },
            ...(req.body !== undefined ? { body: Buffer.from(req.body) } : {}),
            signal: deadline.signal,
            maxResponseBytes: config.maxResponseBytes,
          });
          if (reply.status < 200 || reply.status > 299) {
            throw new WebSearchFailedError(`the endpoint answered HTTP ${reply.status} ${reply.statusText}`.trim(), {
              retryable: reply.status >= 500 || reply.status === 429,
            });
          }
          if (reply.truncated)
            throw new WebSearchFailedError(`the answer is larger than max_response_bytes (${config.maxResponseBytes})`, { retryable: false });
          let body: unknown;
          try {
            body = JSON.parse(reply.body.toString("utf8"));
          } catch (err) {
            throw new WebSearchFailedError("the endpoint did not answer JSON (for SearxNG, enable the json format under search.formats)", {
              cause: err,
              retryable: false,
            });
          }
          return { query: args.query, results: normalise(adapter.parse(body), q.maxResults) };
        } finally {
          deadline.dispose();
        }
      },
    }),
  ];
}

/** Keeps results with an http(s) URL, fills missing titles, shortens snippets, limits the count. */
function normalise(raw: Array<Partial<SearchResult>>, max: number): SearchResult[] {
  const out: SearchResult[] = [];
  for (const r of raw) {
    if (out.length >= max) break;
    if (typeof r.url !== "string" || !/^https?:\/\//i.test(r.url)) continue;
    const snippet = (r.snippet ?? "").replace(/\s+/g, " ").trim();
    out.push({
      title: (r.title ?? "").trim() || r.url,
      url: r.url,
      snippet: shortenText(snippet, SNIPPET_MAX),
    });
  }
  return out;
}
