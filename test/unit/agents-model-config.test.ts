import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parse as parseToml } from "smol-toml";
import { describe, expect, it } from "vitest";
import { parseModelsConfig } from "../../src/agents/model/index.js";
import { configError } from "../fixtures/config-error.js";
import { tempDir } from "../fixtures/disposable.js";

/** Parses `[models.*]` TOML the way the node config parser hands it over. */
function models(toml: string, env: NodeJS.ProcessEnv = {}, baseDir?: string) {
  const doc = parseToml(toml) as { models?: unknown };
  return parseModelsConfig(doc.models, { env, ...(baseDir ? { baseDir } : {}) });
}

describe("models config", () => {
  it("config - reads docs/models.md's [models.fast] as written, with defaults for the rest", () => {
    const m = models(
      `[models.fast]
base_url = "https://llm.example.com/v1"
api_key_env = "OPENAI_API_KEY"
model = "gpt-4.1-mini"
max_concurrency = 8
price = { input_per_mtok = 0.4, output_per_mtok = 1.6 }
`,
      { OPENAI_API_KEY: "sk-secret-123" },
    );
    const fast = m.get("fast")!;
    expect(fast).toEqual({
      name: "fast",
      baseUrl: "https://llm.example.com/v1",
      model: "gpt-4.1-mini",
      maxConcurrency: 8,
      price: { inputPerMtok: 0.4, outputPerMtok: 1.6 },
      stream: true,
      timeoutMs: 300_000,
      maxRetries: 4,
      scheduling: "round_robin",
      maxResponseBytes: 512 * 1024,
    });
    expect(fast.apiKey).toBe("sk-secret-123");
  });

  it("config - the API key never appears in JSON or spreads of the config", () => {
    const fast = models(`[models.fast]\nmodel = "m"\napi_key_env = "K"\n`, { K: "sk-very-secret" }).get("fast")!;
    expect(JSON.stringify(fast)).not.toContain("sk-very-secret");
    expect(JSON.stringify([...models(`[models.fast]\nmodel = "m"\napi_key_env = "K"\n`, { K: "sk-very-secret" })])).not.toContain("sk-very");
  });

  it("config - reads every optional key", () => {
    const m = models(`[models.local]
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.1:8b"
timeout_ms = 60000
max_retries = 0
stream = false
context_window = 131072
scheduling = "fair_share"
`).get("local")!;
    expect(m).toMatchObject({ timeoutMs: 60_000, maxRetries: 0, stream: false, contextWindow: 131_072, scheduling: "fair_share" });
    expect(m.apiKey).toBeUndefined();
  });

  it("config - a missing key variable is fine for a loopback endpoint and an error for a remote one", () => {
    const local = models(`[models.ollama]\nbase_url = "http://localhost:11434/v1"\nmodel = "qwen"\napi_key_env = "NOPE"\n`);
    expect(local.get("ollama")!.apiKey).toBeUndefined();

    const err = configError(() => models(`[models.fast]\nbase_url = "https://api.openai.com/v1"\nmodel = "gpt-4o"\napi_key_env = "OPENAI_API_KEY"\n`));
    expect(err.key).toBe("models.fast.api_key_env");
    expect(err.message).toContain("export OPENAI_API_KEY=");
    expect(err.message).toContain("loopback");
  });

  it("config - reads the key from api_key_file, relative to the config's directory", async () => {
    await using tmp = await tempDir("kova-models-");
    const dir = tmp.path;
    await writeFile(join(dir, "openai.key"), "sk-from-file\n");
    const m = models(`[models.fast]\nmodel = "gpt-4o"\napi_key_file = "openai.key"\n`, {}, dir);
    expect(m.get("fast")!.apiKey).toBe("sk-from-file");

    const missing = configError(() => models(`[models.fast]\nmodel = "gpt-4o"\napi_key_file = "absent.key"\n`, {}, dir));
    expect(missing.key).toBe("models.fast.api_key_file");
    expect(missing.message).toContain("ENOENT");

    await writeFile(join(dir, "empty.key"), "  \n");
    expect(configError(() => models(`[models.fast]\nmodel = "gpt-4o"\napi_key_file = "empty.key"\n`, {}, dir)).message).toContain("is empty");
  });

  it.each([
    [`[models.fast]\nbase_url = "http://127.0.0.1/v1"\n`, "models.fast.model", "is required"],
    [`[models.fast]\nmodel = "m"\nbase_url = "ftp://x/v1"\n`, "models.fast.base_url", "http:// or https://"],
    [`[models.fast]\nmodel = "m"\nbase_url = "not a url"\n`, "models.fast.base_url", "is not a URL"],
    [`[models.fast]\nmodel = "m"\nbase_url = "https://user:sk-1@llm.example.com/v1"\n`, "models.fast.base_url", "must not carry credentials"],
    [`[models.fast]\nmodel = "m"\nmax_concurrency = 0\n`, "models.fast.max_concurrency", "from 1 to 10000"],
    [`[models.fast]\nmodel = "m"\nmax_concurrency = 2.5\n`, "models.fast.max_concurrency", "integer"],
    [`[models.fast]\nmodel = "m"\ntimeout_ms = "30s"\n`, "models.fast.timeout_ms", "integer"],
    [`[models.fast]\nmodel = "m"\nstream = "yes"\n`, "models.fast.stream", "true or false"],
    [`[models.fast]\nmodel = "m"\nscheduling = "lottery"\n`, "models.fast.scheduling", "round_robin, priority, fair_share, deadline"],
    [`[models.fast]\nmodel = "m"\nprice = { input_per_mtok = 0.4 }\n`, "models.fast.price.output_per_mtok", "both prices"],
    [`[models.fast]\nmodel = "m"\nprice = { input_per_mtok = -1, output_per_mtok = 1 }\n`, "models.fast.price.input_per_mtok", "0 or more"],
    [`[models.fast]\nmodel = "m"\nprice = { input = 1, output_per_mtok = 1 }\n`, "models.fast.price.input", "unknown key"],
    [`[models.fast]\nmodel = "m"\nmaxConcurrency = 3\n`, "models.fast.maxConcurrency", "did you mean models.fast.max_concurrency?"],
    [`[models.fast]\nmodel = "m"\napi_key_env = "K"\napi_key_file = "k"\n`, "models.fast.api_key_file", "not both"],
    [`[models.fast]\nmodel = "m"\napi_key_env = "sk-123 abc"\n`, "models.fast.api_key_env", "must name an environment variable"],
    [`[models."a.b"]\nmodel = "m"\n`, "models.a.b", "rename the table"],
    [`models = 3\n`, "models", "must be a table"],
    [`[models]\nfast = "gpt-4o"\n`, "models.fast", "must be a table"],
  ])("config - rejects %j naming %s", (toml, key, fragment) => {
    const err = configError(() => models(toml, { K: "x" }));
    expect(err.key).toBe(key);
    expect(err.code).toBe("INVALID_CONFIG");
    expect(err.message).toContain(fragment);
  });

  it("config - no [models] table means no models", () => {
    expect(models(`[node]\nid = "n1"\n`).size).toBe(0);
  });

  it("config - an endpoint on this machine (localhost, 127.0.0.0/8, [::1]) may go without its key; any other needs it", () => {
    for (const url of ["http://localhost:8080/v1", "http://127.1.2.3/v1", "http://[::1]:8000/v1"]) {
      expect(models(`[models.local]\nbase_url = "${url}"\nmodel = "m"\napi_key_env = "UNSET_KEY"\n`).get("local")!.apiKey).toBeUndefined();
    }
    for (const url of ["http://10.0.0.5/v1", "https://localhost.example.com/v1"]) {
      const err = configError(() => models(`[models.remote]\nbase_url = "${url}"\nmodel = "m"\napi_key_env = "UNSET_KEY"\n`));
      expect(err.key).toBe("models.remote.api_key_env");
    }
  });
});
