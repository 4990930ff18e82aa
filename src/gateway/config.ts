import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import {
  type ConfigTable,
  boolValue,
  intValue,
  rejectUnknown,
  stringList,
  stringValue,
  tableAt,
  tablesAt,
  ConfigError,
  isValidId,
  isLoopbackHost,
} from "../core/index.js";
import { hashKey, isKeyHash, type ApiKey } from "./keys.js";

/**
 * `[gateway]` in kova.toml: what `kova gateway start` (or a node with this table) serves.
 *
 * ```toml
 * [gateway]
 * listen = "0.0.0.0:8080"            # host:port (port 0: any free port)
 * public_url = "https://kova.example.com"   # base URL written into Agent Cards
 * auth = "keys"                      # or "none": only accepted on a loopback listen address
 * keys_bucket = true                 # also accept keys added with `kova gateway keys add`
 * max_body_bytes = 1048576
 * rate_per_minute = 600              # default per key; a key may set its own
 * max_instances = 100                # default quotas per key (a key may set its own): template
 * max_concurrent_runs = 16           #   instances it holds, runs at once, tokens its runs use
 * tokens_per_minute = 1000000        #   per minute (docs/security.md, "Quotas per principal")
 * task_timeout_ms = 600000           # how long a run may take before its task fails
 * ui = true                          # the web view at /ui
 *
 * [[gateway.keys]]
 * name = "ci"
 * hash = "sha256:9f86d0…"            # `kova gateway keys hash` prints it; or:
 * # key_env = "KOVA_CI_KEY"          # the key itself in the environment (hashed at start)
 * # key_file = "/run/secrets/ci.key" # the key itself in a file
 * agents = ["researcher"]            # agents this key may call (default: every agent)
 * rate_per_minute = 120
 * # admin = true                     # an operator's view of every principal (never by default)
 * # max_instances = 10               # this key's quotas
 *
 * [gateway.otel]
 * endpoint = "http://127.0.0.1:4318/v1/traces"
 * service_name = "kova"
 * ```
 */
export interface GatewayConfig {
  host: string;
  port: number;
  publicUrl?: string;
  auth: "keys" | "none";
  keys: ConfiguredKey[];
  keysBucket: boolean;
  maxBodyBytes: number;
  ratePerMinute: number;
  /** Quotas of a key that sets none of its own. */
  quotas: QuotaLimits;
  taskTimeoutMs: number;
  ui: boolean;
  otel?: OtelConfig;
}

/** A key of `[[gateway.keys]]`: the fields of a stored key (`hash` is `sha256:<hex>` of the key). */
export type ConfiguredKey = ApiKey;

/** What one principal may hold and spend (docs/security.md, "Quotas per principal"). */
export interface QuotaLimits {
  /** Template instances it holds (registered, not passivated). */
  maxInstances: number;
  /** Runs it has going at once (per gateway replica). */
  maxConcurrentRuns: number;
  /** Tokens (input + output) its runs may use per minute (per gateway replica). */
  tokensPerMinute: number;
}

export const DEFAULT_QUOTAS: QuotaLimits = { maxInstances: 100, maxConcurrentRuns: 16, tokensPerMinute: 1_000_000 };

export interface OtelConfig {
  /** OTLP/HTTP traces endpoint (`…/v1/traces`). */
  endpoint: string;
  serviceName: string;
  /** Extra headers for the exporter, e.g. an auth header taken from the environment. */
  headers: Record<string, string>;
}

export const DEFAULT_GATEWAY_PORT = 8080;

const KEYS = [
  "listen",
  "public_url",
  "auth",
  "keys",
  "keys_bucket",
  "max_body_bytes",
  "rate_per_minute",
  "max_instances",
  "max_concurrent_runs",
  "tokens_per_minute",
  "task_timeout_ms",
  "ui",
  "otel",
];

/**
 * Validates `[gateway]`. `baseDir` anchors relative key files; `env` supplies keys named by `key_env`.
 * @throws ConfigError naming the key and the fix (auth = "none" on a non-loopback address included)
 */
export function parseGatewayConfig(raw: ConfigTable | undefined, opts: { baseDir?: string; env?: NodeJS.ProcessEnv } = {}): GatewayConfig {
  const t = raw ?? {};
  const env = opts.env ?? process.env;
  const baseDir = opts.baseDir ?? process.cwd();
  rejectUnknown(t, KEYS, "gateway.");
  const { host, port } = listenAddress(stringValue(t.listen, "gateway.listen") ?? `127.0.0.1:${DEFAULT_GATEWAY_PORT}`);
  const auth = t.auth ?? "keys";
  if (auth !== "keys" && auth !== "none") throw new ConfigError("gateway.auth", `must be "keys" or "none", not ${JSON.stringify(auth)}`);
  requireLoopbackWithoutAuth({ auth, host, port });
  const publicUrl = stringValue(t.public_url, "gateway.public_url");
  if (publicUrl !== undefined && !/^https?:\/\/[^\s]+$/.test(publicUrl)) {
    throw new ConfigError("gateway.public_url", `must be an http(s) URL such as "https://kova.example.com", not ${JSON.stringify(publicUrl)}`);
  }
  const config: GatewayConfig = {
    host,
    port,
    auth,
    keys: keysFrom(t.keys, baseDir, env),
    keysBucket: boolValue(t.keys_bucket, "gateway.keys_bucket") ?? true,
    maxBodyBytes: intValue(t.max_body_bytes, "gateway.max_body_bytes", 1024, 64 * 1024 * 1024) ?? 1024 * 1024,
    ratePerMinute: intValue(t.rate_per_minute, "gateway.rate_per_minute", 1, 1_000_000) ?? 600,
    quotas: {
      maxInstances: intValue(t.max_instances, "gateway.max_instances", 1, 10_000_000) ?? DEFAULT_QUOTAS.maxInstances,
      maxConcurrentRuns: intValue(t.max_concurrent_runs, "gateway.max_concurrent_runs", 1, 1_000_000) ?? DEFAULT_QUOTAS.maxConcurrentRuns,
      tokensPerMinute: intValue(t.tokens_per_minute, "gateway.tokens_per_minute", 1, 1_000_000_000_000) ?? DEFAULT_QUOTAS.tokensPerMinute,
    },
    taskTimeoutMs: intValue(t.task_timeout_ms, "gateway.task_timeout_ms", 1000, 7 * 86_400_000) ?? 600_000,
    ui: boolValue(t.ui, "gateway.ui") ?? true,
  };
  if (publicUrl) config.publicUrl = publicUrl.replace(/\/+$/, "");
  if (t.otel !== undefined) config.otel = otelFrom(tableAt(t.otel, "gateway.otel"), env);
  return config;
}

function listenAddress(listen: string): { host: string; port: number } {
  const m = /^(\[[0-9a-fA-F:]+\]|[^:\s]+):(\d{1,5})$/.exec(listen);
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || port > 65535) throw new ConfigError("gateway.listen", `must be host:port such as "0.0.0.0:8080", not ${JSON.stringify(listen)}`);
  return { host: m[1]!.replace(/^\[|\]$/g, ""), port };
}

/**
 * No endpoint without a key unless only this machine can reach it: checked where a config
 * is parsed and again where a gateway starts (a config built in code is not parsed).
 * @throws ConfigError for `auth = "none"` on an address other machines can reach
 */
export function requireLoopbackWithoutAuth(c: Pick<GatewayConfig, "auth" | "host" | "port">): void {
  if (c.auth === "none" && !isLoopbackHost(c.host)) {
    throw new ConfigError(
      "gateway.auth",
      `"none" is only accepted on a loopback address, and listen is ${c.host}: use listen = "127.0.0.1:${c.port}", or keep auth = "keys" and add keys with kova gateway keys add`,
    );
  }
}

function keysFrom(raw: unknown, baseDir: string, env: NodeJS.ProcessEnv): ConfiguredKey[] {
  const seen = new Set<string>();
  return tablesAt(raw, "gateway.keys", "write each key as [[gateway.keys]] with name and hash").map(({ table: t, key }) => {
    rejectUnknown(
      t,
      ["name", "hash", "key_env", "key_file", "agents", "rate_per_minute", "admin", "max_instances", "max_concurrent_runs", "tokens_per_minute"],
      `${key}.`,
    );
    const name = t.name;
    if (!isValidId(name)) throw new ConfigError(`${key}.name`, 'is required: 1-128 characters of [A-Za-z0-9_-], e.g. name = "ci"');
    if (seen.has(name)) throw new ConfigError(`${key}.name`, `"${name}" is used twice`);
    seen.add(name);
    const sources = ["hash", "key_env", "key_file"].filter((k) => t[k] !== undefined);
    if (sources.length !== 1) {
      throw new ConfigError(key, "needs exactly one of hash (from kova gateway keys hash), key_env or key_file");
    }
    let hash: string;
    if (t.hash !== undefined) {
      hash = stringValue(t.hash, `${key}.hash`)!;
      if (!isKeyHash(hash)) throw new ConfigError(`${key}.hash`, 'must be "sha256:" and 64 hex digits, as kova gateway keys hash prints it');
    } else if (t.key_env !== undefined) {
      const name = stringValue(t.key_env, `${key}.key_env`)!;
      const value = env[name];
      if (!value) throw new ConfigError(`${key}.key_env`, `environment variable ${name} is not set: export it before starting the gateway`);
      hash = hashKey(value.trim());
    } else {
      const file = stringValue(t.key_file, `${key}.key_file`)!;
      const path = isAbsolute(file) ? file : resolve(baseDir, file);
      let text: string;
      try {
        text = readFileSync(path, "utf8");
      } catch (err) {
        throw new ConfigError(`${key}.key_file`, `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { cause: err });
      }
      if (text.trim() === "") throw new ConfigError(`${key}.key_file`, `${path} is empty`);
      hash = hashKey(text.trim());
    }
    const out: ConfiguredKey = { name, hash };
    const agents = stringList(t.agents, `${key}.agents`, '["researcher"]', (a, k) => {
      if (!isValidId(a) && a !== "*") throw new ConfigError(k, `${JSON.stringify(a)} is not an agent id`);
      return a;
    });
    if (agents && !agents.includes("*")) out.agents = agents;
    const rate = intValue(t.rate_per_minute, `${key}.rate_per_minute`, 1, 1_000_000);
    if (rate !== undefined) out.ratePerMinute = rate;
    if (boolValue(t.admin, `${key}.admin`) === true) out.admin = true;
    const maxInstances = intValue(t.max_instances, `${key}.max_instances`, 1, 10_000_000);
    if (maxInstances !== undefined) out.maxInstances = maxInstances;
    const maxRuns = intValue(t.max_concurrent_runs, `${key}.max_concurrent_runs`, 1, 1_000_000);
    if (maxRuns !== undefined) out.maxConcurrentRuns = maxRuns;
    const tokens = intValue(t.tokens_per_minute, `${key}.tokens_per_minute`, 1, 1_000_000_000_000);
    if (tokens !== undefined) out.tokensPerMinute = tokens;
    return out;
  });
}

function otelFrom(t: ConfigTable, env: NodeJS.ProcessEnv): OtelConfig {
  rejectUnknown(t, ["endpoint", "service_name", "headers_env"], "gateway.otel.");
  const endpoint = stringValue(t.endpoint, "gateway.otel.endpoint");
  if (!endpoint || !/^https?:\/\/\S+$/.test(endpoint)) {
    throw new ConfigError("gateway.otel.endpoint", 'is required: the OTLP/HTTP traces URL, e.g. endpoint = "http://127.0.0.1:4318/v1/traces"');
  }
  const headers: Record<string, string> = {};
  const headersEnv = stringValue(t.headers_env, "gateway.otel.headers_env");
  if (headersEnv) {
    // OTEL_EXPORTER_OTLP_HEADERS format: k1=v1,k2=v2 (the values are secrets: never logged)
    const value = env[headersEnv];
    if (!value) throw new ConfigError("gateway.otel.headers_env", `environment variable ${headersEnv} is not set`);
    for (const pair of value.split(",")) {
      const i = pair.indexOf("=");
      if (i > 0) headers[pair.slice(0, i).trim()] = pair.slice(i + 1).trim();
    }
  }
  return { endpoint, serviceName: stringValue(t.service_name, "gateway.otel.service_name") ?? "kova", headers };
}
