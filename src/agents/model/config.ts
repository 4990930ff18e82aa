import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { ConfigError } from "../../core/errors.js";
import { isValidId } from "../../core/ids.js";
import { DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MODEL_MAX_RETRIES, DEFAULT_MODEL_TIMEOUT_MS, type OpenAiModelConfig } from "./openai-model.js";
import { SCHEDULE_POLICIES, type SchedulePolicy } from "./scheduler.js";

/**
 * `[models.<name>]` tables of `kova.toml`:
 *
 * ```toml
 * [models.fast]
 * base_url = "http://127.0.0.1:11434/v1"   # default https://api.openai.com/v1
 * api_key_env = "OPENAI_API_KEY"            # or api_key_file = "/run/secrets/openai"
 * model = "gpt-4.1-mini"
 * max_concurrency = 8                       # provider calls in flight per node (default 8)
 * scheduling = "round_robin"                # or priority, fair_share, deadline
 * price = { input_per_mtok = 0.4, output_per_mtok = 1.6 }   # USD per million tokens
 * timeout_ms = 300000                       # one attempt, first byte to last chunk
 * max_retries = 4                           # after the first attempt, for transient failures
 * stream = true
 * context_window = 1047576                  # tokens; unset: the agent's memory limit decides
 * max_response_bytes = 524288               # text + tool-call arguments of one response (default 512 KiB)
 * ```
 */

/** Price in USD per million tokens. */
export interface ModelPrice {
  inputPerMtok: number;
  outputPerMtok: number;
}

export interface ModelConfig extends OpenAiModelConfig {
  stream: boolean;
  timeoutMs: number;
  maxRetries: number;
  /** Provider calls in flight on one node. */
  maxConcurrency: number;
  /** How calls waiting for a slot are ordered. */
  scheduling: SchedulePolicy;
  price?: ModelPrice;
  contextWindow?: number;
}

export interface ParseModelsOptions {
  /** Where `api_key_env` is looked up (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Anchors a relative `api_key_file` (the config file's directory; default cwd). */
  baseDir?: string;
}

export const DEFAULT_BASE_URL = "https://api.openai.com/v1";
export const DEFAULT_MAX_CONCURRENCY = 8;

const KEYS = [
  "base_url",
  "api_key_env",
  "api_key_file",
  "model",
  "max_concurrency",
  "scheduling",
  "price",
  "timeout_ms",
  "max_retries",
  "stream",
  "context_window",
  "max_response_bytes",
];

/**
 * Validates the raw `models` table of a parsed `kova.toml` (snake_case, as the TOML
 * parser returns it) into model configs keyed by name. The API key is read here, from the
 * environment variable or file the entry names, and is kept out of JSON and logs: it is
 * a non-enumerable property of the returned object.
 * @throws ConfigError naming the key as written (e.g. `models.fast.base_url`) and the fix
 */
export function parseModelsConfig(raw: unknown, options: ParseModelsOptions = {}): Map<string, ModelConfig> {
  const out = new Map<string, ModelConfig>();
  if (raw === undefined) return out;
  const models = new TableReader(raw, "models");
  for (const name of models.keys()) {
    if (!isValidId(name)) {
      throw new ConfigError(`models.${name}`, "a model name may use only A-Z, a-z, 0-9, _ and - (it appears in events and signals): rename the table");
    }
    out.set(name, parseModel(name, models.table(name), options));
  }
  return out;
}

function parseModel(name: string, t: TableReader, options: ParseModelsOptions): ModelConfig {
  t.rejectUnknown(KEYS);
  const baseUrl = t.url("base_url") ?? DEFAULT_BASE_URL;
  const model = t.string("model");
  if (model === undefined) throw new ConfigError(t.path("model"), 'is required: the provider\'s model id, e.g. model = "gpt-4.1-mini"');
  const scheduling = t.string("scheduling") ?? "round_robin";
  if (!(SCHEDULE_POLICIES as readonly string[]).includes(scheduling)) {
    throw new ConfigError(t.path("scheduling"), `must be one of ${SCHEDULE_POLICIES.join(", ")}, not ${JSON.stringify(scheduling)}`);
  }
  const config: ModelConfig = {
    name,
    baseUrl,
    model,
    stream: t.boolean("stream") ?? true,
    timeoutMs: t.integer("timeout_ms", 100, 3_600_000) ?? DEFAULT_MODEL_TIMEOUT_MS,
    maxRetries: t.integer("max_retries", 0, 20) ?? DEFAULT_MODEL_MAX_RETRIES,
    maxConcurrency: t.integer("max_concurrency", 1, 10_000) ?? DEFAULT_MAX_CONCURRENCY,
    scheduling: scheduling as SchedulePolicy,
    // Past NATS's max_payload the answer could not be journaled or published: keep it below half of it.
    maxResponseBytes: t.integer("max_response_bytes", 1024, 64 * 1024 * 1024) ?? DEFAULT_MAX_RESPONSE_BYTES,
  };
  const contextWindow = t.integer("context_window", 256, 100_000_000);
  if (contextWindow !== undefined) config.contextWindow = contextWindow;
  if (t.has("price")) {
    const p = t.table("price");
    p.rejectUnknown(["input_per_mtok", "output_per_mtok"]);
    const inputPerMtok = p.number("input_per_mtok");
    const outputPerMtok = p.number("output_per_mtok");
    if (inputPerMtok === undefined || outputPerMtok === undefined) {
      throw new ConfigError(
        p.path(inputPerMtok === undefined ? "input_per_mtok" : "output_per_mtok"),
        "is required: give both prices in USD per million tokens, e.g. price = { input_per_mtok = 0.4, output_per_mtok = 1.6 }",
      );
    }
    config.price = { inputPerMtok, outputPerMtok };
  }
  const apiKey = readApiKey(t, baseUrl, options);
  // Non-enumerable: JSON.stringify, pino and spreads of the config never show the key.
  if (apiKey !== undefined) Object.defineProperty(config, "apiKey", { value: apiKey, enumerable: false });
  return config;
}

function readApiKey(t: TableReader, baseUrl: string, options: ParseModelsOptions): string | undefined {
  const envName = t.string("api_key_env");
  const file = t.string("api_key_file");
  if (envName !== undefined && file !== undefined) {
    throw new ConfigError(t.path("api_key_file"), "give the key either by api_key_env or by api_key_file, not both: remove one");
  }
  if (envName !== undefined) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(envName)) {
      throw new ConfigError(
        t.path("api_key_env"),
        `must name an environment variable (e.g. "OPENAI_API_KEY"), not ${JSON.stringify(envName)}; the key itself never goes in the file`,
      );
    }
    const value = (options.env ?? process.env)[envName];
    if (value) return value;
    if (isLoopback(baseUrl)) return undefined;
    throw new ConfigError(
      t.path("api_key_env"),
      `environment variable ${envName} is not set: export ${envName}=<key> before starting the node ` +
        `(only a loopback endpoint such as a local Ollama may run without a key; this one is ${new URL(baseUrl).host})`,
    );
  }
  if (file !== undefined) {
    const path = isAbsolute(file) ? file : resolve(options.baseDir ?? process.cwd(), file);
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (err) {
      throw new ConfigError(
        t.path("api_key_file"),
        `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path and that the node may read it`,
        { cause: err },
      );
    }
    const key = text.trim();
    if (key === "") throw new ConfigError(t.path("api_key_file"), `${path} is empty: write the API key into it`);
    return key;
  }
  return undefined;
}

/** True for localhost, 127.0.0.0/8 and ::1: endpoints on this machine, which may need no key. */
export function isLoopback(baseUrl: string): boolean {
  const host = new URL(baseUrl).hostname.replace(/^\[|\]$/g, "");
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** Reads one TOML table, naming every key by its full path in errors. */
class TableReader {
  private readonly t: Record<string, unknown>;

  constructor(
    value: unknown,
    private readonly prefix: string,
  ) {
    if (typeof value !== "object" || value === null || Array.isArray(value) || value instanceof Date) {
      throw new ConfigError(prefix, `must be a table ([${prefix}] or { ... }), not ${describe(value)}`);
    }
    this.t = value as Record<string, unknown>;
  }

  path(key: string): string {
    return `${this.prefix}.${key}`;
  }

  keys(): string[] {
    return Object.keys(this.t);
  }

  has(key: string): boolean {
    return this.t[key] !== undefined;
  }

  table(key: string): TableReader {
    return new TableReader(this.t[key], this.path(key));
  }

  rejectUnknown(allowed: readonly string[]): void {
    for (const k of this.keys()) {
      if (allowed.includes(k)) continue;
      const near = allowed.find((a) => a.replace(/_/g, "") === k.replace(/[_-]/g, "").toLowerCase());
      throw new ConfigError(this.path(k), near ? `unknown key: did you mean ${this.path(near)}?` : `unknown key; allowed here: ${allowed.join(", ")}`);
    }
  }

  string(key: string): string | undefined {
    const v = this.t[key];
    if (v === undefined) return undefined;
    if (typeof v !== "string" || v.trim() === "") throw new ConfigError(this.path(key), `must be a non-empty string, not ${describe(v)}`);
    return v;
  }

  boolean(key: string): boolean | undefined {
    const v = this.t[key];
    if (v === undefined || typeof v === "boolean") return v;
    throw new ConfigError(this.path(key), `must be true or false, not ${describe(v)}`);
  }

  number(key: string): number | undefined {
    const v = this.t[key];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new ConfigError(this.path(key), `must be a number of 0 or more, not ${describe(v)}`);
    return v;
  }

  integer(key: string, min: number, max: number): number | undefined {
    const v = this.t[key];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
      throw new ConfigError(this.path(key), `must be an integer from ${min} to ${max}, not ${describe(v)}`);
    }
    return v;
  }

  url(key: string): string | undefined {
    const v = this.string(key);
    if (v === undefined) return undefined;
    let url: URL;
    try {
      url = new URL(v);
    } catch {
      throw new ConfigError(this.path(key), `${JSON.stringify(v)} is not a URL: write it as http(s)://host:port/v1`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new ConfigError(this.path(key), `must be an http:// or https:// URL, not ${url.protocol}`);
    }
    if (url.username !== "" || url.password !== "") {
      throw new ConfigError(this.path(key), "must not carry credentials: remove user:password@ and name the key with api_key_env or api_key_file");
    }
    return v;
  }
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return "an array";
  if (value instanceof Date) return "a date";
  return typeof value === "string" ? JSON.stringify(value) : `${typeof value} ${String(value)}`;
}
