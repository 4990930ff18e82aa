import { readFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import {
  boolAt,
  intAt,
  keyOf,
  numberAt,
  rejectUnknown,
  stringAt,
  tableAt,
  type ConfigTable,
  ConfigError,
  isValidId,
  isLoopbackHost,
} from "../../core/index.js";
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
  const models = tableAt(raw, "models");
  for (const name of Object.keys(models)) {
    if (!isValidId(name)) {
      throw new ConfigError(`models.${name}`, "a model name may use only A-Z, a-z, 0-9, _ and - (it appears in events and signals): rename the table");
    }
    out.set(name, parseModel(name, tableAt(models[name], `models.${name}`), `models.${name}`, options));
  }
  return out;
}

function parseModel(name: string, t: ConfigTable, key: string, options: ParseModelsOptions): ModelConfig {
  rejectUnknown(t, KEYS, `${key}.`);
  const baseUrl = urlAt(t, key, "base_url") ?? DEFAULT_BASE_URL;
  const model = stringAt(t, key, "model");
  if (model === undefined) throw new ConfigError(keyOf(key, "model"), 'is required: the provider\'s model id, e.g. model = "gpt-4.1-mini"');
  const scheduling = stringAt(t, key, "scheduling") ?? "round_robin";
  if (!(SCHEDULE_POLICIES as readonly string[]).includes(scheduling)) {
    throw new ConfigError(keyOf(key, "scheduling"), `must be one of ${SCHEDULE_POLICIES.join(", ")}, not ${JSON.stringify(scheduling)}`);
  }
  const config: ModelConfig = {
    name,
    baseUrl,
    model,
    stream: boolAt(t, key, "stream") ?? true,
    timeoutMs: intAt(t, key, "timeout_ms", 100, 3_600_000) ?? DEFAULT_MODEL_TIMEOUT_MS,
    maxRetries: intAt(t, key, "max_retries", 0, 20) ?? DEFAULT_MODEL_MAX_RETRIES,
    maxConcurrency: intAt(t, key, "max_concurrency", 1, 10_000) ?? DEFAULT_MAX_CONCURRENCY,
    scheduling: scheduling as SchedulePolicy,
    // Past NATS's max_payload the answer could not be journaled or published: keep it below half of it.
    maxResponseBytes: intAt(t, key, "max_response_bytes", 1024, 64 * 1024 * 1024) ?? DEFAULT_MAX_RESPONSE_BYTES,
  };
  const contextWindow = intAt(t, key, "context_window", 256, 100_000_000);
  if (contextWindow !== undefined) config.contextWindow = contextWindow;
  if (t.price !== undefined) {
    const priceKey = keyOf(key, "price");
    const p = tableAt(t.price, priceKey);
    rejectUnknown(p, ["input_per_mtok", "output_per_mtok"], `${priceKey}.`);
    const inputPerMtok = numberAt(p, priceKey, "input_per_mtok");
    const outputPerMtok = numberAt(p, priceKey, "output_per_mtok");
    if (inputPerMtok === undefined || outputPerMtok === undefined) {
      throw new ConfigError(
        keyOf(priceKey, inputPerMtok === undefined ? "input_per_mtok" : "output_per_mtok"),
        "is required: give both prices in USD per million tokens, e.g. price = { input_per_mtok = 0.4, output_per_mtok = 1.6 }",
      );
    }
    config.price = { inputPerMtok, outputPerMtok };
  }
  const apiKey = readApiKey(t, key, baseUrl, options);
  // Non-enumerable: JSON.stringify, pino and spreads of the config never show the key.
  if (apiKey !== undefined) Object.defineProperty(config, "apiKey", { value: apiKey, enumerable: false });
  return config;
}

function readApiKey(t: ConfigTable, key: string, baseUrl: string, options: ParseModelsOptions): string | undefined {
  const envName = stringAt(t, key, "api_key_env");
  const file = stringAt(t, key, "api_key_file");
  if (envName !== undefined && file !== undefined) {
    throw new ConfigError(keyOf(key, "api_key_file"), "give the key either by api_key_env or by api_key_file, not both: remove one");
  }
  if (envName !== undefined) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(envName)) {
      throw new ConfigError(
        keyOf(key, "api_key_env"),
        `must name an environment variable (e.g. "OPENAI_API_KEY"), not ${JSON.stringify(envName)}; the key itself never goes in the file`,
      );
    }
    const value = (options.env ?? process.env)[envName];
    if (value) return value;
    if (isLoopbackHost(new URL(baseUrl).hostname)) return undefined;
    throw new ConfigError(
      keyOf(key, "api_key_env"),
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
        keyOf(key, "api_key_file"),
        `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path and that the node may read it`,
        { cause: err },
      );
    }
    const apiKey = text.trim();
    if (apiKey === "") throw new ConfigError(keyOf(key, "api_key_file"), `${path} is empty: write the API key into it`);
    return apiKey;
  }
  return undefined;
}

/**
 * An endpoint URL: http(s), without credentials (the key is named by api_key_env or api_key_file).
 * @throws ConfigError unless the value is absent or such a URL
 */
function urlAt(t: ConfigTable, prefix: string, name: string): string | undefined {
  const v = stringAt(t, prefix, name);
  if (v === undefined) return undefined;
  const key = keyOf(prefix, name);
  let url: URL;
  try {
    url = new URL(v);
  } catch {
    throw new ConfigError(key, `${JSON.stringify(v)} is not a URL: write it as http(s)://host:port/v1`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(key, `must be an http:// or https:// URL, not ${url.protocol}`);
  }
  if (url.username !== "" || url.password !== "") {
    throw new ConfigError(key, "must not carry credentials: remove user:password@ and name the key with api_key_env or api_key_file");
  }
  return v;
}
